package pgadvisory_test

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// electionWaiting reports whether the backend holding key runs an
// election that waits for a lock (the fence row a writer holds).
func electionWaiting(t *testing.T, admin *sql.DB, w *witness.Witness, key int64) bool {
	t.Helper()
	holds := w.Holds(t, key)
	if len(holds) != 1 || !holds[0].Granted {
		return false
	}
	var n int
	require.NoError(t, admin.QueryRow(`SELECT count(*) FROM pg_catalog.pg_stat_activity
		WHERE pid = $1 AND state = 'active' AND wait_event_type = 'Lock' AND query LIKE '%leader_elect%'`, holds[0].PID).Scan(&n))
	return n == 1
}

// grantedPID is the backend that holds key, granted.
func grantedPID(t *testing.T, w *witness.Witness, key int64) int32 {
	t.Helper()
	for _, h := range w.Holds(t, key) {
		if h.Granted {
			return h.PID
		}
	}
	t.Fatalf("nobody holds %d", key)
	return 0
}

// TestSessionSharedElectionWaitDoesNotBlockItsConnection: an election on
// the only shared connection waits for a deposed leader's write in flight
// (it holds the fence row; the election may wait 5 s for it). Meanwhile
// the other calls on that connection go on: a leader on it resigns and a
// rival candidate (another pool) is elected at once, and a RunSession on
// a free key that does not wait is granted, released and returns, all
// within 2 s and while the election still waits. CONTROL: the election
// itself still waits for the write: it is elected only once the write
// commits, with a newer term.
func TestSessionSharedElectionWaitDoesNotBlockItsConnection(t *testing.T) {
	admin := migrated.DB(t)
	w := witness.Of(admin)
	schema := testdb.Schema(t)
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		key, neighbour, free := testdb.Key(t), testdb.Key(t), testdb.Key(t)
		table := fencing.Table(t, admin, schema, "turns_"+map[frontdoor.Driver]string{frontdoor.SQL: "sql", frontdoor.Pgx: "pgx"}[drv], key, "strict")
		d := frontdoor.Open(t, drv, frontdoor.MaxConns(6)).WithLocker(pgadvisory.WithSessionConns(1))
		writers := frontdoor.Open(t, drv, frontdoor.MaxConns(2))
		rivals := frontdoor.Open(t, drv, frontdoor.MaxConns(2))
		slow := pgadvisory.WithCheckTimeout(20 * time.Second) // the election may wait its full 5 s

		var oldTerm int64
		require.NoError(t, writers.Lead(ctx, pgadvisory.ID(key), func(_ context.Context, term int64) error { oldTerm = term; return nil }))
		_, releaseWriter, written := fencing.OpenWriter(t, ctx, writers, table, oldTerm, 1)

		// A leader on the shared connection, and a rival queued for it.
		leading, resign := make(chan struct{}), make(chan struct{})
		resigned := make(chan error, 1)
		go func() {
			resigned <- d.Lead(ctx, pgadvisory.ID(neighbour), func(context.Context, int64) error {
				close(leading)
				<-resign
				return nil
			})
		}()
		frontdoor.Await(t, leading, "the neighbour leader")
		rivalElected := make(chan int64, 1)
		rivalDone := make(chan error, 1)
		go func() {
			rivalDone <- rivals.Lead(ctx, pgadvisory.ID(neighbour), func(_ context.Context, term int64) error { rivalElected <- term; return nil })
		}()
		require.Eventually(t, func() bool { return queueRows(t, admin, neighbour) == 1 }, 30*time.Second, 5*time.Millisecond, "the rival queues")

		var elected atomic.Int64
		led := make(chan error, 1)
		go func() {
			led <- d.Lead(ctx, pgadvisory.ID(key), func(_ context.Context, term int64) error { elected.Store(term); return nil }, slow)
		}()
		require.Eventually(t, func() bool { return electionWaiting(t, admin, w, key) }, 30*time.Second, 5*time.Millisecond,
			"the election waits for the deposed leader's write")
		require.Equal(t, grantedPID(t, w, neighbour), w.Holder(t, key).PID, "one shared connection")

		// All within 2 s of the resignation, while the election may wait 5 s.
		bctx, bcancel := context.WithTimeout(ctx, 2*time.Second)
		defer bcancel()
		close(resign)
		session := make(chan error, 1)
		go func() {
			session <- d.RunSession(ctx, pgadvisory.ID(free), func(context.Context) error { return nil })
		}()
		for what, ch := range map[string]<-chan error{"the neighbour's resignation": resigned, "the RunSession on a free key": session} {
			select {
			case err := <-ch:
				require.NoError(t, err, what)
			case <-bctx.Done():
				t.Fatalf("%s waited for the election on its connection", what)
			}
		}
		select {
		case term := <-rivalElected:
			require.Positive(t, term)
		case <-bctx.Done():
			t.Fatal("the rival was not elected: the resignation waited for the election on its connection")
		}
		require.NoError(t, frontdoor.Await(t, rivalDone, "the rival"))
		select {
		case err := <-led:
			t.Fatalf("the election ended while the deposed leader's write was in flight: %v", err)
		default:
		}

		// CONTROL: the election waits for the write, then publishes.
		releaseWriter()
		require.NoError(t, frontdoor.Await(t, written, "the deposed leader's write"))
		require.NoError(t, frontdoor.Await(t, led, "the election"))
		require.Greater(t, elected.Load(), oldTerm)
		require.Empty(t, w.Holds(t, key, neighbour, free))
		frontdoor.RequireIdle(t, d)
	})
}
