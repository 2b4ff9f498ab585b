package pgadvisory_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Session locks behind a transaction-pooling PgBouncer when the first check
// (the pid announced at connection start against pg_backend_pid()) is not
// available, as with any database/sql driver other than pgx's stdlib: the
// later defences must hold. pidHidingConnector hides pgx from database/sql
// code, so RunSession cannot read the announced pid.

// TestPgBouncerSessionPidGuard: with server_round_robin, consecutive
// statements of one client land on different server connections. RunSession
// checks pg_backend_pid() and then sends the lock statement, which takes the
// lock only on that same backend: it lands elsewhere, takes nothing, and the
// call is refused as ErrTransactionPooler. Control: a hand-written session
// lock through the same PgBouncer leaks its lock onto a server connection
// after the client has gone.
func TestPgBouncerSessionPidGuard(t *testing.T) {
	direct := testdb.DB(t)
	db := pidHidingDB(t, pgcluster.WithSetting("server_round_robin", "1"))
	pids := serverPIDs(t, db, 2)
	require.NotEqual(t, pids[0], pids[1], "precondition: round robin moves consecutive statements")

	key := testdb.Key(t)
	called := false
	err := pgadvisory.RunSession(testdb.Context(t), db, key, func(context.Context) error { called = true; return nil })
	require.ErrorIs(t, err, pgadvisory.ErrTransactionPooler)
	var pe *pgadvisory.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, pgadvisory.OpLock, pe.Op, "caught by the pid the lock statement returned: %v", err)
	require.False(t, called)
	require.Zero(t, len(witness.Of(direct).Holds(t, key)), "the guarded lock statement took nothing on the other backend")

	// The same for a set (an array parameter, the set's own statement shape),
	// trying and waiting.
	k2, k3 := testdb.Key(t), testdb.Key(t)
	for _, wait := range []pgadvisory.Option{nil, pgadvisory.WithWait(time.Second)} {
		err = pgadvisory.RunSession(testdb.Context(t), db, key, func(context.Context) error { called = true; return nil },
			pgadvisory.WithLocks(k2, k3), wait)
		require.ErrorIs(t, err, pgadvisory.ErrTransactionPooler)
		require.ErrorAs(t, err, &pe)
		require.Equal(t, pgadvisory.OpLock, pe.Op, "caught by the pid the lock statement returned: %v", err)
		require.False(t, called)
		require.Zero(t, len(witness.Of(direct).Holds(t, key, k2, k3)), "the guarded set statement took nothing")
	}

	// Control: the same lock taken by hand leaks.
	conn, err := db.Conn(testdb.Context(t))
	require.NoError(t, err)
	var got bool
	require.NoError(t, conn.QueryRowContext(testdb.Context(t), "SELECT pg_try_advisory_lock($1)", key).Scan(&got))
	require.True(t, got)
	require.NoError(t, conn.Close())
	require.NoError(t, db.Close())
	require.Equal(t, 1, len(witness.Of(direct).Holds(t, key)), "control: the hand-written session lock outlives its client on a server connection")
	terminateHolders(t, direct, key)
}

// TestPgBouncerSessionWatcherNoticesMove: PgBouncer's default LIFO reuse
// gives RunSession's pid check and lock statement the same server
// connection, so both checks pass and the lock is taken there. While fn runs,
// another client takes that server connection in a long transaction; the
// watcher's next check lands on the other one, sees that its backend holds
// none of the locks, and cancels fn's context with ErrLockLost.
func TestPgBouncerSessionWatcherNoticesMove(t *testing.T) {
	direct := testdb.DB(t)
	db := pidHidingDB(t)
	key := testdb.Key(t)
	ctx, cancel := context.WithTimeout(testdb.Context(t), time.Minute)
	defer cancel()
	var cause error
	err := pgadvisory.RunSession(ctx, db, key, func(fctx context.Context) error {
		require.Equal(t, 1, len(witness.Of(direct).Holds(t, key)), "the lock is held on a server connection")
		// Occupy the most recently used server connection (the lock's).
		other, err := db.Conn(ctx)
		require.NoError(t, err)
		defer other.Close()
		tx, err := other.BeginTx(ctx, nil)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }()
		_, err = tx.ExecContext(ctx, "SELECT 1")
		require.NoError(t, err)
		select {
		case <-fctx.Done():
			cause = context.Cause(fctx)
		case <-time.After(30 * time.Second):
			t.Error("fn's context was not canceled after the session moved to another backend")
		}
		return fctx.Err()
	}, pgadvisory.WithCheckInterval(50*time.Millisecond))
	require.ErrorIs(t, cause, pgadvisory.ErrLockLost)
	require.ErrorIs(t, err, pgadvisory.ErrLockLost)
	var pe *pgadvisory.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, pgadvisory.OpWatch, pe.Op)
	require.ErrorContains(t, err, "backend holds 0 of 1 locks")
	terminateHolders(t, direct, key)
}

// TestPgBouncerSessionReleaseNoticesMove: as in
// TestPgBouncerSessionWatcherNoticesMove the lock's server connection is
// taken by another client while fn runs, but fn returns before the watcher
// checks (interval one minute). The unlock lands on the other server
// connection, which holds none of the locks, and the release reports
// ErrLockLost instead of success; the lock itself stays on the first server
// connection, which the test ends. Control: pg_locks shows the lock still
// held there, by a backend the client no longer talks to.
func TestPgBouncerSessionReleaseNoticesMove(t *testing.T) {
	direct := testdb.DB(t)
	db := pidHidingDB(t)
	key := testdb.Key(t)
	ctx, cancel := context.WithTimeout(testdb.Context(t), time.Minute)
	defer cancel()
	var other *sql.Tx
	err := pgadvisory.RunSession(ctx, db, key, func(fctx context.Context) error {
		require.Equal(t, 1, len(witness.Of(direct).Holds(t, key)), "the lock is held on a server connection")
		// Occupy the most recently used server connection (the lock's)
		// until after the call returns.
		conn, err := db.Conn(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		other, err = conn.BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = other.ExecContext(ctx, "SELECT 1")
		require.NoError(t, err)
		return nil
	}, pgadvisory.WithCheckInterval(time.Minute))
	require.ErrorIs(t, err, pgadvisory.ErrLockLost)
	var pe *pgadvisory.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, pgadvisory.OpRelease, pe.Op)
	require.ErrorContains(t, err, "the unlock found 0 of 1 locks held")
	holds := witness.Of(direct).Holds(t, key)
	require.Len(t, holds, 1, "control: the lock stayed on the server connection the client lost")
	require.NoError(t, other.Rollback())
	terminateHolders(t, direct, key)
}

// pidHidingConnector wraps pgx's stdlib connector; its connections do not
// expose *pgx.Conn.
type pidHidingConnector struct{ inner driver.Connector }

func (c pidHidingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return pidHidingConn{dc.(*stdlib.Conn)}, nil
}

func (c pidHidingConnector) Driver() driver.Driver { return c.inner.Driver() }

// pidHidingConn forwards everything database/sql needs, but not Conn().
type pidHidingConn struct{ c *stdlib.Conn }

func (h pidHidingConn) Prepare(q string) (driver.Stmt, error) { return h.c.Prepare(q) }
func (h pidHidingConn) Close() error                          { return h.c.Close() }
func (h pidHidingConn) Begin() (driver.Tx, error)             { return h.c.Begin() } //nolint:staticcheck // driver.Conn requires it
func (h pidHidingConn) BeginTx(ctx context.Context, o driver.TxOptions) (driver.Tx, error) {
	return h.c.BeginTx(ctx, o)
}
func (h pidHidingConn) QueryContext(ctx context.Context, q string, a []driver.NamedValue) (driver.Rows, error) {
	return h.c.QueryContext(ctx, q, a)
}
func (h pidHidingConn) ExecContext(ctx context.Context, q string, a []driver.NamedValue) (driver.Result, error) {
	return h.c.ExecContext(ctx, q, a)
}
func (h pidHidingConn) Ping(ctx context.Context) error             { return h.c.Ping(ctx) }
func (h pidHidingConn) ResetSession(ctx context.Context) error     { return h.c.ResetSession(ctx) }
func (h pidHidingConn) CheckNamedValue(v *driver.NamedValue) error { return h.c.CheckNamedValue(v) }

// pidHidingDB opens a database/sql pool through a new PgBouncer in
// transaction mode (two server connections, settings opts) with the
// pid-hiding driver.
func pidHidingDB(t *testing.T, opts ...pgcluster.Option) *sql.DB {
	t.Helper()
	url := pgcluster.StartPgBouncer(t, testdb.URL(t), "transaction", opts...) + "&default_query_exec_mode=exec"
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	db := sql.OpenDB(pidHidingConnector{stdlib.GetConnector(*cfg)})
	db.SetMaxOpenConns(4)
	t.Cleanup(func() { _ = db.Close() })
	// Make PgBouncer open both server connections: two transactions at once.
	ctx := testdb.Context(t)
	var txs []*sql.Tx
	for range 2 {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = tx.ExecContext(ctx, "SELECT pg_backend_pid()")
		require.NoError(t, err)
		txs = append(txs, tx)
	}
	for _, tx := range txs {
		require.NoError(t, tx.Commit())
	}
	return db
}

// serverPIDs runs SELECT pg_backend_pid() n times, one autocommit
// statement after the other, on one client connection of db.
func serverPIDs(t *testing.T, db *sql.DB, n int) []int32 {
	t.Helper()
	conn, err := db.Conn(testdb.Context(t))
	require.NoError(t, err)
	defer conn.Close()
	pids := make([]int32, n)
	for i := range pids {
		require.NoError(t, conn.QueryRowContext(testdb.Context(t), "SELECT pg_backend_pid()").Scan(&pids[i]))
	}
	return pids
}

// terminateHolders ends the server connections that hold key (a leaked
// session lock lives on a PgBouncer server connection until it closes).
func terminateHolders(t *testing.T, direct *sql.DB, key int64) {
	t.Helper()
	_, err := direct.ExecContext(context.Background(), `SELECT pg_catalog.pg_terminate_backend(pid) FROM pg_catalog.pg_locks
WHERE locktype = 'advisory' AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = $1`, key)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(witness.Of(direct).Holds(t, key)) == 0 }, 30*time.Second, 10*time.Millisecond)
}
