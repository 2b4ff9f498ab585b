package frontdoor

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/pgadvisory"
)

// Driver names a front door. Its value is the door's label, used as the
// subtest name by [ForEach].
type Driver string

// The two front doors.
const (
	SQL Driver = "database/sql" // a Locker of pgadvisory.Stdlib(*sql.DB)
	Pgx Driver = "pgx"          // a Locker of pgadvisory.Pgx(*pgxpool.Pool)
)

// Drivers are both front doors, database/sql first.
var Drivers = []Driver{SQL, Pgx}

// Sessions is what a Locker of either driver does without a transaction
// of its driver: its methods whose signatures do not mention the
// transaction type. A [Door] embeds its Locker as Sessions, so
// door.RunSession, door.Lead, door.CurrentLeader and door.Close are the
// Locker's own methods.
type Sessions interface {
	RunSession(ctx context.Context, lock pgadvisory.Lock, fn func(context.Context) error, opts ...pgadvisory.Option) error
	RunSessionLimited(ctx context.Context, lock pgadvisory.Lock, n int, fn func(context.Context) error, opts ...pgadvisory.Option) error
	Lead(ctx context.Context, lock pgadvisory.Lock, fn func(ctx context.Context, term int64) error, opts ...pgadvisory.Option) error
	Campaign(ctx context.Context, lock pgadvisory.Lock, fn func(ctx context.Context, term int64) error, opts ...pgadvisory.Option) error
	CurrentLeader(ctx context.Context, lock pgadvisory.Lock) (pgadvisory.Leader, error)
	WatchLeader(ctx context.Context, lock pgadvisory.Lock, fn func(pgadvisory.Leader) error) error
	Close() error
}

var (
	_ Sessions = (*pgadvisory.Locker[*sql.Tx])(nil)
	_ Sessions = (*pgadvisory.Locker[pgx.Tx])(nil)
)

// Door is one front door bound to a connection pool: a pgadvisory.Locker
// of either driver. Its methods that take a transaction's fn adapt it to
// [Tx]; the rest are the Locker's own ([Sessions]). The zero Door is not
// usable; get one from [Open], [ForEach], [OnDB] or [OnPool].
type Door struct {
	Driver Driver
	Sessions
	db     *sql.DB       // set when Driver is SQL
	pool   *pgxpool.Pool // set when Driver is Pgx
	sqlL   *pgadvisory.Locker[*sql.Tx]
	pgxL   *pgadvisory.Locker[pgx.Tx]
	writes *Door // where RunFenced runs; nil: this door's pool
}

// OnDB is the database/sql front door on db: a Locker of
// pgadvisory.Stdlib(db) with opts. It panics if New refuses them.
func OnDB(db *sql.DB, opts ...pgadvisory.LockerOption) Door {
	l, err := pgadvisory.New(pgadvisory.Stdlib(db), opts...)
	if err != nil {
		panic(fmt.Sprintf("frontdoor: %v", err))
	}
	return Door{Driver: SQL, Sessions: l, db: db, sqlL: l}
}

// OnPool is the pgx front door on pool: a Locker of pgadvisory.Pgx(pool)
// with opts. It panics if New refuses them.
func OnPool(pool *pgxpool.Pool, opts ...pgadvisory.LockerOption) Door {
	l, err := pgadvisory.New(pgadvisory.Pgx(pool), opts...)
	if err != nil {
		panic(fmt.Sprintf("frontdoor: %v", err))
	}
	return Door{Driver: Pgx, Sessions: l, pool: pool, pgxL: l}
}

// WithLocker returns a door on d's pool with a new Locker made with opts
// (shared session connections, defaults, an observer).
func (d Door) WithLocker(opts ...pgadvisory.LockerOption) Door {
	var n Door
	if d.Driver == Pgx {
		n = OnPool(d.pool, opts...)
	} else {
		n = OnDB(d.db, opts...)
	}
	n.writes = d.writes
	return n
}

// SQLLocker is the database/sql door's Locker, nil for the pgx door.
func (d Door) SQLLocker() *pgadvisory.Locker[*sql.Tx] { return d.sqlL }

// PgxLocker is the pgx door's Locker, nil for the database/sql door.
func (d Door) PgxLocker() *pgadvisory.Locker[pgx.Tx] { return d.pgxL }

// Label is the door's stable name: "database/sql" or "pgx".
func (d Door) Label() string { return string(d.Driver) }

// String is the label.
func (d Door) String() string { return d.Label() }

// DB is the door's *sql.DB, nil for the pgx door.
func (d Door) DB() *sql.DB { return d.db }

// Pool is the door's *pgxpool.Pool, nil for the database/sql door.
func (d Door) Pool() *pgxpool.Pool { return d.pool }

// WithWrites returns d whose RunFenced runs on w's pool, as a holder that
// writes through a second connection pool does. w must be the same driver.
func (d Door) WithWrites(w Door) Door {
	if w.Driver != d.Driver {
		panic(fmt.Sprintf("frontdoor: %s door with %s writes", d.Driver, w.Driver))
	}
	d.writes = &w
	return d
}

// RunExclusive is Locker.RunExclusive with lockID as the lock. A nil fn is
// passed on as nil.
func (d Door) RunExclusive(ctx context.Context, lockID int64, fn func(Tx) error, opts ...pgadvisory.Option) error {
	return d.RunExclusiveLock(ctx, pgadvisory.ID(lockID), fn, opts...)
}

// RunExclusiveLock is Locker.RunExclusive.
func (d Door) RunExclusiveLock(ctx context.Context, l pgadvisory.Lock, fn func(Tx) error, opts ...pgadvisory.Option) error {
	if d.Driver == Pgx {
		return d.pgxL.RunExclusive(ctx, l, pgxFn(d.pgxL, fn), opts...)
	}
	return d.sqlL.RunExclusive(ctx, l, sqlFn(d.sqlL, fn), opts...)
}

// RunOnce is Locker.RunOnce with lockID as the lock.
func (d Door) RunOnce(ctx context.Context, lockID int64, window string, fn func(Tx) error, opts ...pgadvisory.Option) error {
	return d.RunOnceLock(ctx, pgadvisory.ID(lockID), window, fn, opts...)
}

// RunOnceLock is Locker.RunOnce.
func (d Door) RunOnceLock(ctx context.Context, l pgadvisory.Lock, window string, fn func(Tx) error, opts ...pgadvisory.Option) error {
	if d.Driver == Pgx {
		return d.pgxL.RunOnce(ctx, l, window, pgxFn(d.pgxL, fn), opts...)
	}
	return d.sqlL.RunOnce(ctx, l, window, sqlFn(d.sqlL, fn), opts...)
}

// LockTx is Locker.LockTx in tx, a transaction of this door's driver
// (made by [Door.Begin]).
func (d Door) LockTx(ctx context.Context, tx Tx, l pgadvisory.Lock, opts ...pgadvisory.Option) error {
	if d.Driver == Pgx {
		return d.pgxL.LockTx(ctx, tx.(pgxTx).tx, l, opts...)
	}
	return d.sqlL.LockTx(ctx, tx.(sqlTx).tx, l, opts...)
}

// SetFencingToken is Locker.SetFencingToken in tx, a transaction of this
// door's driver.
func (d Door) SetFencingToken(ctx context.Context, tx Tx, token int64) error {
	if d.Driver == Pgx {
		return d.pgxL.SetFencingToken(ctx, tx.(pgxTx).tx, token)
	}
	return d.sqlL.SetFencingToken(ctx, tx.(sqlTx).tx, token)
}

// Begin begins a transaction on the door's pool at the isolation level
// iso ("" for the server's default), for [Door.LockTx]; end is its COMMIT
// (commit true) or ROLLBACK.
func (d Door) Begin(ctx context.Context, iso string) (tx Tx, end func(commit bool) error, err error) {
	if d.Driver == Pgx {
		ptx, err := d.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.TxIsoLevel(iso)})
		if err != nil {
			return nil, nil, err
		}
		return PgxTx(ptx), func(commit bool) error {
			if commit {
				return ptx.Commit(ctx)
			}
			return ptx.Rollback(ctx)
		}, nil
	}
	levels := map[string]sql.IsolationLevel{"": sql.LevelDefault, "read committed": sql.LevelReadCommitted,
		"repeatable read": sql.LevelRepeatableRead, "serializable": sql.LevelSerializable}
	stx, err := d.db.BeginTx(ctx, &sql.TxOptions{Isolation: levels[iso]})
	if err != nil {
		return nil, nil, err
	}
	return SQLTx(stx), func(commit bool) error {
		if commit {
			return stx.Commit()
		}
		return stx.Rollback()
	}, nil
}

// RunFenced is Locker.RunFenced, on the pool given to [Door.WithWrites] if
// any, else on the door's own.
func (d Door) RunFenced(ctx context.Context, token int64, fn func(Tx) error) error {
	w := d
	if d.writes != nil {
		w = *d.writes
	}
	if w.Driver == Pgx {
		return w.pgxL.RunFenced(ctx, token, pgxFn(w.pgxL, fn))
	}
	return w.sqlL.RunFenced(ctx, token, sqlFn(w.sqlL, fn))
}

// RunFencedLock is l.RunFenced or l.RunFencedPgx (deprecated Lock
// methods: the Locker's RunFenced takes no Lock), on the pool given to
// [Door.WithWrites] if any, else on the door's own.
func (d Door) RunFencedLock(ctx context.Context, l pgadvisory.Lock, token int64, fn func(Tx) error) error {
	w := d
	if d.writes != nil {
		w = *d.writes
	}
	if w.Driver == Pgx {
		return l.RunFencedPgx(ctx, w.pool, token, pgxFn(nil, fn))
	}
	return l.RunFenced(ctx, w.db, token, sqlFn(nil, fn))
}

// InUse is the number of connections checked out of the door's pool.
func (d Door) InUse() int {
	if d.Driver == Pgx {
		return int(d.pool.Stat().AcquiredConns())
	}
	return d.db.Stats().InUse
}

// Idle reports whether no connection is checked out of the door's pool
// (background work such as a loser's ROLLBACK is done).
func (d Door) Idle() bool { return d.InUse() == 0 }

// Checkout takes a connection out of the door's pool until release is
// called (or t ends), so that a call under test finds one fewer.
func (d Door) Checkout(t testing.TB) (release func()) {
	t.Helper()
	var put func()
	if d.Driver == Pgx {
		c, err := d.pool.Acquire(context.Background())
		require.NoError(t, err)
		put = c.Release
	} else {
		c, err := d.db.Conn(context.Background())
		require.NoError(t, err)
		put = func() { _ = c.Close() }
	}
	release = sync.OnceFunc(put)
	t.Cleanup(release)
	return release
}

// sqlFn is fn for a call of l (nil: a package-level function).
func sqlFn(l *pgadvisory.Locker[*sql.Tx], fn func(Tx) error) func(*sql.Tx) error {
	if fn == nil {
		return nil
	}
	return func(tx *sql.Tx) error { return fn(sqlTx{tx: tx, l: l}) }
}

// pgxFn is fn for a call of l (nil: a package-level function).
func pgxFn(l *pgadvisory.Locker[pgx.Tx], fn func(Tx) error) func(pgx.Tx) error {
	if fn == nil {
		return nil
	}
	return func(tx pgx.Tx) error { return fn(pgxTx{tx: tx, l: l}) }
}

// RequireIdle waits until d has no connection checked out, and fails t if
// one stays out for 30s (a leak).
func RequireIdle(t testing.TB, d Door) {
	t.Helper()
	require.Eventually(t, d.Idle, 30*time.Second, 10*time.Millisecond, "%s: connections still checked out", d)
}
