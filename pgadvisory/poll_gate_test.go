package pgadvisory_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/wirecount"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestSessionQueuedPollsBounded: 200 RunSession calls with WithWait(0) on
// one Locker wait in lockgen's queue for 200 keys that another backend
// holds (no release, so no wake-up: they only poll, each every heartbeat
// of the check interval, 100ms here). Over a window, the statements on
// the Locker's connections stay within the rate of its poll slots (20/s
// here, in place of the default 200/s so the bound is far from what the
// machine can do; 2 round trips a poll) with slack, while the waiters' rows stay live (their
// expiry grows with the stretched polling: every waiter keeps its turn).
// Canceling ctx ends every waiter though most wait for a slot seconds
// ahead, and leaves no row behind. Control: the same Locker with slots
// 1ns apart (no bound) sends many times more.
func TestSessionQueuedPollsBounded(t *testing.T) {
	const (
		n        = 200
		gap      = 50 * time.Millisecond
		window   = 2 * time.Second
		interval = 500 * time.Millisecond // heartbeat 100ms: 2,000 polls/s unbounded
	)
	admin := migrated.DB(t)
	w := witness.Of(admin)
	ctx := testdb.Context(t)
	keys := make([]int64, n)
	base := testdb.Key(t) << 8
	for i := range keys {
		keys[i] = base + int64(i)
	}
	holder, err := admin.Conn(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Close() })
	_, err = holder.ExecContext(ctx, `SELECT pg_advisory_lock(k) FROM unnest($1::bigint[]) AS k`, keys)
	require.NoError(t, err)

	// polls runs the waiters with slots d apart and returns the round
	// trips of the Locker's connections over the window.
	polls := func(t *testing.T, d time.Duration) int64 {
		c := wirecount.New()
		l := gatedLocker(t, c, d, pgadvisory.WithDefaultCheckInterval(interval))
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		errs := make(chan error, n)
		var wg sync.WaitGroup
		for _, key := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- l.RunSession(wctx, pgadvisory.ID(key), func(context.Context) error { return nil }, pgadvisory.WithWait(0))
			}()
		}
		require.Eventually(t, func() bool { return waitingFor(t, w, keys) == n }, 30*time.Second, 20*time.Millisecond, "every call waits")
		time.Sleep(interval) // past the first tries
		before := c.RoundTrips()
		time.Sleep(window)
		got := c.RoundTrips() - before
		require.Equal(t, n, waitingFor(t, w, keys), "every waiter's row is live after the window")
		cancel()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		frontdoor.Await(t, done, "every waiter returns on ctx")
		close(errs)
		for err := range errs {
			require.ErrorIs(t, err, context.Canceled)
		}
		require.Eventually(t, func() bool { return queueRowsOf(t, w, keys) == 0 }, 10*time.Second, 10*time.Millisecond, "no row is left behind")
		return got
	}
	// A poll is one statement on a shared connection; on the wire it
	// counted 1.3-2 round trips here (5153 slots: 6521 round trips; 28
	// slots: 58), so the bound allows 2 per poll, with half again as
	// many polls as slack.
	bound := 2*int64(window/gap)*3/2 + 10
	limited := polls(t, gap)
	unbounded := polls(t, time.Nanosecond)
	t.Logf("round trips in %v with %d waiters: %d with a poll slot every %v (bound %d), %d without a bound", window, n, limited, gap, bound, unbounded)
	require.LessOrEqual(t, limited, bound, "the Locker's polls stay within its poll rate")
	require.GreaterOrEqual(t, limited, int64(window/gap)/4, "the slots go to the waiters: none is left idle")
	require.Greater(t, unbounded, 4*bound, "control: without the bound the waiters poll many times more")
}

// gatedLocker is a pgx Locker with 2 shared connections and poll slots d
// apart, on a pool of 4 connections whose round trips c counts (the pool
// does not ping: its pings would count).
func gatedLocker(t *testing.T, c *wirecount.Counter, d time.Duration, opts ...pgadvisory.LockerOption) *pgadvisory.Locker[pgx.Tx] {
	t.Helper()
	pool := testdb.PoolConfig(t, func(cfg *pgxpool.Config) {
		cfg.MaxConns = 4
		cfg.ConnConfig.DialFunc = c.Dial(cfg.ConnConfig.DialFunc)
		cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	})
	l, err := pgadvisory.New(pgadvisory.Pgx(pool), append([]pgadvisory.LockerOption{pgadvisory.WithSessionConns(2)}, opts...)...)
	require.NoError(t, err)
	pgadvisory.PollGapForTest(l, d)
	return l
}

// queueRowsOf counts the rows of lockgen's queue for keys, live or not.
func queueRowsOf(t testing.TB, w *witness.Witness, keys []int64) int {
	t.Helper()
	var n int
	require.NoError(t, w.DB.QueryRow(`SELECT count(*) FROM pgadvisory.waiter WHERE lock_id = ANY($1)`, keys).Scan(&n))
	return n
}

// TestQueuedRowOutlivesPollBacklog: a waiter whose row was set with a
// short expiry (the check interval's 3/4, as for the waiters that join
// in a burst before the others count) keeps its row live though its
// Locker's next poll slot is a minute ahead: it refreshes the row in time
// instead of waiting for the slot. For a session lock and a transaction
// lock (whose head waits on the server for half its row's expiry, then
// polls), each behind a holder that never releases.
func TestQueuedRowOutlivesPollBacklog(t *testing.T) {
	const interval = 400 * time.Millisecond // rows expire 300ms after each try
	admin := migrated.DB(t)
	w := witness.Of(admin)
	for _, kind := range []string{"session", "transaction"} {
		t.Run(kind, func(t *testing.T) {
			ctx := testdb.Context(t)
			key := testdb.Key(t)
			holdSession(t, admin, key)
			l, err := pgadvisory.New(pgadvisory.Pgx(testdb.Pool(t)), pgadvisory.WithDefaultCheckInterval(interval))
			require.NoError(t, err)
			pgadvisory.PollBacklogForTest(l, time.Minute)
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				if kind == "session" {
					done <- l.RunSession(wctx, pgadvisory.ID(key), func(context.Context) error { return nil }, pgadvisory.WithWait(0))
					return
				}
				done <- l.RunExclusive(wctx, pgadvisory.ID(key), func(pgx.Tx) error { return nil }, pgadvisory.WithWait(0))
			}()
			keys := []int64{key}
			require.Eventually(t, func() bool { return queueRowsOf(t, w, keys) == 1 }, 30*time.Second, 5*time.Millisecond, "the call joins the queue")
			for range 8 { // 8 × 250ms: past 6 expiries of a row not refreshed
				time.Sleep(250 * time.Millisecond)
				require.Equal(t, 1, liveRowsOf(t, w, keys), "the waiter's row is live")
			}
			cancel()
			require.ErrorIs(t, <-done, context.Canceled)
		})
	}
}

// liveRowsOf counts the unexpired rows of lockgen's queue for keys.
func liveRowsOf(t testing.TB, w *witness.Witness, keys []int64) int {
	t.Helper()
	var n int
	require.NoError(t, w.DB.QueryRow(`SELECT count(*) FROM pgadvisory.waiter WHERE lock_id = ANY($1) AND expires > clock_timestamp()`, keys).Scan(&n))
	return n
}

// TestLimitedPollsBounded: 50 waiting limited calls on one Locker, each
// for a lock of n = 1 whose slot another Locker holds (no release, so no
// wake-up: they only poll, every 50ms), pass their Locker's poll gate:
// over a window, the round trips of their Locker stay within the rate of
// its poll slots (20/s here; at most 3 round trips a poll, a transaction
// try's BEGIN, slot statement and ROLLBACK) with slack. For RunLimited and
// RunSessionLimited. Control: slots 1ns apart (no bound) send many times
// more.
func TestLimitedPollsBounded(t *testing.T) {
	const (
		n      = 50
		gap    = 50 * time.Millisecond
		window = 2 * time.Second
	)
	migrated.DB(t) // the schema, in the test database
	for _, kind := range []string{"RunLimited", "RunSessionLimited"} {
		t.Run(kind, func(t *testing.T) {
			ctx := testdb.Context(t)
			keys := make([]int64, n)
			base := testdb.Key(t) << 8
			for i := range keys {
				keys[i] = base + int64(i)
			}
			// The holder: every slot held on its Locker's shared connections.
			holder, err := pgadvisory.New(pgadvisory.Pgx(testdb.Pool(t)))
			require.NoError(t, err)
			hctx, release := context.WithCancel(ctx)
			var held sync.WaitGroup
			t.Cleanup(func() { release(); held.Wait() })
			for _, key := range keys {
				in := make(chan struct{})
				held.Add(1)
				go func() {
					defer held.Done()
					_ = holder.RunSessionLimited(hctx, pgadvisory.ID(key), 1, func(ctx context.Context) error {
						close(in)
						<-ctx.Done()
						return nil
					})
				}()
				frontdoor.Await(t, in, "the holder takes the slot")
			}

			polls := func(t *testing.T, d time.Duration) int64 {
				c := wirecount.New()
				l := gatedLocker(t, c, d)
				wctx, cancel := context.WithCancel(ctx)
				defer cancel()
				errs := make(chan error, n)
				var wg sync.WaitGroup
				for _, key := range keys {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if kind == "RunLimited" {
							errs <- l.RunLimited(wctx, pgadvisory.ID(key), 1, func(pgx.Tx) error { return nil }, pgadvisory.WithWait(0))
							return
						}
						errs <- l.RunSessionLimited(wctx, pgadvisory.ID(key), 1, func(context.Context) error { return nil }, pgadvisory.WithWait(0))
					}()
				}
				require.Eventually(t, func() bool { return pgadvisory.PollWaitersForTest(l) == n }, 30*time.Second, 10*time.Millisecond, "every call waits")
				time.Sleep(200 * time.Millisecond) // past the first tries
				before := c.RoundTrips()
				time.Sleep(window)
				got := c.RoundTrips() - before
				cancel()
				wg.Wait()
				close(errs)
				for err := range errs {
					require.ErrorIs(t, err, context.Canceled)
				}
				return got
			}
			bound := 3*int64(window/gap)*3/2 + 10
			limited := polls(t, gap)
			unbounded := polls(t, time.Nanosecond)
			t.Logf("%s: round trips in %v with %d waiters: %d with a poll slot every %v (bound %d), %d without a bound", kind, window, n, limited, gap, bound, unbounded)
			require.LessOrEqual(t, limited, bound, "the Locker's polls stay within its poll rate")
			require.GreaterOrEqual(t, limited, int64(window/gap)/4, "the slots go to the waiters: none is left idle (a wake-up of every waiter when the listener connects leaves none)")
			require.Greater(t, unbounded, 4*bound, "control: without the bound the waiters poll many times more")
		})
	}
}
