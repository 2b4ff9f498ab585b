package pgadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/designsource/pglock"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

func TestLockTableFull(t *testing.T) {
	c := throwawayCluster(t)
	ctx := testdb.Context(t)

	// Both front doors get one connection each, opened now: with the table
	// full, a new backend could not even connect (it needs a lock-table
	// entry to attach to its database), and the point is the lock statement.
	db, err := sql.Open("pgx", c.URL())
	require.NoError(t, err)
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = db.Close() })
	cfg, err := pgxpool.ParseConfig(c.URL())
	require.NoError(t, err)
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	helper, err := pgx.Connect(ctx, c.URL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = helper.Close(context.Background()) }) // releases its locks

	key := testdb.Key(t)
	called := 0
	doors := []frontdoor.Door{frontdoor.OnDB(db), frontdoor.OnPool(pool)}
	run := func(d frontdoor.Door) error {
		return d.RunExclusive(ctx, key, func(frontdoor.Tx) error { called++; return nil })
	}

	// Control: with room in the table both calls succeed (and the
	// connections and statements are ready).
	for _, d := range doors {
		require.NoError(t, run(d), d.Label())
	}
	require.Equal(t, len(doors), called)

	fillLockTable(t, helper)
	called = 0
	for _, d := range doors {
		err := run(d)
		e := sqlstate.RequireTyped(t, err, pgadvisory.ErrLockTableFull, "lock", "53200",
			"%s: the lock statement, not the connection, hit the full table", d.Label())
		require.Equal(t, []int64{key}, e.LockIDs, d.Label())
	}
	require.Zero(t, called, "fn must not run without the lock")

	// Control: the design source's RunExclusive on the same full table. The
	// try function raises 53200 rather than returning false, so hand-written
	// code gets a bare driver error: neither its "locked" outcome nor anything
	// that tells an operator the cluster-wide lock table is exhausted.
	err = pglock.RunExclusive(ctx, db, key, func(*sql.Tx) error { called++; return nil })
	require.Error(t, err)
	require.NotErrorIs(t, err, pglock.ErrLocked, "the try function raised; it did not return false")
	var typed *pgadvisory.Error
	require.False(t, errors.As(err, &typed), "hand-written code has no typed error: %v", err)
	sqlstate.Require(t, err, "53200", "the same server error, untyped")
	require.Zero(t, called)

	// Releasing the helper's locks makes room again.
	_, err = helper.Exec(ctx, "SELECT pg_advisory_unlock_all()")
	require.NoError(t, err)
	for _, d := range doors {
		require.NoError(t, run(d), d.Label())
	}
	require.Equal(t, len(doors), called)
}

// throwawayCluster is this package's one throwaway cluster (started on first
// use, stopped when the test binary exits), used by the lock-table and
// hot-standby tests. Its lock table is tiny, so filling it takes a few
// hundred locks: max_locks_per_transaction × (max_connections + background
// processes) slots, plus whatever spare shared memory the lock hash
// borrows. A standby inherits these settings, as it must.
func throwawayCluster(t *testing.T) *pgcluster.Cluster {
	t.Helper()
	return pgcluster.Shared(t, "pgadvisory",
		pgcluster.WithSetting("max_locks_per_transaction", "10"),
		pgcluster.WithSetting("max_connections", "20"))
}

// lockTableBatch is how many session locks fillLockTable asks for per statement.
const lockTableBatch = 500

// fillLockTable fills the server's shared lock table from conn with session-level
// advisory locks (which, unlike transaction locks, stay held when their
// statement fails) until the server answers 53200. The locks stay held until
// conn releases them or closes.
func fillLockTable(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	for range 200 {
		keys := make([]int64, lockTableBatch)
		for i := range keys {
			keys[i] = testdb.Key(t)
		}
		_, err := conn.Exec(context.Background(), "SELECT count(pg_advisory_lock(k)) FROM unnest($1::bigint[]) AS k", keys)
		if err != nil {
			sqlstate.Require(t, err, "53200", "filling the lock table")
			return
		}
	}
	t.Fatalf("the lock table took %d locks without filling up", 200*lockTableBatch)
}
