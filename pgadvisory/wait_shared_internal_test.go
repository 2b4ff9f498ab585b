package pgadvisory

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// TestQueuedSharedRunsTogether: shared waiters (WithShared) in lockgen's
// queue share the lock with each other and keep arrival order with
// exclusive ones. Polling is switched off and the check interval is five
// minutes, so a waiter tries only when woken: by a NOTIFY (each Locker
// listens), or by a call of its own Locker.
//
// Steps, on three Lockers l, m and n: X (l, exclusive) holds (its first try
// found the queue empty); W1 (l, exclusive), R2 (m, shared), R3 (n,
// shared), W4 (l, exclusive) and R5 (m, shared) queue in that order. X
// releases: it came without queueing, so its Locker wakes its own waiters,
// and W1 takes the lock. W1 releases: its NOTIFY names R2 and R3, the run
// of shared waiters after it, which hold the lock together; R5, behind the
// exclusive W4, does not run, though R2's grant wakes its Locker m. R2 and
// R3 release: their NOTIFYs name W4, which runs once both are gone, alone;
// then R5.
func TestQueuedSharedRunsTogether(t *testing.T) {
	ctx, calls := pollingOff(t, &waitPollMin, &waitPollMax)
	interval := WithDefaultCheckInterval(5 * time.Minute)
	l := migratedLocker(ctx, t, false, interval)
	m := migratedLocker(ctx, t, false, interval)
	n := migratedLocker(ctx, t, false, interval)
	pool := l.d.(pgxDriver).pool
	lock := ID(testdb.Key(t))
	start := func(on *Locker[pgx.Tx], opts ...Option) *heldCall {
		return startHeld(ctx, calls, func(hold func() error) error {
			return on.RunExclusive(ctx, lock, func(pgx.Tx) error { return hold() }, append(opts, WithWait(0))...)
		})
	}
	queued := func(k int) { t.Helper(); requireQueueRows(ctx, t, pool, lock.ID, k) }
	notStarted := func(c *heldCall, what string) {
		t.Helper()
		select {
		case <-c.started:
			t.Fatal(what)
		case <-time.After(300 * time.Millisecond):
		}
	}

	x := start(l)
	x.runs(t, "X did not start")
	w1 := start(l)
	queued(1)
	r2 := start(m, WithShared())
	queued(2)
	r3 := start(n, WithShared())
	queued(3)
	w4 := start(l)
	queued(4)
	r5 := start(m, WithShared())
	queued(5)

	x.end(t)
	w1.runs(t, "X's release did not wake W1")
	notStarted(r2, "R2 ran while W1 held the lock")
	w1.end(t)
	r2.runs(t, "W1's release did not wake R2")
	r3.runs(t, "W1's release did not wake R3, or R3 could not share the lock with R2")
	notStarted(r5, "R5 ran ahead of W4, which queued before it")
	notStarted(w4, "W4 ran while R2 and R3 held the lock")
	r2.end(t)
	notStarted(w4, "W4 ran while R3 held the lock")
	r3.end(t)
	w4.runs(t, "the shared holders' releases did not wake W4")
	notStarted(r5, "R5 ran while W4 held the lock")
	w4.end(t)
	r5.runs(t, "W4's release did not wake R5")
	r5.end(t)
	queued(0)
}

// TestQueuedSharedReleaseWakesWriter: a shared holder's release names the
// first exclusive waiter, not a shared one that holds the lock with it. On
// a Locker that does not listen (no NOTIFY reaches it, as behind a pooler),
// with polling off, that name is the only wake-up: X holds (its first try
// found the queue empty); R2 and R3 (shared) and W4 (exclusive) queue. X
// releases and wakes them; R2 and R3 hold the lock together, W4 waits.
// R3 releases, then R2: R2's release wakes W4, which runs.
func TestQueuedSharedReleaseWakesWriter(t *testing.T) {
	ctx, calls := pollingOff(t, &waitPollMin, &waitPollMax)
	l := migratedLocker(ctx, t, true, WithDefaultCheckInterval(5*time.Minute))
	pool := l.d.(pgxDriver).pool
	lock := ID(testdb.Key(t))
	start := func(opts ...Option) *heldCall {
		return startHeld(ctx, calls, func(hold func() error) error {
			return l.RunExclusive(ctx, lock, func(pgx.Tx) error { return hold() }, append(opts, WithWait(0))...)
		})
	}
	queued := func(k int) { t.Helper(); requireQueueRows(ctx, t, pool, lock.ID, k) }

	x := start()
	x.runs(t, "X did not start")
	r2 := start(WithShared())
	queued(1)
	r3 := start(WithShared())
	queued(2)
	w4 := start()
	queued(3)

	x.end(t)
	r2.runs(t, "X's release did not wake R2")
	r3.runs(t, "R3 did not share the lock with R2")
	r3.end(t)
	select {
	case <-w4.started:
		t.Fatal("W4 ran while R2 held the lock")
	case <-time.After(300 * time.Millisecond):
	}
	r2.end(t)
	w4.runs(t, "R2's release did not wake W4, the exclusive waiter behind it")
	w4.end(t)
	queued(0)
}

// requireQueueRows waits until lockID's queue has k rows, for at most 10s.
func requireQueueRows(ctx context.Context, t *testing.T, pool *pgxpool.Pool, lockID int64, k int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var rows int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pgadvisory.waiter WHERE lock_id = $1`, lockID).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if rows == k {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters queued, want %d", rows, k)
		}
		time.Sleep(time.Millisecond)
	}
}
