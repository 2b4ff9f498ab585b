package pgadvisory_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/faultproxy"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Fault-injection tests of a link that goes silent (half-open: nothing
// moves, nothing closes): a session
// lock's watcher notices and cancels the work, and the server keeps a silent
// holder's lock until something tells it otherwise. failurePoolSize is in
// failures_connection_test.go.

// TestFaultSessionBlackhole: a session lock's link goes silent (half-open:
// nothing moves, nothing closes) while its work runs. With
// WithCheckInterval(100ms) and WithCheckTimeout(1s) the work's context is
// canceled with ErrLockLost although no error ever arrives (the check that
// does not answer within its timeout), and the call reports ErrLockLost.
// The server, which has heard nothing, still holds the lock until the link
// heals and the client's close gets through. The same with the defaults
// (interval 1s, check timeout 5s) is measured too (logged; the bound of
// interval plus timeout is what the documentation states). Control: through
// the same proxy without the blackhole, ten intervals pass without a
// cancelation.
func TestFaultSessionBlackhole(t *testing.T) {
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		w := witness.Of(testdb.DB(t))
		px := faultproxy.ToTestDB(t)
		door := frontdoor.Open(t, drv, frontdoor.MaxConns(2), frontdoor.Configure(px.Route))
		t.Cleanup(func() { px.Blackhole(false) })
		interval := pgadvisory.WithCheckInterval(100 * time.Millisecond)
		// A check timeout far above a check's time on a busy machine (the
		// control fails when a check merely slowed by load exceeds it).
		timeout := pgadvisory.WithCheckTimeout(time.Second)

		blackholed := func(t *testing.T, timeoutText string, opts ...pgadvisory.Option) {
			key := testdb.Key(t)
			var cause error
			var detect time.Duration
			start := time.Now()
			err := door.RunSession(ctx, pgadvisory.ID(key), func(fctx context.Context) error {
				w.Holder(t, key)
				px.Blackhole(true)
				start = time.Now()
				require.Eventually(t, func() bool { return fctx.Err() != nil }, 30*time.Second, 5*time.Millisecond,
					"the work's context was not canceled after the link went silent")
				detect = time.Since(start)
				cause = context.Cause(fctx)
				return fctx.Err()
			}, opts...)
			returned := time.Since(start)
			t.Logf("%s, check timeout %s: work canceled %v after the blackhole, call returned after %v", drv, timeoutText, detect, returned)
			require.ErrorIs(t, cause, pgadvisory.ErrLockLost)
			require.ErrorIs(t, err, pgadvisory.ErrLockLost)
			var pe *pgadvisory.Error
			require.ErrorAs(t, err, &pe)
			require.Equal(t, pgadvisory.OpWatch, pe.Op)
			require.ErrorContains(t, err, "did not answer within "+timeoutText)

			require.Len(t, w.Holds(t, key), 1, "the server has heard nothing and still holds the lock")
			px.Blackhole(false)
			require.Eventually(t, func() bool { return len(w.Holds(t, key)) == 0 }, 30*time.Second, 10*time.Millisecond,
				"the client's close gets through once the link heals")
		}
		t.Run("blackholed", func(t *testing.T) { blackholed(t, "1s", interval, timeout) })
		t.Run("blackholed, defaults", func(t *testing.T) { blackholed(t, "5s") })

		t.Run("control: link healthy", func(t *testing.T) {
			key := testdb.Key(t)
			require.NoError(t, door.RunSession(ctx, pgadvisory.ID(key), func(fctx context.Context) error {
				select {
				case <-fctx.Done():
					t.Errorf("work canceled although the link is healthy: %v", context.Cause(fctx))
				case <-time.After(time.Second):
				}
				w.Holder(t, key)
				return nil
			}, interval, timeout))
			require.Empty(t, w.Holds(t, key))
		})
	})
}

// TestFaultHalfOpenHoldTime measures how long the server keeps a
// RunExclusivePgx holder's lock after the holder's link goes silent (the
// client gives up on its statement after 200ms and the call returns; the
// server has heard nothing). Cases:
//   - default settings: the lock is still held when polling stops (3s), the
//     control that the server does not notice by itself;
//   - idle_in_transaction_session_timeout = 500ms on the session: the server
//     ends the idle transaction and releases the lock; asserted eventually,
//     the time is reported;
//   - tcp_keepalives_idle/interval/count = 1s/1s/2 on the session: reported
//     only. The proxy's kernel still acknowledges the probes (only the bytes
//     stop), so keepalives cannot see this stall; they detect a dead or
//     unreachable peer host, which this proxy does not simulate.
//
// The measured times are logged, never asserted.
func TestFaultHalfOpenHoldTime(t *testing.T) {
	cases := []struct {
		name    string
		params  map[string]string
		bound   time.Duration
		release bool // must be released within bound (asserted)
		held    bool // must still be held at bound (asserted)
	}{
		{name: "default", bound: 3 * time.Second, held: true},
		{name: "idle_in_transaction_session_timeout=500ms", params: map[string]string{"idle_in_transaction_session_timeout": "500"},
			bound: 30 * time.Second, release: true},
		{name: "tcp_keepalives=1s,1s,2", params: map[string]string{"tcp_keepalives_idle": "1", "tcp_keepalives_interval": "1", "tcp_keepalives_count": "2"},
			bound: 4 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testdb.Context(t)
			w := witness.New(t)
			px := faultproxy.ToTestDB(t)
			t.Cleanup(func() { px.Blackhole(false) })
			door := frontdoor.Open(t, frontdoor.Pgx, frontdoor.MaxConns(failurePoolSize),
				frontdoor.Configure(px.Route), frontdoor.Settings(tc.params))
			key := testdb.Key(t)
			var silent time.Time
			err := door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
				require.NoError(t, w.Mark(ctx, tx, "half-open"))
				for k, v := range tc.params { // the session really runs with them
					n, err := tx.QueryInt(ctx, "SELECT setting::bigint FROM pg_catalog.pg_settings WHERE name = $1", k)
					require.NoError(t, err)
					require.Equal(t, v, strconv.FormatInt(n, 10), k)
				}
				px.Blackhole(true)
				silent = time.Now()
				sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				defer cancel()
				return tx.Exec(sctx, "SELECT 1")
			})
			returned := time.Since(silent)
			require.Error(t, err)

			var held time.Duration
			released := false
			for {
				if w.Locks(t, true, key) == 0 {
					held, released = time.Since(silent), true
					break
				}
				if time.Since(silent) > tc.bound {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if released {
				t.Logf("%s: call returned %v after the link went silent (%v); server released the lock after %v",
					tc.name, returned, err, held)
			} else {
				t.Logf("%s: call returned %v after the link went silent (%v); lock still held by the server after %v",
					tc.name, returned, err, tc.bound)
			}
			if tc.held {
				require.False(t, released, "control: with default settings the server keeps the lock of a silent client")
			}
			if tc.release {
				require.True(t, released, "the server released the lock of the silent client")
			}
			px.Blackhole(false)
			w.RequireClosing(t, door, witness.Closing{Mark: "half-open", Late: true, Next: "next-call"}, key)
		})
	}
}
