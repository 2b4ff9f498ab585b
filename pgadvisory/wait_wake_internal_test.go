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
// it wakes all three; A takes the lock, B and C refresh their rows. A
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
	require.Eventually(t, func() bool {
		_, exp := expiries()
		cExpiry = exp[cSeq]
		return exp[bSeq].After(before[bSeq]) && cExpiry.After(before[cSeq])
	}, 10*time.Second, time.Millisecond, "X's release (no NOTIFY) woke B and C: their rows were refreshed")

	a.end(t)
	b.runs(t, "A's release did not wake B, the waiter its NOTIFY names")
	require.Never(t, func() bool { _, exp := expiries(); return !exp[cSeq].Equal(cExpiry) }, 300*time.Millisecond, 10*time.Millisecond,
		"A's release woke C too: C's row was refreshed")
	b.end(t)
	c.runs(t, "B's release did not wake C")
	c.end(t)
}
