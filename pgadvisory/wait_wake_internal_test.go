package pgadvisory

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// TestQueuedReleaseWakesNamedWaiter: a holder that took the lock at the
// head of its queue, with others queued behind it, wakes the next waiter
// (the one its NOTIFY names) when it releases, and no other, in its own
// Locker, even when that Locker does not listen (no NOTIFY reaches it, as
// behind a pooler). Polling is switched off and the check interval is five
// minutes, so a waiter tries only when woken.
//
// Steps: X holds (its first try found the queue empty); A, B and C queue in
// that order. X releases: it came without queueing and sends no NOTIFY, so
// it wakes all three; A takes the lock, B and C refresh their rows (a
// fenced A's hand-over removes A's row when A is granted: a B that tries
// after it is the head and waits on the server for A's lock instead). A
// releases: B runs, and C does not try (its row's expiry stays).
//
// Fenced calls (WithFencing) too: their hand-over's statement removes the
// granted call's row and names the next waiter.
func TestQueuedReleaseWakesNamedWaiter(t *testing.T) {
	for name, opts := range map[string][]Option{"plain": {WithWait(0)}, "fenced": {WithWait(0), WithFencing()}} {
		t.Run(name, func(t *testing.T) { testQueuedReleaseWakesNamedWaiter(t, opts) })
	}
}

func testQueuedReleaseWakesNamedWaiter(t *testing.T, opts []Option) {
	ctx, calls := pollingOff(t, &waitPollMin, &waitPollMax)
	l := migratedLocker(ctx, t, true, WithDefaultCheckInterval(5*time.Minute))
	pool := l.d.(pgxDriver).pool
	lock := ID(testdb.Key(t))
	start := func() *heldCall {
		return startHeld(ctx, calls, func(hold func() error) error {
			return l.RunExclusive(ctx, lock, func(pgx.Tx) error { return hold() }, opts...)
		})
	}
	// expiries is the queue's rows, first first: seq -> expiry.
	expiries := func() ([]int64, map[int64]time.Time) {
		rows, err := pool.Query(ctx, `SELECT seq, expires FROM pgadvisory.waiter WHERE lock_id = $1 ORDER BY seq`, lock.ID)
		require.NoError(t, err)
		defer rows.Close()
		var seqs []int64
		exp := map[int64]time.Time{}
		for rows.Next() {
			var seq int64
			var e time.Time
			require.NoError(t, rows.Scan(&seq, &e))
			seqs = append(seqs, seq)
			exp[seq] = e
		}
		require.NoError(t, rows.Err())
		return seqs, exp
	}
	queued := func(n int) {
		t.Helper()
		require.Eventually(t, func() bool { s, _ := expiries(); return len(s) == n }, 10*time.Second, time.Millisecond)
	}

	x := start()
	x.runs(t, "X did not start")
	a := start()
	queued(1)
	b := start()
	queued(2)
	c := start()
	queued(3)
	seqs, before := expiries()
	bSeq, cSeq := seqs[1], seqs[2]

	x.end(t)
	a.runs(t, "X's release did not wake A")
	var cExpiry time.Time
	// B refreshed its row, or, when A's hand-over had removed A's row by
	// the time B tried (a fenced call's hand-over runs when it is
	// granted), B is the head and waits on the server for A's lock (the
	// head of a queue waits there for a holder that is not in it).
	bOnServer := func() bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_locks WHERE locktype = 'advisory'
  AND NOT granted AND ((classid::bigint << 32) | objid::bigint) = $1`, lock.ID).Scan(&n))
		return n > 0
	}
	require.Eventually(t, func() bool {
		_, exp := expiries()
		cExpiry = exp[cSeq]
		return (exp[bSeq].After(before[bSeq]) || bOnServer()) && cExpiry.After(before[cSeq])
	}, 10*time.Second, time.Millisecond, "X's release (no NOTIFY) woke B and C: their rows were refreshed (or B, the head, waits on the server)")

	a.end(t)
	b.runs(t, "A's release did not wake B, the waiter its NOTIFY names")
	require.Never(t, func() bool { _, exp := expiries(); return !exp[cSeq].Equal(cExpiry) }, 300*time.Millisecond, 10*time.Millisecond,
		"A's release woke C too: C's row was refreshed")
	b.end(t)
	c.runs(t, "B's release did not wake C")
	c.end(t)
}

// TestWakeAllWakesEveryPlace: a release that wakes every waiter of its
// lock in the Locker (wakeAll: a holder that did not queue, a set) wakes
// each, whether it knows its place in the queue yet or not. Waking by
// place 0 woke only the waiters that did not know theirs when one of them
// did not (a call between its join and its sleep), and the others, with
// polling off, never tried again (TestQueuedReleaseWakesNamedWaiter failed
// so under load).
func TestWakeAllWakesEveryPlace(t *testing.T) {
	var h waitHub
	placed := h.subscribe([]int64{7}, false, nil)
	placed.seq.Store(42)
	unplaced := h.subscribe([]int64{7}, false, nil)
	other := h.subscribe([]int64{8}, false, nil)
	h.wakeAll([]int64{7})
	for name, s := range map[string]*waitSub{"the waiter with a place": placed, "the waiter without one yet": unplaced} {
		select {
		case <-s.ch:
		default:
			t.Errorf("%s of lock 7 was not woken", name)
		}
	}
	select {
	case <-other.ch:
		t.Error("the waiter of lock 8 was woken")
	default:
	}
}
