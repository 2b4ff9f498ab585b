package pgadvisory

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Driver is a connection pool as a [Locker] uses it, and fixes the type of
// the transaction that fn receives (TTx): [*sql.Tx] for [Stdlib], [pgx.Tx]
// for [Pgx]. It is sealed: only this package implements it, so a Locker
// can rely on what each driver sends (see the round trips stated on each
// Locker method).
type Driver[TTx any] interface {
	// handle is the pool (*sql.DB or *pgxpool.Pool), what names it in
	// errors, and whether it is nil.
	handle() (pool any, name string, isNil bool)
	// runTx runs the transaction-lock protocol (protocol.go) for the
	// resolved call c, with fn in the lock transaction.
	runTx(ctx context.Context, c *callState, fn func(TTx) error) error
	// sessions opens the dedicated connections of session locks.
	sessions() func(context.Context) (sessionConn, error)
	// poolRoom reports whether the pool can hand out a connection now
	// (one idle, or fewer open than its limit), without waiting.
	poolRoom() bool
	// nilTx reports a nil transaction.
	nilTx(tx TTx) bool
	// setFencingToken makes tx carry token.
	setFencingToken(ctx context.Context, tx TTx, token int64) error
	// runFenced is a fenced write's transaction: BEGIN, the token, fn,
	// COMMIT.
	runFenced(ctx context.Context, c *callState, token int64, fn func(TTx) error) error
	// currentLeader reads pgadvisory.current_leader for lockID.
	currentLeader(ctx context.Context, lockID int64, name string) (Leader, error)
	// lockTxRow runs LockTx's statement in tx.
	lockTxRow(ctx context.Context, tx TTx, query string, args []any) (lockTxResult, error)
}

// runTxObserved runs the transaction-lock protocol (runTx, protocol.go)
// for RunExclusive and RunOnce on both drivers, between its observers'
// start and end (observer.go): the protocol's outcome is classified once
// (txError, classify.go) and observed once when the call ends. Only the
// grant is observed as it happens (callState.granted).
func runTxObserved(ctx context.Context, c *callState, d txDriver, call func() error) error {
	return c.observed(ctx, c.callKind(), c.window, 0, func(ctx context.Context) error { return c.txError(runTx(ctx, c, d, call)) })
}

// callKind is the family of a transaction-lock call.
func (c *callState) callKind() CallKind {
	if c.runOnce {
		return CallOnce
	}
	return CallExclusive
}

// Stdlib is the [Driver] of a database/sql pool: fn receives the [*sql.Tx].
// Any PostgreSQL driver for database/sql works; pgx's stdlib driver
// (github.com/jackc/pgx/v5/stdlib) lets session locks detect a pooler by
// its backend pid.
func Stdlib(db *sql.DB) Driver[*sql.Tx] { return stdlibDriver{db: db} }

// Pgx is the [Driver] of a pgx pool: fn receives the [pgx.Tx]. It sends
// BEGIN and the lock statement in one round trip.
func Pgx(pool *pgxpool.Pool) Driver[pgx.Tx] { return pgxDriver{pool: pool} }

// stdlibDriver is Stdlib's Driver. It is one pointer, so that it fits in an
// interface value without an allocation.
type stdlibDriver struct{ db *sql.DB }

func (s stdlibDriver) handle() (any, string, bool) { return s.db, "*sql.DB", s.db == nil }

func (s stdlibDriver) runTx(ctx context.Context, c *callState, fn func(*sql.Tx) error) error {
	if c.lim != nil {
		return runLimited(ctx, c, stdlibListener(s.db), func() (txDriver, func() error) {
			d := &databaseSQLTx{db: s.db}
			return d, func() error { return fn(d.tx) }
		})
	}
	if c.queued() {
		return runQueued(ctx, c, waitPath{exec: func(ctx context.Context, q string, args ...any) error {
			_, err := s.db.ExecContext(ctx, q, args...)
			return err
		}, listen: stdlibListener(s.db)}, func() (txDriver, func() error) {
			d := &databaseSQLTx{db: s.db}
			return d, func() error { return fn(d.tx) }
		})
	}
	d := &databaseSQLTx{db: s.db}
	return runTxObserved(ctx, c, d, func() error { return fn(d.tx) })
}

func (s stdlibDriver) sessions() func(context.Context) (sessionConn, error) {
	return databaseSQLSessions(s.db)
}

func (s stdlibDriver) poolRoom() bool {
	st := s.db.Stats()
	return st.MaxOpenConnections <= 0 || st.Idle > 0 || st.OpenConnections < st.MaxOpenConnections
}

func (stdlibDriver) nilTx(tx *sql.Tx) bool { return tx == nil }

func (stdlibDriver) setFencingToken(ctx context.Context, tx *sql.Tx, token int64) error {
	return setFencingTokenSQL(ctx, tx, token)
}

func (s stdlibDriver) runFenced(ctx context.Context, c *callState, token int64, fn func(*sql.Tx) error) error {
	return c.observed(ctx, CallFenced, "", token, func(ctx context.Context) error { return runFenced(ctx, s.db, token, fn) })
}

func (s stdlibDriver) currentLeader(ctx context.Context, lockID int64, name string) (Leader, error) {
	return currentLeader(ctx, s.db, lockID, name)
}

func (stdlibDriver) lockTxRow(ctx context.Context, tx *sql.Tx, query string, args []any) (lockTxResult, error) {
	var r lockTxResult
	err := tx.QueryRowContext(ctx, query, args...).Scan(&r.granted, &r.standby, &r.isolation)
	return r, err
}

// pgxDriver is Pgx's Driver.
type pgxDriver struct{ pool *pgxpool.Pool }

func (p pgxDriver) handle() (any, string, bool) { return p.pool, "*pgxpool.Pool", p.pool == nil }

func (p pgxDriver) runTx(ctx context.Context, c *callState, fn func(pgx.Tx) error) error {
	if c.lim != nil {
		return runLimited(ctx, c, pgxListener(p.pool), func() (txDriver, func() error) {
			d := &pgxTx{pool: p.pool}
			return d, func() error { return fn(d.tx) }
		})
	}
	if c.queued() {
		return runQueued(ctx, c, waitPath{exec: func(ctx context.Context, q string, args ...any) error {
			_, err := p.pool.Exec(ctx, q, args...)
			return err
		}, listen: pgxListener(p.pool)}, func() (txDriver, func() error) {
			d := &pgxTx{pool: p.pool}
			return d, func() error { return fn(d.tx) }
		})
	}
	d := &pgxTx{pool: p.pool}
	return runTxObserved(ctx, c, d, func() error { return fn(d.tx) })
}

func (p pgxDriver) sessions() func(context.Context) (sessionConn, error) {
	return pgxSessions(p.pool)
}

func (p pgxDriver) poolRoom() bool {
	st := p.pool.Stat()
	return st.IdleConns() > 0 || st.TotalConns() < st.MaxConns()
}

func (pgxDriver) nilTx(tx pgx.Tx) bool { return tx == nil }

func (pgxDriver) setFencingToken(ctx context.Context, tx pgx.Tx, token int64) error {
	return setFencingTokenPgx(ctx, tx, token)
}

func (p pgxDriver) runFenced(ctx context.Context, c *callState, token int64, fn func(pgx.Tx) error) error {
	return c.observed(ctx, CallFenced, "", token, func(ctx context.Context) error { return runFencedPgx(ctx, p.pool, token, fn) })
}

func (p pgxDriver) currentLeader(ctx context.Context, lockID int64, name string) (Leader, error) {
	return currentLeaderPgx(ctx, p.pool, lockID, name)
}

func (pgxDriver) lockTxRow(ctx context.Context, tx pgx.Tx, query string, args []any) (lockTxResult, error) {
	var r lockTxResult
	err := tx.QueryRow(ctx, query, args...).Scan(&r.granted, &r.standby, &r.isolation)
	return r, err
}
