package pgadvisory_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/faultproxy"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// A slow check is not a lost lock: the session watcher bounds each check by
// its check timeout (WithCheckTimeout, default 5s), not by the check
// interval, so a healthy lock survives checks that take longer than the
// interval, on a slow link or a busy machine. A check that does not answer
// within the timeout is a loss (TestFaultSessionBlackhole), as the control
// here shows with a timeout shorter than the checks.

// TestSessionSlowCheckIsNotLoss: every message to the server is delayed by
// 150ms (an in-process proxy holds it) while fn runs, three times the 50ms
// interval. The checks take that long and the lock survives with the
// default check timeout; with WithCheckTimeout(50ms), as the interval bound
// the checks before, the first slow check drops the healthy lock.
func TestSessionSlowCheckIsNotLoss(t *testing.T) {
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		w := witness.Of(testdb.DB(t))
		px := faultproxy.ToTestDB(t)
		var slow atomic.Bool
		var delayed atomic.Int64
		px.OnClientWrite(func([]byte) faultproxy.Action {
			if slow.Load() {
				delayed.Add(1)
				time.Sleep(150 * time.Millisecond)
			}
			return faultproxy.Forward
		})
		door := frontdoor.Open(t, drv, frontdoor.MaxConns(2), frontdoor.Configure(px.Route))
		interval := pgadvisory.WithCheckInterval(50 * time.Millisecond)

		t.Run("default check timeout", func(t *testing.T) {
			key := testdb.Key(t)
			delayed.Store(0)
			err := door.RunSession(ctx, pgadvisory.ID(key), func(fctx context.Context) error {
				w.Holder(t, key)
				slow.Store(true)
				defer slow.Store(false)
				select {
				case <-fctx.Done():
					t.Errorf("a slow check dropped a healthy lock: %v", context.Cause(fctx))
				case <-time.After(time.Second):
				}
				w.Holder(t, key)
				return nil
			}, interval)
			require.NoError(t, err)
			require.GreaterOrEqual(t, delayed.Load(), int64(3), "several checks were slow")
			require.Empty(t, w.Holds(t, key))
		})

		t.Run("control: checks bounded by the interval", func(t *testing.T) {
			key := testdb.Key(t)
			var cause error
			err := door.RunSession(ctx, pgadvisory.ID(key), func(fctx context.Context) error {
				slow.Store(true)
				defer slow.Store(false)
				select {
				case <-fctx.Done():
					cause = context.Cause(fctx)
				case <-time.After(30 * time.Second):
					t.Error("the slow check was not given up")
				}
				return fctx.Err()
			}, interval, pgadvisory.WithCheckTimeout(50*time.Millisecond))
			require.ErrorIs(t, cause, pgadvisory.ErrLockLost)
			require.ErrorIs(t, err, pgadvisory.ErrLockLost)
			require.ErrorContains(t, err, "did not answer within 50ms")
			// The dropped connection's lock goes once its close gets through.
			require.Eventually(t, func() bool { return len(w.Holds(t, key)) == 0 }, 30*time.Second, 10*time.Millisecond)
		})
	})
}

// TestSessionWatcherUnderLoad is a busy machine: 48 session locks
// with a 50ms check interval while 8 goroutines keep the (2) cores busy,
// for two seconds each. No lock is lost with the default check timeout.
// The same run with WithCheckTimeout(50ms), the bound the checks had
// before, is reported (it lost 15 of 48 locks on a 2-core machine); how many it
// loses depends on the machine's load, so it is logged, not asserted (the
// deterministic control is TestSessionSlowCheckIsNotLoss). The sessions run
// on a throwaway cluster, so that 48 connections per front door do not
// crowd the shared test server.
func TestSessionWatcherUnderLoad(t *testing.T) {
	c := pgcluster.Shared(t, "pgadvisory-sessions", pgcluster.WithSetting("max_connections", "120"))
	const sessions, busy = 48, 8
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		door := frontdoor.Open(t, drv, frontdoor.URL(c.URL()), frontdoor.MaxConns(sessions+2))
		// run returns how many locks were lost and the other errors. The
		// informational pass's errors depend on the machine's load too (an
		// acquisition whose statement does not answer within its 50ms
		// check timeout), so only the caller decides what fails the test.
		run := func(opts ...pgadvisory.Option) (lost int, others []error) {
			ctx := testdb.Context(t)
			stop := make(chan struct{})
			var spin sync.WaitGroup
			for range busy {
				spin.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
					}
				})
			}
			var calls sync.WaitGroup
			var lostN atomic.Int64
			var mu sync.Mutex
			for range sessions {
				key := testdb.Key(t)
				calls.Go(func() {
					err := door.RunSession(ctx, pgadvisory.ID(key), func(fctx context.Context) error {
						select {
						case <-fctx.Done():
						case <-time.After(2 * time.Second):
						}
						return nil
					}, append(opts, pgadvisory.WithCheckInterval(50*time.Millisecond))...)
					switch {
					case err == nil:
					case errors.Is(err, pgadvisory.ErrLockLost):
						lostN.Add(1)
					default:
						mu.Lock()
						others = append(others, err)
						mu.Unlock()
					}
				})
			}
			calls.Wait()
			close(stop)
			spin.Wait()
			return int(lostN.Load()), others
		}
		lost, others := run()
		t.Logf("%s: default check timeout: %d of %d locks lost", drv, lost, sessions)
		require.Empty(t, others, "RunSession with the default check timeout")
		require.Zero(t, lost, "a busy machine dropped healthy locks")
		lost, others = run(pgadvisory.WithCheckTimeout(50 * time.Millisecond))
		t.Logf("%s: WithCheckTimeout(50ms), as bounded by the interval before: %d of %d locks lost, %d other errors (logged only: they depend on the machine's load)",
			drv, lost, sessions, len(others))
		for _, err := range others {
			t.Logf("%s: WithCheckTimeout(50ms): RunSession: %v", drv, err)
		}
	})
}
