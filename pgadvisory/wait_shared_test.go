package pgadvisory_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestWaitSharedQueued: shared waiting calls (WithShared, WithWait(0))
// wait in lockgen's queue too, holding no connection, mixed with exclusive
// ones: 12 calls in the pattern S S S X S S X X S S S S (S shared, X
// exclusive) queue one at a time on a Locker whose pool has 4 connections,
// behind a session of the test that holds the lock. All 12 are queued
// while the server shows at most 5 connections of the Locker. Released,
// each run of consecutive shared calls holds the lock together (every fn
// of a run waits until the whole run has started), each exclusive call
// runs alone, after every call that queued before it ended and before any
// that queued after it started: arrival order between the runs. The queue
// is empty afterwards.
func TestWaitSharedQueued(t *testing.T) {
	admin := migrated.DB(t)
	const pattern = "SSSXSSXXSSSS"
	for _, driver := range frontdoor.Drivers {
		t.Run(string(driver), func(t *testing.T) {
			ctx := testdb.Context(t)
			lockID := testdb.Key(t)
			app := fmt.Sprintf("waitshared_%d", lockID)
			door := queueDoor(t, driver, app, 4, orderInterval)
			release := holdSession(t, admin, lockID)

			// run[i] is the index of call i's run of shared calls, or -1.
			run := make([]int, len(pattern))
			size := map[int]int{}
			for i, r := 0, 0; i < len(pattern); i++ {
				run[i] = -1
				if pattern[i] == 'S' {
					if i > 0 && pattern[i-1] == 'S' {
						run[i] = run[i-1]
					} else {
						r++
						run[i] = r
					}
					size[run[i]]++
				}
			}
			var mu sync.Mutex
			var clock int
			started := make([]int, len(pattern))
			ended := make([]int, len(pattern))
			runStarted := map[int]int{}
			runAll := map[int]chan struct{}{}
			for r := range size {
				runAll[r] = make(chan struct{})
			}
			done := make(chan error, len(pattern))
			for i := range pattern {
				opts := []pgadvisory.Option{pgadvisory.WithWait(0)}
				if run[i] >= 0 {
					opts = append(opts, pgadvisory.WithShared())
				}
				go func() {
					done <- door.RunExclusive(ctx, lockID, func(frontdoor.Tx) error {
						mu.Lock()
						clock++
						started[i] = clock
						if r := run[i]; r >= 0 {
							runStarted[r]++
							if runStarted[r] == size[r] {
								close(runAll[r])
							}
						}
						mu.Unlock()
						if r := run[i]; r >= 0 {
							select {
							case <-runAll[r]:
							case <-time.After(10 * time.Second):
								return fmt.Errorf("call %d: its run of shared calls did not hold the lock together", i)
							}
						}
						mu.Lock()
						clock++
						ended[i] = clock
						mu.Unlock()
						return nil
					}, opts...)
				}()
				require.Eventually(t, func() bool { return queueRows(t, admin, lockID) == i+1 }, 30*time.Second, 2*time.Millisecond, "call %d queued", i)
			}
			most := requireQueuedConns(t, admin, app, 5)
			t.Logf("%d calls queued; the Locker had at most %d connections on the server", len(pattern), most)

			release()
			for range pattern {
				require.NoError(t, frontdoor.Await(t, done, "a waiting call"))
			}
			mu.Lock()
			defer mu.Unlock()
			for i := range pattern {
				if pattern[i] != 'X' {
					continue
				}
				for j := range pattern {
					switch {
					case j < i:
						require.Less(t, ended[j], started[i], "call %d (X) started before call %d, queued before it, ended", i, j)
					case j > i:
						require.Greater(t, started[j], ended[i], "call %d, queued after call %d (X), started before it ended", j, i)
					}
				}
			}
			require.Zero(t, queueRows(t, admin, lockID), "the queue is empty")
		})
	}
}
