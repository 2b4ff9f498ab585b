package pgadvisory

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// TestLimitedReleaseWakesWaiter: with polling switched off (a waiter
// sleeps an hour between tries unless woken), a released slot wakes a
// waiter: directly in the releasing call's Locker, and by NOTIFY in another
// Locker on another pool, once the releasing call had waited itself (its
// statement queues the NOTIFY, delivered at commit).
//
// Control: the release of a call that did not wait sends no NOTIFY, and
// the other Locker's waiter, which would run if woken, stays asleep.
//
// Steps, n = 1: both Lockers listen (and their listeners' wake-up of every
// waiter after connecting has passed). A1 (Locker A, no wait) holds the
// slot and B (Locker B) waits. A1 releases: B is not woken within a second (the
// control). A3 (A, no wait) takes the slot, A2 (A) waits; A3 releases and
// wakes A2 in Locker A. A2, which waited, releases: its NOTIFY wakes B.
func TestLimitedReleaseWakesWaiter(t *testing.T) {
	ctx, calls := pollingOff(t, &limitedPollMin, &limitedPollMax)
	poolA, poolB := testdb.Pool(t), testdb.Pool(t)
	db := stdlib.OpenDBFromPool(poolA)
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, Migrate(ctx, db))
	la, err := New(Pgx(poolA))
	require.NoError(t, err)
	lb, err := New(Pgx(poolB))
	require.NoError(t, err)
	lock := ID(testdb.Key(t))
	require.NoError(t, la.RunLimited(ctx, lock, 1, func(pgx.Tx) error { return nil }), "registers n = 1")

	// hold starts a call of l that holds the slot until release is closed,
	// and returns a channel closed when its fn starts and one that receives
	// its result.
	hold := func(l *Locker[pgx.Tx], release chan struct{}, opts ...Option) (started chan struct{}, done chan error) {
		started, done = make(chan struct{}), make(chan error, 1)
		calls.Add(1)
		go func() {
			defer calls.Done()
			done <- l.RunLimited(ctx, lock, 1, func(pgx.Tx) error {
				close(started)
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}, opts...)
		}()
		return started, done
	}
	within := func(ch chan struct{}, d time.Duration) bool {
		select {
		case <-ch:
			return true
		case <-time.After(d):
			return false
		}
	}
	waiting := func(l *Locker[pgx.Tx], n int) {
		t.Helper()
		require.Eventually(t, func() bool {
			return l.s.limitedWaiters().count(lock.ID) == n
		}, 10*time.Second, time.Millisecond)
	}

	releaseA1 := make(chan struct{})
	startedA1, doneA1 := hold(la, releaseA1)
	require.True(t, within(startedA1, 10*time.Second))
	// listen makes l's Locker listen, and waits until it has woken its
	// waiters once after connecting (a probe subscribed for another lock
	// receives that), so that no such wake-up comes later.
	listen := func(l *Locker[pgx.Tx], pool *pgxpool.Pool) {
		t.Helper()
		lw := l.s.limitedWaiters()
		probe := lw.join(lock.ID+1, pgxListener(pool))
		t.Cleanup(func() { lw.leave(probe) })
		require.Eventually(t, l.s.waits.listening, 10*time.Second, time.Millisecond, "the Locker listens")
		select {
		case <-probe.ch:
		case <-time.After(10 * time.Second):
			t.Fatal("no wake-up after the listener connected")
		}
	}
	listen(la, poolA)
	listen(lb, poolB)

	releaseB := make(chan struct{})
	close(releaseB)
	startedB, doneB := hold(lb, releaseB, WithWait(0))
	waiting(lb, 1)

	close(releaseA1)
	require.NoError(t, <-doneA1)
	require.False(t, within(startedB, time.Second), "control: a release without NOTIFY does not wake another Locker's waiter")

	releaseA3 := make(chan struct{})
	startedA3, doneA3 := hold(la, releaseA3)
	require.True(t, within(startedA3, 10*time.Second))
	releaseA2 := make(chan struct{})
	startedA2, doneA2 := hold(la, releaseA2, WithWait(0))
	waiting(la, 1)
	close(releaseA3)
	require.NoError(t, <-doneA3)
	require.True(t, within(startedA2, 10*time.Second), "A3's release wakes A2, its Locker's waiter")

	close(releaseA2)
	require.NoError(t, <-doneA2)
	require.True(t, within(startedB, 10*time.Second), "A2 had waited: its release's NOTIFY wakes B")
	require.NoError(t, <-doneB)
	waiting(lb, 0)
}

// TestLimitedWaitersWakeFirstOnly: a Locker's limited waiters of one lock
// are woken one at a time, the first to wait first; when it leaves, the
// next one is first.
func TestLimitedWaitersWakeFirstOnly(t *testing.T) {
	var s lockerState
	lw := s.limitedWaiters()
	const id = 42
	a, b := lw.join(id, nil), lw.join(id, nil)
	other := lw.join(id+1, nil)
	woken := func(sub *waitSub) bool {
		select {
		case <-sub.ch:
			return true
		default:
			return false
		}
	}
	lw.wake(id)
	require.True(t, woken(a))
	require.False(t, woken(b), "only the first waiter")
	require.False(t, woken(other), "only the lock's waiters")
	s.waits.wake(id, 0, false) // a NOTIFY "id:0"
	require.True(t, woken(a))
	require.False(t, woken(b))
	lw.leave(a)
	lw.wake(id)
	require.True(t, woken(b), "the next waiter is first")
	require.Equal(t, 1, lw.count(id))
	lw.leave(b)
	lw.leave(other)
	require.Zero(t, lw.count(id))
	lw.wake(id) // none: nothing happens
}

// TestSessionLimitedReleaseWakesWaiter: with polling switched off, a
// session-limited call's release wakes its Locker's waiting session-limited
// call (a session release sends no NOTIFY). Control: while the slot is held
// the waiter does not run.
func TestSessionLimitedReleaseWakesWaiter(t *testing.T) {
	ctx, calls := pollingOff(t, &limitedPollMin, &limitedPollMax)
	pool := testdb.Pool(t)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, Migrate(ctx, db))
	l, err := New(Pgx(pool))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	lock := ID(testdb.Key(t))

	release, started := make(chan struct{}), make(chan struct{})
	holderDone := make(chan error, 1)
	calls.Add(1)
	go func() {
		defer calls.Done()
		holderDone <- l.RunSessionLimited(ctx, lock, 1, func(context.Context) error {
			close(started)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		})
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the holder did not start")
	}
	ran := make(chan struct{})
	waiterDone := make(chan error, 1)
	calls.Add(1)
	go func() {
		defer calls.Done()
		waiterDone <- l.RunSessionLimited(ctx, lock, 1, func(context.Context) error {
			close(ran)
			return nil
		}, WithWait(0))
	}()
	require.Eventually(t, func() bool {
		return l.s.limitedWaiters().count(lock.ID) == 1
	}, 10*time.Second, time.Millisecond)
	select {
	case <-ran:
		t.Fatal("control: the waiter ran while the slot was held")
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	require.NoError(t, <-holderDone)
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the holder's release did not wake the waiter")
	}
	require.NoError(t, <-waiterDone)
}

// TestLimitedWakeChain: a waiter that takes its slot stops being a waiter
// at once, so that the next release wakes the next one. With polling
// switched off and a Locker that does not listen (no NOTIFY reaches it,
// as behind a pooler), n = 1: H holds, W1 and then W2 wait. H releases
// and wakes W1; while W1 holds, W2 is the Locker's only waiter; W1
// releases and wakes W2. For RunLimited and RunSessionLimited.
//
// Control: while W1 holds, W2 does not run.
func TestLimitedWakeChain(t *testing.T) {
	for _, kind := range []string{"transaction", "session"} {
		t.Run(kind, func(t *testing.T) {
			ctx, calls := pollingOff(t, &limitedPollMin, &limitedPollMax)
			l := migratedLocker(ctx, t, true)
			lock := ID(testdb.Key(t))
			lw := l.s.limitedWaiters()
			start := func(opts ...Option) *heldCall {
				return startHeld(ctx, calls, func(hold func() error) error {
					if kind == "transaction" {
						return l.RunLimited(ctx, lock, 1, func(pgx.Tx) error { return hold() }, opts...)
					}
					return l.RunSessionLimited(ctx, lock, 1, func(context.Context) error { return hold() }, opts...)
				})
			}
			h := start()
			h.runs(t, "H did not start")
			w1 := start(WithWait(0))
			require.Eventually(t, func() bool { return lw.count(lock.ID) == 1 }, 10*time.Second, time.Millisecond)
			w2 := start(WithWait(0))
			require.Eventually(t, func() bool { return lw.count(lock.ID) == 2 }, 10*time.Second, time.Millisecond)

			h.end(t)
			w1.runs(t, "H's release did not wake W1")
			require.Equal(t, 1, lw.count(lock.ID), "W1 holds its slot: W2 is the only waiter")
			select {
			case <-w2.started:
				t.Fatal("control: W2 ran while W1 held the slot")
			case <-time.After(200 * time.Millisecond):
			}
			w1.end(t)
			w2.runs(t, "W1's release did not wake W2")
			w2.end(t)
			require.Zero(t, lw.count(lock.ID))
		})
	}
}
