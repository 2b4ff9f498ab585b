package pgadvisory_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Session locks of a Locker without shared session connections
// (WithSessionConns(0)) wait in lockgen's queue too, holding no
// connection, and take their lock on a connection of their own.

// TestSessionDedicatedWaitHoldsNoConnection: 8 waiting RunSession calls
// (WithWait(0)) on a Locker with WithSessionConns(0) and a pool of 4, for
// a key held elsewhere, join the queue one at a time. While all 8 wait,
// the server shows at most 5 connections of the Locker (its pool's and the
// listening one) and none of them waits for the lock (in the server's
// queue each waiter would hold a connection: at most 4 could wait).
// Released, they run in the order they joined, each holding the lock
// (pg_locks shows it granted while fn runs), and the queue is empty.
func TestSessionDedicatedWaitHoldsNoConnection(t *testing.T) {
	admin := migrated.DB(t)
	for _, driver := range frontdoor.Drivers {
		t.Run(string(driver), func(t *testing.T) {
			ctx := testdb.Context(t)
			key := testdb.Key(t)
			app := fmt.Sprintf("sessded_%d", key)
			door := queueDoor(t, driver, app, 4, orderInterval, pgadvisory.WithSessionConns(0))
			release := holdSession(t, admin, key)

			const waiters = 8
			var mu sync.Mutex
			var ran []int
			done := make(chan error, waiters)
			for i := range waiters {
				go func() {
					done <- door.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error {
						var held int
						if err := admin.QueryRowContext(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
							AND ((classid::bigint << 32) | objid::bigint) = $1`, key).Scan(&held); err != nil {
							return err
						}
						if held != 1 {
							return fmt.Errorf("waiter %d: the lock is held %d times while fn runs", i, held)
						}
						mu.Lock()
						ran = append(ran, i)
						mu.Unlock()
						return nil
					}, pgadvisory.WithWait(0))
				}()
				require.Eventually(t, func() bool { return queueRows(t, admin, key) == i+1 }, 30*time.Second, 2*time.Millisecond, "waiter %d queued", i)
			}
			most := requireQueuedConns(t, admin, app, 5)
			var onServer int
			require.NoError(t, admin.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event = 'advisory'`, app).Scan(&onServer))
			require.Zero(t, onServer, "no waiter waits on the server")
			t.Logf("%d session locks queued; the Locker had at most %d connections on the server", waiters, most)

			release()
			for range waiters {
				require.NoError(t, frontdoor.Await(t, done, "a waiter"))
			}
			mu.Lock()
			require.Equal(t, arrivalOrder(waiters), slices.Clone(ran), "granted in arrival order")
			mu.Unlock()
			require.Zero(t, queueRows(t, admin, key), "the queue is empty")
		})
	}
}

// TestSessionDedicatedLeadQueued: on Lockers with WithSessionConns(0), a
// candidate (Lead) waits in lockgen's queue while another leads, and is
// elected once the leader returns, with a newer term; the queue is empty
// after. A canceled candidate and one whose WithWait timeout passes
// (RunSession) leave no row.
func TestSessionDedicatedLeadQueued(t *testing.T) {
	admin := migrated.DB(t)
	for _, driver := range frontdoor.Drivers {
		t.Run(string(driver), func(t *testing.T) {
			ctx := testdb.Context(t)
			key := testdb.Key(t)
			a := queueDoor(t, driver, fmt.Sprintf("sessdeda_%d", key), 2, pgadvisory.WithSessionConns(0))
			b := queueDoor(t, driver, fmt.Sprintf("sessdedb_%d", key), 2, pgadvisory.WithSessionConns(0))

			leading, resign := make(chan int64, 1), make(chan struct{})
			aDone := make(chan error, 1)
			go func() {
				aDone <- a.Lead(ctx, pgadvisory.ID(key), func(_ context.Context, term int64) error {
					leading <- term
					<-resign
					return nil
				})
			}()
			first := frontdoor.Await(t, leading, "A leads")

			bDone := make(chan error, 1)
			go func() {
				bDone <- b.Lead(ctx, pgadvisory.ID(key), func(_ context.Context, term int64) error {
					leading <- term
					return nil
				})
			}()
			require.Eventually(t, func() bool { return queueRows(t, admin, key) == 1 }, 30*time.Second, 2*time.Millisecond, "B queued")

			cctx, cancel := context.WithCancel(ctx)
			cDone := make(chan error, 1)
			go func() {
				cDone <- b.RunSession(cctx, pgadvisory.ID(key), func(context.Context) error { return errors.New("ran") }, pgadvisory.WithWait(0))
			}()
			require.Eventually(t, func() bool { return queueRows(t, admin, key) == 2 }, 30*time.Second, 2*time.Millisecond, "C queued")
			cancel()
			require.ErrorIs(t, frontdoor.Await(t, cDone, "the canceled waiter"), context.Canceled)
			require.Equal(t, 1, queueRows(t, admin, key), "the canceled waiter's row is gone")
			err := b.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error { return errors.New("ran") }, pgadvisory.WithWait(200*time.Millisecond))
			require.ErrorIs(t, err, pgadvisory.ErrLockTimeout)
			require.Equal(t, 1, queueRows(t, admin, key), "the timed-out waiter's row is gone")

			close(resign)
			require.NoError(t, frontdoor.Await(t, aDone, "A's return"))
			second := frontdoor.Await(t, leading, "B leads")
			require.Greater(t, second, first, "B's term is newer")
			require.NoError(t, frontdoor.Await(t, bDone, "B's return"))
			require.Zero(t, queueRows(t, admin, key), "the queue is empty")
		})
	}
}
