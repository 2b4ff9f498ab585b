package pgadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Tests through PgBouncer (1.18 on Debian 12 and in CI) in
// pool_mode=transaction, in front of this package's test database. Lock
// state is read from pg_locks on a direct connection to the real server.

// pbExecModes are the pgx query modes that work through PgBouncer before
// 1.21 in transaction mode. pgx's default (cache_statement) prepares named
// statements at the protocol level; PgBouncer 1.18 does not track them, so a
// statement prepared on one server connection is unknown on the next one the
// client is given, or clashes with another client's of the same name
// (observed here: "prepared statement stmtcache_… already exists", 42P05). "exec" sends each statement unnamed (Parse, Bind, Execute
// in one round trip); "simple_protocol" interpolates parameters client-side.
// The runtime must work with either, so both are tested.
var pbExecModes = []string{"exec", "simple_protocol"}

// pbEnv is one test's connections: direct ones to the server, and
// database/sql and pgx pools through PgBouncer.
type pbEnv struct {
	direct *sql.DB
	db     *sql.DB
	pool   *pgxpool.Pool
}

// pbNewEnv starts a PgBouncer in transaction mode and opens pools through it
// with the given pgx query mode.
func pbNewEnv(t *testing.T, execMode string) *pbEnv {
	t.Helper()
	e := &pbEnv{direct: testdb.DB(t)}
	url := pgcluster.StartPgBouncer(t, testdb.URL(t), "transaction") + "&default_query_exec_mode=" + execMode
	var err error
	e.db, err = sql.Open("pgx", url)
	require.NoError(t, err)
	e.db.SetMaxOpenConns(4)
	t.Cleanup(func() { _ = e.db.Close() })
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = 4
	e.pool, err = pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(e.pool.Close)

	// The pools really go through a pooler (the pid the server reports is
	// not the one announced at connection start), and the check is able to
	// tell: the direct connection's pids agree.
	require.True(t, pbPooled(t, e.db), "database/sql through PgBouncer")
	require.True(t, pbPooledPgx(t, e.pool), "pgx through PgBouncer")
	require.False(t, pbPooled(t, e.direct), "direct connection")
	return e
}

// pbPooled reports whether a connection of db announced a backend pid other
// than the server's pg_backend_pid().
func pbPooled(t *testing.T, db *sql.DB) bool {
	t.Helper()
	conn, err := db.Conn(t.Context())
	require.NoError(t, err)
	defer conn.Close()
	var announced uint32
	require.NoError(t, conn.Raw(func(dc any) error {
		announced = dc.(*stdlib.Conn).Conn().PgConn().PID()
		return nil
	}))
	var pid uint32
	require.NoError(t, conn.QueryRowContext(t.Context(), "SELECT pg_backend_pid()").Scan(&pid))
	return pid != announced
}

func pbPooledPgx(t *testing.T, pool *pgxpool.Pool) bool {
	t.Helper()
	conn, err := pool.Acquire(t.Context())
	require.NoError(t, err)
	defer conn.Release()
	var pid uint32
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT pg_backend_pid()").Scan(&pid))
	return pid != conn.Conn().PgConn().PID()
}

// pbLocks counts advisory locks (granted or waiting) on key in the package
// database, as the server's pg_locks shows them.
func pbLocks(t *testing.T, direct *sql.DB, key int64) int {
	t.Helper()
	var n int
	require.NoError(t, direct.QueryRowContext(t.Context(), `SELECT count(*) FROM pg_catalog.pg_locks
WHERE locktype = 'advisory' AND objsubid = 1
  AND database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
  AND ((classid::bigint << 32) | objid::bigint) = $1`, key).Scan(&n))
	return n
}

// pbExec runs one statement in the lock transaction, whichever the driver.
type pbExec func(query string, args ...any) error

// pbRun is RunExclusive or RunExclusivePgx through PgBouncer.
type pbRun func(ctx context.Context, key int64, fn func(pbExec) error) error

func (e *pbEnv) doors() []struct {
	name string
	run  pbRun
} {
	return []struct {
		name string
		run  pbRun
	}{
		{"RunExclusive", func(ctx context.Context, key int64, fn func(pbExec) error) error {
			return pgadvisory.RunExclusive(ctx, e.db, key, func(tx *sql.Tx) error {
				return fn(func(q string, args ...any) error { _, err := tx.ExecContext(ctx, q, args...); return err })
			})
		}},
		{"RunExclusivePgx", func(ctx context.Context, key int64, fn func(pbExec) error) error {
			return pgadvisory.RunExclusivePgx(ctx, e.pool, key, func(tx pgx.Tx) error {
				return fn(func(q string, args ...any) error { _, err := tx.Exec(ctx, q, args...); return err })
			})
		}},
	}
}

func TestPgBouncerRunExclusive(t *testing.T) {
	for _, mode := range pbExecModes {
		t.Run(mode, func(t *testing.T) {
			e := pbNewEnv(t, mode)
			ctx := t.Context()
			table := pgx.Identifier{testdb.Schema(t), "pb_writes"}.Sanitize()
			_, err := e.direct.ExecContext(ctx, "CREATE TABLE "+table+" (note text NOT NULL)")
			require.NoError(t, err)
			rows := func(note string) int {
				var n int
				require.NoError(t, e.direct.QueryRowContext(ctx, "SELECT count(*) FROM "+table+" WHERE note = $1", note).Scan(&n))
				return n
			}
			insert := func(note string) func(pbExec) error {
				return func(exec pbExec) error { return exec("INSERT INTO "+table+" (note) VALUES ($1)", note) }
			}

			for _, holder := range e.doors() {
				t.Run(holder.name+" holds", func(t *testing.T) {
					key := testdb.Key(t)
					holding, release := make(chan struct{}), make(chan struct{})
					released := false
					releaseOnce := func() {
						if !released {
							released = true
							close(release)
						}
					}
					defer releaseOnce()
					done := make(chan error, 1)
					go func() {
						done <- holder.run(ctx, key, func(exec pbExec) error {
							if err := insert("holder " + holder.name)(exec); err != nil {
								return err
							}
							close(holding)
							<-release
							return nil
						})
					}()
					select {
					case <-holding:
					case err := <-done:
						t.Fatalf("holder returned before holding: %v", err)
					case <-time.After(30 * time.Second):
						t.Fatal("holder never got the lock")
					}

					// The lock is held on the real server while fn runs, and a
					// second caller through PgBouncer is refused, by either door.
					require.Equal(t, 1, pbLocks(t, e.direct, key))
					for _, other := range e.doors() {
						called := false
						err := other.run(ctx, key, func(pbExec) error { called = true; return nil })
						require.Equal(t, pgadvisory.ErrLocked, err, other.name)
						require.False(t, called, other.name)
					}

					releaseOnce()
					require.NoError(t, <-done)
					require.Equal(t, 1, rows("holder "+holder.name), "the holder's write committed")
					require.Eventually(t, func() bool { return pbLocks(t, e.direct, key) == 0 },
						10*time.Second, 10*time.Millisecond, "the lock was released")

					// Now callers through PgBouncer get the lock and commit, so
					// the ErrLocked above was the holder's doing.
					for _, other := range e.doors() {
						require.NoError(t, other.run(ctx, key, insert("after "+other.name)), other.name)
						require.Equal(t, 1, rows("after "+other.name), other.name)
						_, err := e.direct.ExecContext(ctx, "DELETE FROM "+table+" WHERE note = $1", "after "+other.name)
						require.NoError(t, err)
					}

					// Control for the row check: a failing fn's write is rolled
					// back, and rows() sees that it is missing.
					boom := errors.New("boom")
					err := holder.run(ctx, key, func(exec pbExec) error {
						if err := insert("rolled back")(exec); err != nil {
							return err
						}
						return boom
					})
					require.ErrorIs(t, err, boom)
					require.Zero(t, rows("rolled back"))
				})
			}
		})
	}
}

func TestPgBouncerRefusesSessionLocks(t *testing.T) {
	for _, mode := range pbExecModes {
		t.Run(mode, func(t *testing.T) {
			e := pbNewEnv(t, mode)
			ctx := t.Context()
			key := testdb.Key(t)
			doors := []struct {
				name string
				run  func(db *sql.DB, pool *pgxpool.Pool, fn func(context.Context) error) error
			}{
				{"RunSession", func(db *sql.DB, _ *pgxpool.Pool, fn func(context.Context) error) error {
					return pgadvisory.RunSession(ctx, db, key, fn)
				}},
				{"RunSessionPgx", func(_ *sql.DB, pool *pgxpool.Pool, fn func(context.Context) error) error {
					return pgadvisory.RunSessionPgx(ctx, pool, key, fn)
				}},
			}
			for _, d := range doors {
				called := false
				err := d.run(e.db, e.pool, func(context.Context) error { called = true; return nil })
				require.ErrorIs(t, err, pgadvisory.ErrTransactionPooler, d.name)
				require.False(t, called, d.name)
				var pe *pgadvisory.Error
				require.ErrorAs(t, err, &pe, d.name)
				require.Equal(t, "begin", pe.Op, "%s: refused before any lock statement", d.name)
				require.Zero(t, pbLocks(t, e.direct, key), "%s left a lock on a server connection", d.name)
			}

			// Control: connected directly, the same calls take the lock (and
			// pbLocks sees it) and release it.
			pool := testdb.Pool(t)
			for _, d := range doors {
				err := d.run(e.direct, pool, func(context.Context) error {
					if n := pbLocks(t, e.direct, key); n != 1 {
						return fmt.Errorf("pg_locks shows %d locks on the key while fn runs", n)
					}
					return nil
				})
				require.NoError(t, err, d.name)
				require.Zero(t, pbLocks(t, e.direct, key), d.name)
			}
		})
	}
}
