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
	SQL Driver = "database/sql" // RunExclusive, RunOnce, RunSession, RunFenced on a *sql.DB
	Pgx Driver = "pgx"          // RunExclusivePgx, RunOncePgx, RunSessionPgx, RunFencedPgx on a *pgxpool.Pool
)

// Drivers are both front doors, database/sql first.
var Drivers = []Driver{SQL, Pgx}

// Door is one front door bound to a connection pool. The zero Door is not
// usable; get one from [Open], [ForEach], [OnDB] or [OnPool].
type Door struct {
	Driver Driver
	db     *sql.DB       // set when Driver is SQL
	pool   *pgxpool.Pool // set when Driver is Pgx
	writes *Door         // where RunFenced runs; nil: this door's pool
}

// OnDB is the database/sql front door on db.
func OnDB(db *sql.DB) Door { return Door{Driver: SQL, db: db} }

// OnPool is the pgx front door on pool.
func OnPool(pool *pgxpool.Pool) Door { return Door{Driver: Pgx, pool: pool} }

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

// RunExclusive is pgadvisory.RunExclusive or RunExclusivePgx. A nil fn is
// passed on as nil.
func (d Door) RunExclusive(ctx context.Context, lockID int64, fn func(Tx) error, opts ...pgadvisory.Option) error {
	if d.Driver == Pgx {
		return pgadvisory.RunExclusivePgx(ctx, d.pool, lockID, pgxFn(fn), opts...)
	}
	return pgadvisory.RunExclusive(ctx, d.db, lockID, sqlFn(fn), opts...)
}

// RunExclusiveLock is l.RunExclusive or l.RunExclusivePgx.
func (d Door) RunExclusiveLock(ctx context.Context, l pgadvisory.Lock, fn func(Tx) error, opts ...pgadvisory.Option) error {
	if d.Driver == Pgx {
		return l.RunExclusivePgx(ctx, d.pool, pgxFn(fn), opts...)
	}
	return l.RunExclusive(ctx, d.db, sqlFn(fn), opts...)
}

// RunOnce is pgadvisory.RunOnce or RunOncePgx.
func (d Door) RunOnce(ctx context.Context, lockID int64, window string, fn func(Tx) error, opts ...pgadvisory.Option) error {
	if d.Driver == Pgx {
		return pgadvisory.RunOncePgx(ctx, d.pool, lockID, window, pgxFn(fn), opts...)
	}
	return pgadvisory.RunOnce(ctx, d.db, lockID, window, sqlFn(fn), opts...)
}

// RunOnceLock is l.RunOnce or l.RunOncePgx.
func (d Door) RunOnceLock(ctx context.Context, l pgadvisory.Lock, window string, fn func(Tx) error, opts ...pgadvisory.Option) error {
	if d.Driver == Pgx {
		return l.RunOncePgx(ctx, d.pool, window, pgxFn(fn), opts...)
	}
	return l.RunOnce(ctx, d.db, window, sqlFn(fn), opts...)
}

// RunSession is pgadvisory.RunSession or RunSessionPgx.
func (d Door) RunSession(ctx context.Context, lockID int64, fn func(context.Context) error, opts ...pgadvisory.Option) error {
	if d.Driver == Pgx {
		return pgadvisory.RunSessionPgx(ctx, d.pool, lockID, fn, opts...)
	}
	return pgadvisory.RunSession(ctx, d.db, lockID, fn, opts...)
}

// RunSessionLock is l.RunSession or l.RunSessionPgx.
func (d Door) RunSessionLock(ctx context.Context, l pgadvisory.Lock, fn func(context.Context) error, opts ...pgadvisory.Option) error {
	if d.Driver == Pgx {
		return l.RunSessionPgx(ctx, d.pool, fn, opts...)
	}
	return l.RunSession(ctx, d.db, fn, opts...)
}

// RunFenced is pgadvisory.RunFenced or RunFencedPgx, on the pool given to
// [Door.WithWrites] if any, else on the door's own.
func (d Door) RunFenced(ctx context.Context, token int64, fn func(Tx) error) error {
	w := d
	if d.writes != nil {
		w = *d.writes
	}
	if w.Driver == Pgx {
		return pgadvisory.RunFencedPgx(ctx, w.pool, token, pgxFn(fn))
	}
	return pgadvisory.RunFenced(ctx, w.db, token, sqlFn(fn))
}

// RunFencedLock is l.RunFenced or l.RunFencedPgx, on the pool given to
// [Door.WithWrites] if any, else on the door's own.
func (d Door) RunFencedLock(ctx context.Context, l pgadvisory.Lock, token int64, fn func(Tx) error) error {
	w := d
	if d.writes != nil {
		w = *d.writes
	}
	if w.Driver == Pgx {
		return l.RunFencedPgx(ctx, w.pool, token, pgxFn(fn))
	}
	return l.RunFenced(ctx, w.db, token, sqlFn(fn))
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

func sqlFn(fn func(Tx) error) func(*sql.Tx) error {
	if fn == nil {
		return nil
	}
	return func(tx *sql.Tx) error { return fn(SQLTx(tx)) }
}

func pgxFn(fn func(Tx) error) func(pgx.Tx) error {
	if fn == nil {
		return nil
	}
	return func(tx pgx.Tx) error { return fn(PgxTx(tx)) }
}

// RequireIdle waits until d has no connection checked out, and fails t if
// one stays out for 30s (a leak).
func RequireIdle(t testing.TB, d Door) {
	t.Helper()
	require.Eventually(t, d.Idle, 30*time.Second, 10*time.Millisecond, "%s: connections still checked out", d)
}
