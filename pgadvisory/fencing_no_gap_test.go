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

// No gap between the publish and fn: the fenced acquisition commits its
// publish (COMMIT AND CHAIN) while it holds the key at session level, and
// hands it to fn's transaction before letting go of the session-level hold.
// Callers queued on the key, a WithWait caller (in lockgen's queue,
// pgadvisory.waiter) and a raw pg_advisory_xact_lock (in the server's), are
// granted it only after the fenced holder's fn ends. The fenced caller
// waits in lockgen's queue too, at its head: behind a holder that did not
// queue it waits for the key on the server, ahead of the raw caller, and
// takes it at transaction level before its fenced acquisition takes it at
// session level. The control is a holder that commits between taking the
// key and running its work, as a separate COMMIT would: a queued caller
// gets the key in between.

func TestFencingNoGapBetweenPublishAndFn(t *testing.T) {
	admin := migrated.DB(t)
	w := witness.Of(admin)
	// The head's waits on the server last half of its row's expiry, 3/8
	// of the check interval: a long one keeps the fenced caller ahead of
	// the raw one in the server's queue for the whole round.
	long := frontdoor.Locker(pgadvisory.WithDefaultCheckInterval(time.Minute))
	for _, drv := range frontdoor.Drivers {
		door := frontdoor.Open(t, drv, frontdoor.MaxConns(4), long).WithWrites(frontdoor.Open(t, drv, frontdoor.MaxConns(4)))
		t.Run(door.Label(), func(t *testing.T) {
			ctx := testdb.Context(t)
			key := testdb.Key(t)
			for round := range 5 {
				// The previous holder keeps the key while the others queue.
				prev := rawConn(t, admin)
				_, err := prev.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, key)
				require.NoError(t, err)

				// F, fenced, queues first (and waits on the server, as the
				// head of lockgen's queue); then W (WithWait) and R (raw).
				entered, release := make(chan int64, 1), make(chan struct{})
				fDone := make(chan error, 1)
				go func() {
					fDone <- door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
						tok, _ := tx.FencingToken()
						entered <- tok
						select { // the test's end releases fn when a check failed first
						case <-release:
						case <-ctx.Done():
						}
						return nil
					}, pgadvisory.WithFencing(), pgadvisory.WithWait(0))
				}()
				requireWaiting(t, w, key, 1)
				// W runs once, never while F or R holds the key (rHolding is
				// set before R's transaction can end, see below).
				var wRan, rHolding, overlap atomic.Bool
				wDone := make(chan error, 1)
				go func() {
					wDone <- door.RunExclusive(ctx, key, func(frontdoor.Tx) error {
						if rHolding.Load() {
							overlap.Store(true)
						}
						wRan.Store(true)
						return nil
					}, pgadvisory.WithWait(0))
				}()
				requireQueued(t, admin, key, 2)
				raw := rawConn(t, admin)
				rawTx, err := raw.BeginTx(ctx, nil)
				require.NoError(t, err)
				// Before raw's Close, which waits for an open transaction.
				t.Cleanup(func() { _ = rawTx.Rollback() })
				rDone := make(chan error, 1)
				go func() {
					_, err := rawTx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, key)
					if err == nil {
						rHolding.Store(true)
					}
					rDone <- err
				}()
				// F and R wait in the server's queue, F first; W waits in
				// lockgen's queue behind F.
				require.Eventually(t, func() bool { return w.Locks(t, false, key) >= 2 }, 30*time.Second, 5*time.Millisecond,
					"round %d: F and R should be waiting", round)

				_, err = prev.ExecContext(ctx, `SELECT pg_advisory_unlock($1)`, key)
				require.NoError(t, err)
				tok := frontdoor.Await(t, entered, "the fenced holder's fn")
				require.Equal(t, tok, fencing.Published(t, admin, key), "round %d: published before fn", round)
				// While fn runs, the fenced holder alone has the key.
				time.Sleep(50 * time.Millisecond)
				holds := w.Holds(t, key)
				granted := 0
				for _, h := range holds {
					if h.Granted {
						granted++
					}
				}
				require.Equal(t, 1, granted, "round %d: only the fenced holder: %+v", round, holds)
				require.False(t, wRan.Load(), "round %d: the WithWait caller ran inside the fenced holder's tenure", round)
				select {
				case err := <-rDone:
					t.Fatalf("round %d: the raw waiter got the key while fn ran (%v)", round, err)
				default:
				}

				close(release)
				require.NoError(t, frontdoor.Await(t, fDone, "the fenced holder"))
				// Now the queues move on, R and W one after the other in
				// either order: R keeps the key until its transaction ends,
				// W's fn must not run meanwhile.
				require.NoError(t, frontdoor.Await(t, rDone, "the raw waiter"))
				rHolding.Store(false)
				require.NoError(t, rawTx.Rollback())
				require.NoError(t, frontdoor.Await(t, wDone, "the WithWait caller"))
				require.True(t, wRan.Load())
				require.False(t, overlap.Load(), "round %d: the WithWait caller ran while the raw waiter held the key", round)
			}
		})
	}
}

// TestFencingNoGapControl: a holder that commits after taking the key and
// takes it again for its work (two transactions, as a publish committed
// separately from fn's transaction would need) lets a queued caller in
// between: the check above would see it.
func TestFencingNoGapControl(t *testing.T) {
	admin := migrated.DB(t)
	w := witness.Of(admin)
	ctx := testdb.Context(t)
	key := testdb.Key(t)
	holder := rawConn(t, admin)
	tx, err := holder.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, key)
	require.NoError(t, err)

	door := fencing.Doors(t, nil)[1]
	var wRan atomic.Bool
	wDone := make(chan error, 1)
	go func() {
		wDone <- door.RunExclusive(ctx, key, func(frontdoor.Tx) error { wRan.Store(true); return nil }, pgadvisory.WithWait(0))
	}()
	requireQueued(t, admin, key, 1)

	require.NoError(t, tx.Commit()) // the "publish" commits
	require.NoError(t, frontdoor.Await(t, wDone, "the WithWait caller"))
	require.True(t, wRan.Load(), "the queued caller ran in the gap")
	tx, err = holder.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	require.True(t, w.LockFree(t, key))
}

// requireWaiting waits until n requests for key are queued (not granted).
func requireWaiting(t *testing.T, w *witness.Witness, key int64, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return w.Locks(t, false, key) == n }, 30*time.Second, 5*time.Millisecond,
		"%d requests for lock %d should be waiting", n, key)
}

// requireQueued waits until n waiting calls for key are queued in lockgen's
// queue (pgadvisory.waiter), where a waiting RunExclusive waits holding no
// connection.
func requireQueued(t *testing.T, admin *sql.DB, key int64, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return queueRows(t, admin, key) == n }, 30*time.Second, 5*time.Millisecond,
		"%d calls for lock %d should be queued", n, key)
}

// rawConn is a connection of its own on db, closed when t ends.
func rawConn(t *testing.T, db *sql.DB) *sql.Conn {
	t.Helper()
	c, err := db.Conn(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}
