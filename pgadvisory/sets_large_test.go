package pgadvisory_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Lock sets of any size (WithLocks): the lock, unlock and check statements
// take the IDs as one array parameter, so sets larger than the protocol's
// 65,535 bind parameters and larger than the server's expression depth
// work, taken whole or not at all and released before the call returns. A
// throwaway cluster with a large lock table holds them, so that the shared
// test server's lock table (which other test binaries use at the same
// time) is never filled. The control shows the old statement shapes fail
// at these sizes.

// TestLargeSets: 5,000 and 70,000 locks in one call, for session and
// transaction locks, trying and waiting, on both front doors: every lock is
// held by one backend while fn runs and none once the call has returned
// (a session lock set is unlocked in one statement, not left to the pool).
// A set whose highest ID is held elsewhere is refused with ErrLocked and
// leaves nothing held, although the statement took every lock before it.
func TestLargeSets(t *testing.T) {
	doors, w := largeSetDoors(t)
	ctx := testdb.Context(t)
	for _, n := range []int{5000, 70000} {
		ids := largeSetKeys(t, n)
		with := pgadvisory.WithLocks(ids[1:]...)
		for _, door := range doors {
			t.Run(fmt.Sprintf("%d/%s", n, door), func(t *testing.T) {
				for _, wait := range []pgadvisory.Option{nil, pgadvisory.WithWait(time.Minute)} {
					called := 0
					require.NoError(t, door.RunSession(ctx, pgadvisory.ID(ids[0]), func(ctx context.Context) error {
						called++
						require.Equal(t, n, w.held(t, ids, true), "every lock of the set, on one backend")
						// The watcher checks the whole set a dozen times (its
						// statement gets a generic plan after five).
						select {
						case <-ctx.Done():
							t.Errorf("the watcher dropped a held set: %v", context.Cause(ctx))
						case <-time.After(12 * largeSetInterval):
						}
						return nil
					}, with, wait, pgadvisory.WithCheckInterval(largeSetInterval)))
					require.Zero(t, w.held(t, ids, false), "released before RunSession returned")

					require.NoError(t, door.RunExclusive(ctx, ids[0], func(frontdoor.Tx) error {
						called++
						require.Equal(t, n, w.held(t, ids, true))
						return nil
					}, with, wait))
					require.Zero(t, w.held(t, ids, false))
					require.Equal(t, 2, called)
				}

				// The highest ID is held elsewhere: the try statement takes
				// every lock below it, finds that one taken, and the call
				// releases the rest.
				release := door.Hold(t, ids[n-1], nil)
				require.ErrorIs(t, door.RunSession(ctx, pgadvisory.ID(ids[0]), notCalled(t), with), pgadvisory.ErrLocked)
				require.Zero(t, w.held(t, ids[:n-1], false), "nothing of the set stays held")
				require.ErrorIs(t, door.RunExclusive(ctx, ids[0], func(frontdoor.Tx) error {
					t.Error("fn ran without the whole set")
					return nil
				}, with), pgadvisory.ErrLocked)
				// A transaction loser's ROLLBACK runs in the background.
				require.Eventually(t, func() bool { return w.held(t, ids[:n-1], false) == 0 }, 30*time.Second, 10*time.Millisecond)
				require.NoError(t, release())
				require.Zero(t, w.held(t, ids, false))
			})
		}
	}
}

// largeSetInterval is the session watcher's interval in the large-set tests.
const largeSetInterval = 30 * time.Millisecond

// TestLargeSetErrorText: the error of a call on 1,000 locks names the first
// few and the count, not all of them (it printed 14 KB before).
func TestLargeSetErrorText(t *testing.T) {
	doors, _ := largeSetDoors(t)
	ctx := testdb.Context(t)
	ids := largeSetKeys(t, 1000)
	for _, door := range doors {
		t.Run(door.Label(), func(t *testing.T) {
			release := door.Hold(t, ids[999], nil)
			defer func() { require.NoError(t, release()) }()
			for _, call := range []func() error{
				func() error {
					return door.RunExclusive(ctx, ids[0], func(frontdoor.Tx) error { return nil },
						pgadvisory.WithLocks(ids[1:]...), pgadvisory.WithWait(50*time.Millisecond))
				},
				func() error {
					return door.RunSession(ctx, pgadvisory.ID(ids[0]), notCalled(t), pgadvisory.WithLocks(ids[1:]...), pgadvisory.WithWait(50*time.Millisecond))
				},
			} {
				err := call()
				pe := sqlstate.RequireTyped(t, err, pgadvisory.ErrLockTimeout, "lock", "55P03")
				require.Len(t, pe.LockIDs, 1000, "the error still carries every ID")
				msg := err.Error()
				require.Less(t, len(msg), 400, msg)
				require.Contains(t, msg, "locks ["+strconv.FormatInt(ids[0], 10)+" ", msg)
				require.Contains(t, msg, "… (1000 in all)]", msg)
				require.NotContains(t, msg, strconv.FormatInt(ids[500], 10), msg)
			}
		})
	}
}

// TestLargeSetStatementsControl shows what the statements' array parameter
// avoids, on the same server: a session unlock written as one expression
// per ID summed with + (the old unlock statement) exceeds the server's
// stack depth at 5,000 IDs and leaves the locks held, and a statement with
// one bind parameter per ID cannot be sent for 70,000 IDs.
func TestLargeSetStatementsControl(t *testing.T) {
	c := largeSetCluster(t)
	ctx := testdb.Context(t)
	conn, err := pgx.Connect(ctx, c.URL())
	require.NoError(t, err)
	defer conn.Close(context.Background())

	ids := largeSetKeys(t, 5000)
	_, err = conn.Exec(ctx, "SELECT count(pg_advisory_lock(k)) FROM unnest($1::bigint[]) AS k", ids)
	require.NoError(t, err)
	var sum strings.Builder
	args := make([]any, len(ids))
	sum.WriteString("SELECT ")
	for i, id := range ids {
		if i > 0 {
			sum.WriteString(" + ")
		}
		fmt.Fprintf(&sum, "pg_advisory_unlock($%d)::int", i+1)
		args[i] = id
	}
	_, err = conn.Exec(ctx, sum.String(), args...)
	sqlstate.Require(t, err, "54001", "stack depth limit exceeded")
	var held int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`).Scan(&held))
	require.Equal(t, len(ids), held, "the failed unlock released nothing")
	_, err = conn.Exec(ctx, "SELECT pg_advisory_unlock_all()")
	require.NoError(t, err)

	big := largeSetKeys(t, 70000)
	var list strings.Builder
	args = make([]any, len(big))
	for i, id := range big {
		if i > 0 {
			list.WriteString(" AND ")
		}
		fmt.Fprintf(&list, "pg_try_advisory_xact_lock($%d)", i+1)
		args[i] = id
	}
	_, err = conn.Exec(ctx, "SELECT "+list.String(), args...)
	require.ErrorContains(t, err, "65535", "the protocol's limit on bind parameters")
}

// largeSetCluster is the throwaway cluster of the large-set tests: its lock
// table holds about (max_connections + background workers) × 2,000 locks,
// well above the 70,000 a test takes.
func largeSetCluster(t *testing.T) *pgcluster.Cluster {
	t.Helper()
	return pgcluster.Shared(t, "pgadvisory-large-sets",
		pgcluster.WithSetting("max_locks_per_transaction", "2000"),
		pgcluster.WithSetting("max_connections", "40"))
}

// largeSetWitness counts locks on the large-set cluster.
type largeSetWitness struct{ db *sql.DB }

// held counts the granted advisory locks on ids in the cluster's database;
// oneBackend asks that they all belong to one backend.
func (w largeSetWitness) held(t *testing.T, ids []int64, oneBackend bool) int {
	t.Helper()
	var n, backends int
	// Grouped rather than joined: a join's plan may be a nested loop, which
	// takes minutes with 70,000 locks on each side.
	require.NoError(t, w.db.QueryRow(`SELECT count(*), count(DISTINCT pid) FROM (
  SELECT key, max(pid) AS pid FROM (
    SELECT (l.classid::bigint << 32) | l.objid::bigint, l.pid FROM pg_catalog.pg_locks AS l
    WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
      AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
    UNION ALL SELECT unnest($1::bigint[]), NULL) AS u(key, pid)
  GROUP BY key HAVING count(*) > 1 AND bool_or(pid IS NULL)) AS held`, ids).Scan(&n, &backends))
	if oneBackend && n > 0 {
		require.Equal(t, 1, backends, "one backend holds the set")
	}
	return n
}

// largeSetDoors opens both front doors on the large-set cluster (a few
// connections each) and a witness there.
func largeSetDoors(t *testing.T) ([]frontdoor.Door, largeSetWitness) {
	t.Helper()
	c := largeSetCluster(t)
	doors := frontdoor.OpenAll(t, frontdoor.URL(c.URL()), frontdoor.MaxConns(4))
	witnessDB, err := sql.Open("pgx", c.URL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = witnessDB.Close() })
	return doors, largeSetWitness{db: witnessDB}
}

// largeSetKeys returns n unused keys in ascending order.
func largeSetKeys(t *testing.T, n int) []int64 {
	t.Helper()
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = testdb.Key(t)
	}
	return ids
}
