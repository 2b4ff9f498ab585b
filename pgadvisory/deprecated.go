package pgadvisory

import (
	"context"
	"database/sql"
	"errors"
	"reflect"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The package-level functions and the Lock methods below are the front
// doors of before Locker. Each is a Locker call on the pool's package
// Locker (package_lockers.go), whose state takes its shared session
// connections from SetSessionConns and its observers from SetObserver and
// SetObserverFor.

// stdlibLocker is the package Locker of db.
func stdlibLocker(db *sql.DB) Locker[*sql.Tx] {
	return Locker[*sql.Tx]{d: stdlibDriver{db: db}, s: packageStateOf(db)}
}

// pgxLocker is the package Locker of pool.
func pgxLocker(pool *pgxpool.Pool) Locker[pgx.Tx] {
	return Locker[pgx.Tx]{d: pgxDriver{pool: pool}, s: packageStateOf(pool)}
}

// RunExclusive is [Locker.RunExclusive] on db's pool, with lockID as the
// lock.
//
// Deprecated: use New(Stdlib(db)) and [Locker.RunExclusive].
func RunExclusive(ctx context.Context, db *sql.DB, lockID int64, fn func(*sql.Tx) error, opts ...Option) error {
	l := stdlibLocker(db)
	return l.RunExclusive(ctx, ID(lockID), fn, opts...)
}

// RunExclusivePgx is [Locker.RunExclusive] on a pgx pool.
//
// Deprecated: use New(Pgx(pool)) and [Locker.RunExclusive].
func RunExclusivePgx(ctx context.Context, pool *pgxpool.Pool, lockID int64, fn func(pgx.Tx) error, opts ...Option) error {
	l := pgxLocker(pool)
	return l.RunExclusive(ctx, ID(lockID), fn, opts...)
}

// RunExclusive is [Locker.RunExclusive] on l.
//
// Deprecated: use New(Stdlib(db)) and [Locker.RunExclusive] with l.
func (l Lock) RunExclusive(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error, opts ...Option) error {
	lk := stdlibLocker(db)
	return lk.RunExclusive(ctx, l, fn, opts...)
}

// RunExclusivePgx is [Locker.RunExclusive] on l for a pgx pool.
//
// Deprecated: use New(Pgx(pool)) and [Locker.RunExclusive] with l.
func (l Lock) RunExclusivePgx(ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx) error, opts ...Option) error {
	lk := pgxLocker(pool)
	return lk.RunExclusive(ctx, l, fn, opts...)
}

// RunExclusiveRepo runs fn with a repository bound to the lock transaction
// of [Locker.RunExclusive]. newRepo builds the repository from the
// transaction (sqlc's New or WithTx); D, its executor type, must be
// implemented by *sql.Tx, which is checked before anything is sent.
//
// Deprecated: use New(Stdlib(db)) and [Locker.RunExclusive] with
// func(tx *sql.Tx) error { return fn(queries.WithTx(tx)) }.
func RunExclusiveRepo[D, R any](ctx context.Context, db *sql.DB, lockID int64, newRepo func(D) R, fn func(R) error, opts ...Option) error {
	if err := checkExecutor[D](reflect.TypeFor[*sql.Tx](), newRepo == nil, fn == nil); err != nil {
		return (&callState{ids: []int64{lockID}}).invalid(OpBegin, err)
	}
	l := stdlibLocker(db)
	return l.RunExclusive(ctx, ID(lockID), func(tx *sql.Tx) error {
		return fn(newRepo(any(tx).(D)))
	}, opts...)
}

// RunExclusiveRepoPgx is [RunExclusiveRepo] for a pgx pool: D must be
// implemented by [pgx.Tx] (sqlc's pgx/v5 DBTX is).
//
// Deprecated: use New(Pgx(pool)) and [Locker.RunExclusive] with
// func(tx pgx.Tx) error { return fn(queries.WithTx(tx)) }.
func RunExclusiveRepoPgx[D, R any](ctx context.Context, pool *pgxpool.Pool, lockID int64, newRepo func(D) R, fn func(R) error, opts ...Option) error {
	if err := checkExecutor[D](reflect.TypeFor[pgx.Tx](), newRepo == nil, fn == nil); err != nil {
		return (&callState{ids: []int64{lockID}}).invalid(OpBegin, err)
	}
	l := pgxLocker(pool)
	return l.RunExclusive(ctx, ID(lockID), func(tx pgx.Tx) error {
		return fn(newRepo(any(tx).(D)))
	}, opts...)
}

// RunOnce is [Locker.RunOnce] on db's pool, with lockID as the lock.
//
// Deprecated: use New(Stdlib(db)) and [Locker.RunOnce].
func RunOnce(ctx context.Context, db *sql.DB, lockID int64, window string, fn func(*sql.Tx) error, opts ...Option) error {
	l := stdlibLocker(db)
	return l.RunOnce(ctx, ID(lockID), window, fn, opts...)
}

// RunOncePgx is [Locker.RunOnce] on a pgx pool.
//
// Deprecated: use New(Pgx(pool)) and [Locker.RunOnce].
func RunOncePgx(ctx context.Context, pool *pgxpool.Pool, lockID int64, window string, fn func(pgx.Tx) error, opts ...Option) error {
	l := pgxLocker(pool)
	return l.RunOnce(ctx, ID(lockID), window, fn, opts...)
}

// RunOnce is [Locker.RunOnce] on l.
//
// Deprecated: use New(Stdlib(db)) and [Locker.RunOnce] with l.
func (l Lock) RunOnce(ctx context.Context, db *sql.DB, window string, fn func(*sql.Tx) error, opts ...Option) error {
	lk := stdlibLocker(db)
	return lk.RunOnce(ctx, l, window, fn, opts...)
}

// RunOncePgx is [Locker.RunOnce] on l for a pgx pool.
//
// Deprecated: use New(Pgx(pool)) and [Locker.RunOnce] with l.
func (l Lock) RunOncePgx(ctx context.Context, pool *pgxpool.Pool, window string, fn func(pgx.Tx) error, opts ...Option) error {
	lk := pgxLocker(pool)
	return lk.RunOnce(ctx, l, window, fn, opts...)
}

// RunSession is [Locker.RunSession] on db's pool, with lockID as the lock.
// Its session locks share db's connections as [SetSessionConns] says.
//
// Deprecated: use New(Stdlib(db)) and [Locker.RunSession].
func RunSession(ctx context.Context, db *sql.DB, lockID int64, fn func(context.Context) error, opts ...Option) error {
	l := stdlibLocker(db)
	return l.RunSession(ctx, ID(lockID), fn, opts...)
}

// RunSessionPgx is [Locker.RunSession] on a pgx pool.
//
// Deprecated: use New(Pgx(pool)) and [Locker.RunSession].
func RunSessionPgx(ctx context.Context, pool *pgxpool.Pool, lockID int64, fn func(context.Context) error, opts ...Option) error {
	l := pgxLocker(pool)
	return l.RunSession(ctx, ID(lockID), fn, opts...)
}

// RunSession is [Locker.RunSession] on l.
//
// Deprecated: use New(Stdlib(db)) and [Locker.RunSession] with l.
func (l Lock) RunSession(ctx context.Context, db *sql.DB, fn func(context.Context) error, opts ...Option) error {
	lk := stdlibLocker(db)
	return lk.RunSession(ctx, l, fn, opts...)
}

// RunSessionPgx is [Locker.RunSession] on l for a pgx pool.
//
// Deprecated: use New(Pgx(pool)) and [Locker.RunSession] with l.
func (l Lock) RunSessionPgx(ctx context.Context, pool *pgxpool.Pool, fn func(context.Context) error, opts ...Option) error {
	lk := pgxLocker(pool)
	return lk.RunSession(ctx, l, fn, opts...)
}

// Lead is [Locker.Lead] on db's pool, with lockID as the lock.
//
// Deprecated: use New(Stdlib(db)) and [Locker.Lead].
func Lead(ctx context.Context, db *sql.DB, lockID int64, fn func(ctx context.Context, term int64) error, opts ...Option) error {
	l := stdlibLocker(db)
	return l.Lead(ctx, ID(lockID), fn, opts...)
}

// LeadPgx is [Locker.Lead] on a pgx pool.
//
// Deprecated: use New(Pgx(pool)) and [Locker.Lead].
func LeadPgx(ctx context.Context, pool *pgxpool.Pool, lockID int64, fn func(ctx context.Context, term int64) error, opts ...Option) error {
	l := pgxLocker(pool)
	return l.Lead(ctx, ID(lockID), fn, opts...)
}

// Lead is [Locker.Lead] on l.
//
// Deprecated: use New(Stdlib(db)) and [Locker.Lead] with l.
func (l Lock) Lead(ctx context.Context, db *sql.DB, fn func(ctx context.Context, term int64) error, opts ...Option) error {
	lk := stdlibLocker(db)
	return lk.Lead(ctx, l, fn, opts...)
}

// LeadPgx is [Locker.Lead] on l for a pgx pool.
//
// Deprecated: use New(Pgx(pool)) and [Locker.Lead] with l.
func (l Lock) LeadPgx(ctx context.Context, pool *pgxpool.Pool, fn func(ctx context.Context, term int64) error, opts ...Option) error {
	lk := pgxLocker(pool)
	return lk.Lead(ctx, l, fn, opts...)
}

// Campaign is [Locker.Campaign] on db's pool, with lockID as the lock.
//
// Deprecated: use New(Stdlib(db)) and [Locker.Campaign].
func Campaign(ctx context.Context, db *sql.DB, lockID int64, fn func(ctx context.Context, term int64) error, opts ...Option) error {
	l := stdlibLocker(db)
	return l.Campaign(ctx, ID(lockID), fn, opts...)
}

// CampaignPgx is [Locker.Campaign] on a pgx pool.
//
// Deprecated: use New(Pgx(pool)) and [Locker.Campaign].
func CampaignPgx(ctx context.Context, pool *pgxpool.Pool, lockID int64, fn func(ctx context.Context, term int64) error, opts ...Option) error {
	l := pgxLocker(pool)
	return l.Campaign(ctx, ID(lockID), fn, opts...)
}

// Campaign is [Locker.Campaign] on l.
//
// Deprecated: use New(Stdlib(db)) and [Locker.Campaign] with l.
func (l Lock) Campaign(ctx context.Context, db *sql.DB, fn func(ctx context.Context, term int64) error, opts ...Option) error {
	lk := stdlibLocker(db)
	return lk.Campaign(ctx, l, fn, opts...)
}

// CampaignPgx is [Locker.Campaign] on l for a pgx pool.
//
// Deprecated: use New(Pgx(pool)) and [Locker.Campaign] with l.
func (l Lock) CampaignPgx(ctx context.Context, pool *pgxpool.Pool, fn func(ctx context.Context, term int64) error, opts ...Option) error {
	lk := pgxLocker(pool)
	return lk.Campaign(ctx, l, fn, opts...)
}

// CurrentLeader is [Locker.CurrentLeader] on db's pool, with lockID as the
// lock.
//
// Deprecated: use New(Stdlib(db)) and [Locker.CurrentLeader].
func CurrentLeader(ctx context.Context, db *sql.DB, lockID int64) (Leader, error) {
	l := stdlibLocker(db)
	return l.CurrentLeader(ctx, ID(lockID))
}

// CurrentLeaderPgx is [Locker.CurrentLeader] on a pgx pool.
//
// Deprecated: use New(Pgx(pool)) and [Locker.CurrentLeader].
func CurrentLeaderPgx(ctx context.Context, pool *pgxpool.Pool, lockID int64) (Leader, error) {
	l := pgxLocker(pool)
	return l.CurrentLeader(ctx, ID(lockID))
}

// CurrentLeader is [Locker.CurrentLeader] on l.
//
// Deprecated: use New(Stdlib(db)) and [Locker.CurrentLeader] with l.
func (l Lock) CurrentLeader(ctx context.Context, db *sql.DB) (Leader, error) {
	lk := stdlibLocker(db)
	return lk.CurrentLeader(ctx, l)
}

// CurrentLeaderPgx is [Locker.CurrentLeader] on l for a pgx pool.
//
// Deprecated: use New(Pgx(pool)) and [Locker.CurrentLeader] with l.
func (l Lock) CurrentLeaderPgx(ctx context.Context, pool *pgxpool.Pool) (Leader, error) {
	lk := pgxLocker(pool)
	return lk.CurrentLeader(ctx, l)
}

// RunFenced is [Locker.RunFenced] on db's pool.
//
// Deprecated: use New(Stdlib(db)) and [Locker.RunFenced].
func RunFenced(ctx context.Context, db *sql.DB, token int64, fn func(*sql.Tx) error) error {
	l := stdlibLocker(db)
	return l.RunFenced(ctx, token, fn)
}

// RunFencedPgx is [Locker.RunFenced] on a pgx pool.
//
// Deprecated: use New(Pgx(pool)) and [Locker.RunFenced].
func RunFencedPgx(ctx context.Context, pool *pgxpool.Pool, token int64, fn func(pgx.Tx) error) error {
	l := pgxLocker(pool)
	return l.RunFenced(ctx, token, fn)
}

// RunFenced is [Locker.RunFenced] for a write under l's token: its
// observers see l's name and ID, and l's own observer ([Lock.With]) or its
// lock set's ([SetObserverFor]) observes it.
//
// Deprecated: use New(Stdlib(db)) and [Locker.RunFenced].
func (l Lock) RunFenced(ctx context.Context, db *sql.DB, token int64, fn func(*sql.Tx) error) error {
	if db == nil || fn == nil {
		return fencedInvalid(token, "nil db or fn")
	}
	c, err := l.fencedWrite(packageStateOf(db))
	if err != nil {
		return err
	}
	return stdlibDriver{db: db}.runFenced(ctx, c, token, fn)
}

// RunFencedPgx is [Lock.RunFenced] for a pgx pool.
//
// Deprecated: use New(Pgx(pool)) and [Locker.RunFenced].
func (l Lock) RunFencedPgx(ctx context.Context, pool *pgxpool.Pool, token int64, fn func(pgx.Tx) error) error {
	if pool == nil || fn == nil {
		return fencedInvalid(token, "nil pool or fn")
	}
	c, err := l.fencedWrite(packageStateOf(pool))
	if err != nil {
		return err
	}
	return pgxDriver{pool: pool}.runFenced(ctx, c, token, fn)
}

// SetFencingToken is [Locker.SetFencingToken].
//
// Deprecated: use [Locker.SetFencingToken].
func SetFencingToken(ctx context.Context, tx *sql.Tx, token int64) error {
	l := stdlibLocker(nil)
	return l.SetFencingToken(ctx, tx, token)
}

// SetFencingTokenPgx is [Locker.SetFencingToken] for pgx.
//
// Deprecated: use [Locker.SetFencingToken].
func SetFencingTokenPgx(ctx context.Context, tx pgx.Tx, token int64) error {
	l := pgxLocker(nil)
	return l.SetFencingToken(ctx, tx, token)
}

// FencingToken is [Locker.FencingToken] for the lock transactions of the
// package-level functions and Lock methods: it does not know the
// transactions of a Locker made by [New] (ask that Locker).
//
// Deprecated: use [Locker.FencingToken].
func FencingToken(tx *sql.Tx) (int64, bool) {
	if tx == nil {
		return 0, false
	}
	return packageToken(tx)
}

// FencingTokenPgx is [FencingToken] for pgx.
//
// Deprecated: use [Locker.FencingToken].
func FencingTokenPgx(tx pgx.Tx) (int64, bool) {
	if tx == nil {
		return 0, false
	}
	return packageToken(tx)
}

// SetSessionConns sets how many server connections the session locks of
// the package-level functions and Lock methods on db share: at most n, 2
// by default (see [WithSessionConns]), from the calls that start
// afterwards. It does not keep db alive: it is forgotten once db is
// garbage-collected. A Locker's own setting is
// [WithSessionConns]; SetSessionConns does not change it.
//
// Deprecated: use New(Stdlib(db), WithSessionConns(n)).
func SetSessionConns(db *sql.DB, n int) error {
	if db == nil {
		return sessionConnsInvalid(errors.New("nil *sql.DB"))
	}
	return setSessionConnsOf(packageStateOf(db), n)
}

// SetSessionConnsPgx is [SetSessionConns] for a pgx pool.
//
// Deprecated: use New(Pgx(pool), WithSessionConns(n)).
func SetSessionConnsPgx(pool *pgxpool.Pool, n int) error {
	if pool == nil {
		return sessionConnsInvalid(errors.New("nil *pgxpool.Pool"))
	}
	return setSessionConnsOf(packageStateOf(pool), n)
}
