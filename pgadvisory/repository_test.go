package pgadvisory_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Tests of RunExclusiveRepo and RunExclusiveRepoPgx with hand-written
// repositories of the two shapes sqlc generates: New(DBTX) and
// (*Queries).WithTx(tx). examples/repository does the same with real sqlc
// output.

func TestRepoRunsInLockTransaction(t *testing.T) {
	db := testdb.DB(t)
	pool := testdb.Pool(t)
	schema := testdb.Schema(t)
	for name, call := range repositoryShapes(db, pool) {
		t.Run(name, func(t *testing.T) {
			ctx := testdb.Context(t)
			key := testdb.Key(t)
			table := pgx.Identifier{schema, "repo_" + fmt.Sprint(key)}.Sanitize()
			_, err := db.ExecContext(ctx, "CREATE TABLE "+table+" (v text)")
			require.NoError(t, err)
			count := func() (n int) {
				require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&n))
				return n
			}

			// The repository's statements run on the backend holding the lock.
			require.NoError(t, call(ctx, key, func(q repository) error {
				held, err := q.lockHeld(ctx, key)
				require.NoError(t, err)
				require.True(t, held, "the repository runs on the lock's transaction")
				return q.insert(ctx, table, "committed")
			}))
			require.Equal(t, 1, count(), "fn's writes commit with the lock")

			// ... in its transaction: fn's error rolls its writes back.
			boom := errors.New("boom")
			err = call(ctx, key, func(q repository) error {
				require.NoError(t, q.insert(ctx, table, "rolled back"))
				return boom
			})
			require.ErrorIs(t, err, boom)
			require.Equal(t, 1, count(), "fn's writes roll back with its error")

			// Control: a repository on the pool, outside the lock, does not
			// see the lock as its own.
			held, err := newSQLQueries(db).lockHeld(ctx, key)
			require.NoError(t, err)
			require.False(t, held)
			require.NoError(t, pgadvisory.RunExclusive(ctx, db, key, func(*sql.Tx) error {
				held, err := newSQLQueries(db).lockHeld(ctx, key)
				require.NoError(t, err)
				require.False(t, held, "a repository outside the lock transaction is detected")
				return nil
			}))
		})
	}
}

func TestRepoExactTxType(t *testing.T) {
	// D may be the transaction type itself instead of an interface.
	ctx := testdb.Context(t)
	db := testdb.DB(t)
	pool := testdb.Pool(t)
	key := testdb.Key(t)
	require.NoError(t, pgadvisory.RunExclusiveRepo(ctx, db, key,
		func(tx *sql.Tx) *sqlQueries { return newSQLQueries(tx) },
		func(q *sqlQueries) error {
			held, err := q.lockHeld(ctx, key)
			require.NoError(t, err)
			require.True(t, held)
			return nil
		}))
	require.NoError(t, pgadvisory.RunExclusiveRepoPgx(ctx, pool, key,
		func(tx pgx.Tx) *pgxQueries { return newPgxQueries(tx) },
		func(q *pgxQueries) error {
			held, err := q.lockHeld(ctx, key)
			require.NoError(t, err)
			require.True(t, held)
			return nil
		}))
}

func TestRepoContention(t *testing.T) {
	db := testdb.DB(t)
	pool := testdb.Pool(t)
	for name, call := range repositoryShapes(db, pool) {
		t.Run(name, func(t *testing.T) {
			ctx := testdb.Context(t)
			key := testdb.Key(t)
			require.NoError(t, pgadvisory.RunExclusivePgx(ctx, pool, key, func(pgx.Tx) error {
				err := call(ctx, key, func(repository) error {
					t.Error("fn ran although the lock is held")
					return nil
				})
				require.ErrorIs(t, err, pgadvisory.ErrLocked)
				return nil
			}))
			// Control: free again, fn runs.
			called := false
			require.NoError(t, call(ctx, key, func(repository) error { called = true; return nil }))
			require.True(t, called)
		})
	}
}

func TestRepoExecutorMismatch(t *testing.T) {
	ctx := testdb.Context(t)
	key := testdb.Key(t)
	notCalled := func(any) error { t.Error("fn was called"); return nil }
	events := 0
	observe := pgadvisory.WithObserver(func(pgadvisory.Event) { events++ })

	t.Run("database/sql", func(t *testing.T) {
		db, connects := countingDB(t)
		mismatched := map[string]error{
			"pgx DBTX": pgadvisory.RunExclusiveRepo(ctx, db, key,
				func(d pgxDBTX) any { return newPgxQueries(d) }, notCalled, observe),
			"pgx.Tx": pgadvisory.RunExclusiveRepo(ctx, db, key,
				func(tx pgx.Tx) any { return tx }, notCalled, observe),
			"*sql.DB": pgadvisory.RunExclusiveRepo(ctx, db, key,
				func(d *sql.DB) any { return d }, notCalled, observe),
			"nil newRepo": pgadvisory.RunExclusiveRepo[sqlDBTX, any](ctx, db, key, nil, notCalled, observe),
			"nil fn":      pgadvisory.RunExclusiveRepo[sqlDBTX, *sqlQueries](ctx, db, key, newSQLQueries, nil, observe),
		}
		for name, err := range mismatched {
			t.Run(name, func(t *testing.T) { requireRefusedUpFront(t, err, key) })
		}
		require.Zero(t, connects.Load(), "no connection was opened")
		require.Zero(t, events, "no event was reported")

		// Control: the counter sees DB work when the types match.
		require.NoError(t, pgadvisory.RunExclusiveRepo(ctx, db, key, newSQLQueries, func(*sqlQueries) error { return nil }, observe))
		require.NotZero(t, connects.Load())
		require.NotZero(t, events)
	})

	t.Run("pgx", func(t *testing.T) {
		events = 0
		pool := testdb.Pool(t)
		before := pool.Stat().AcquireCount()
		mismatched := map[string]error{
			"database/sql DBTX": pgadvisory.RunExclusiveRepoPgx(ctx, pool, key,
				func(d sqlDBTX) any { return newSQLQueries(d) }, notCalled, observe),
			"*sql.Tx": pgadvisory.RunExclusiveRepoPgx(ctx, pool, key,
				func(tx *sql.Tx) any { return tx }, notCalled, observe),
			"*pgxpool.Pool": pgadvisory.RunExclusiveRepoPgx(ctx, pool, key,
				func(p *pgxpool.Pool) any { return p }, notCalled, observe),
			"nil newRepo": pgadvisory.RunExclusiveRepoPgx[pgxDBTX, any](ctx, pool, key, nil, notCalled, observe),
			"nil fn":      pgadvisory.RunExclusiveRepoPgx[pgxDBTX, *pgxQueries](ctx, pool, key, newPgxQueries, nil, observe),
		}
		for name, err := range mismatched {
			t.Run(name, func(t *testing.T) { requireRefusedUpFront(t, err, key) })
		}
		require.Equal(t, before, pool.Stat().AcquireCount(), "no connection was acquired")
		require.Zero(t, events, "no event was reported")

		// Control: the counter sees DB work when the types match.
		require.NoError(t, pgadvisory.RunExclusiveRepoPgx(ctx, pool, key, newPgxQueries, func(*pgxQueries) error { return nil }, observe))
		require.Greater(t, pool.Stat().AcquireCount(), before)
		require.NotZero(t, events)
	})
}

// sqlDBTX is sqlc's database/sql executor interface.
type sqlDBTX interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
	PrepareContext(context.Context, string) (*sql.Stmt, error)
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
	QueryRowContext(context.Context, string, ...any) *sql.Row
}

// pgxDBTX is sqlc's pgx/v5 executor interface.
type pgxDBTX interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	Query(context.Context, string, ...any) (pgx.Rows, error)
	QueryRow(context.Context, string, ...any) pgx.Row
}

// holdsLockQuery reports whether the executing backend holds advisory lock $1.
const holdsLockQuery = `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_locks
WHERE locktype = 'advisory' AND objsubid = 1 AND granted AND pid = pg_backend_pid()
  AND ((classid::bigint << 32) | objid::bigint) = $1)`

// sqlQueries is a database/sql repository in sqlc's shape.
type sqlQueries struct{ db sqlDBTX }

func newSQLQueries(db sqlDBTX) *sqlQueries { return &sqlQueries{db: db} }

func (q *sqlQueries) WithTx(tx *sql.Tx) *sqlQueries { return &sqlQueries{db: tx} }

func (q *sqlQueries) lockHeld(ctx context.Context, key int64) (held bool, err error) {
	err = q.db.QueryRowContext(ctx, holdsLockQuery, key).Scan(&held)
	return held, err
}

func (q *sqlQueries) insert(ctx context.Context, table, v string) error {
	_, err := q.db.ExecContext(ctx, "INSERT INTO "+table+" (v) VALUES ($1)", v)
	return err
}

// pgxQueries is a pgx/v5 repository in sqlc's shape.
type pgxQueries struct{ db pgxDBTX }

func newPgxQueries(db pgxDBTX) *pgxQueries { return &pgxQueries{db: db} }

func (q *pgxQueries) WithTx(tx pgx.Tx) *pgxQueries { return &pgxQueries{db: tx} }

func (q *pgxQueries) lockHeld(ctx context.Context, key int64) (held bool, err error) {
	err = q.db.QueryRow(ctx, holdsLockQuery, key).Scan(&held)
	return held, err
}

func (q *pgxQueries) insert(ctx context.Context, table, v string) error {
	_, err := q.db.Exec(ctx, "INSERT INTO "+table+" (v) VALUES ($1)", v)
	return err
}

// repository is what the test bodies need from either sqlc-shaped repository.
type repository interface {
	lockHeld(ctx context.Context, key int64) (bool, error)
	insert(ctx context.Context, table, v string) error
}

// repositoryCall runs fn under key through one front door and repository shape.
type repositoryCall func(ctx context.Context, key int64, fn func(repository) error) error

// repositoryShapes lists every (front door, constructor shape) combination.
func repositoryShapes(db *sql.DB, pool *pgxpool.Pool) map[string]repositoryCall {
	sqlFn := func(fn func(repository) error) func(*sqlQueries) error {
		return func(q *sqlQueries) error { return fn(q) }
	}
	pgxFn := func(fn func(repository) error) func(*pgxQueries) error {
		return func(q *pgxQueries) error { return fn(q) }
	}
	return map[string]repositoryCall{
		"sql/New(DBTX)": func(ctx context.Context, key int64, fn func(repository) error) error {
			return pgadvisory.RunExclusiveRepo(ctx, db, key, newSQLQueries, sqlFn(fn))
		},
		"sql/WithTx": func(ctx context.Context, key int64, fn func(repository) error) error {
			return pgadvisory.RunExclusiveRepo(ctx, db, key, newSQLQueries(db).WithTx, sqlFn(fn))
		},
		"pgx/New(DBTX)": func(ctx context.Context, key int64, fn func(repository) error) error {
			return pgadvisory.RunExclusiveRepoPgx(ctx, pool, key, newPgxQueries, pgxFn(fn))
		},
		"pgx/WithTx": func(ctx context.Context, key int64, fn func(repository) error) error {
			return pgadvisory.RunExclusiveRepoPgx(ctx, pool, key, newPgxQueries(pool).WithTx, pgxFn(fn))
		},
	}
}

// countingConnector counts the connections database/sql opens.
type countingConnector struct {
	driver.Connector
	n *atomic.Int64
}

func (c countingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	c.n.Add(1)
	return c.Connector.Connect(ctx)
}

// countingDB is a *sql.DB on the test database that has not connected
// yet; the counter says how many connections it has opened since.
func countingDB(t *testing.T) (*sql.DB, *atomic.Int64) {
	cfg, err := pgx.ParseConfig(testdb.URL(t))
	require.NoError(t, err)
	n := new(atomic.Int64)
	db := sql.OpenDB(countingConnector{Connector: stdlib.GetConnector(*cfg), n: n})
	t.Cleanup(func() { _ = db.Close() })
	return db, n
}

// requireRefusedUpFront checks err is the up-front argument error.
func requireRefusedUpFront(t *testing.T, err error, key int64) {
	t.Helper()
	require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument)
	var pe *pgadvisory.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, pgadvisory.OpBegin, pe.Op)
	require.Equal(t, []int64{key}, pe.LockIDs)
}
