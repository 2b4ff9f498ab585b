package pgadvisory

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// pollGate bounds the rate of a Locker's poll statements: the tries that a
// waiting call makes because its polling interval passed, not because it
// was woken (NOTIFY, or a release in this process) and not its first try.
// Queued transaction-lock waiters (wait_queue.go), queued session-lock
// waiters (session_queue.go) and lease campaigns (lease.go) each poll on
// their own schedule; without the gate a Locker's statements would grow
// with its waiters (1,000 waiting session keys: about 5,000 statements/s
// on its shared connections, crowding out their pg_locks checks). With it
// a Locker sends at most pollRate poll statements per second, and each
// waiter's interval stretches when many wait: a holder that died is then
// noticed later (docs/waiting.md).
//
// Slots are spaced gap apart, handed out in the order asked for; a waiter
// that stops waiting for its slot (woken, ctx, timeout) gives it back when
// no later one was handed out. A waiter whose queue row would expire
// before its slot polls by the row's refresh time instead (its slot stays
// taken, so the rate holds over a cycle): a row's expiry follows the
// cycle of its last try, and waiters that joined together in a burst set
// theirs before the others counted.
type pollGate struct {
	mu   sync.Mutex
	next time.Time     // the earliest free slot
	gap  time.Duration // between slots; 0: time.Second/pollRate (set before use)
	// waiters polling through the gate now (enter, exit)
	waiters atomic.Int64
}

// pollRate is the most poll statements per second a Locker sends.
const pollRate = 200

// The outcomes of pollGate.wait besides an error.
const (
	pollSlot     = iota // the slot came: poll
	pollWoken           // woken meanwhile: try at once (no slot used)
	pollDeadline        // the deadline passed first
)

func (g *pollGate) spacing() time.Duration {
	if g.gap > 0 {
		return g.gap
	}
	return time.Second / pollRate
}

// enter counts a waiter that polls through the gate until its exit.
func (g *pollGate) enter() { g.waiters.Add(1) }
func (g *pollGate) exit()  { g.waiters.Add(-1) }

// cycle is how long every waiter of the gate takes to get one slot: how
// much a waiter's interval between polls may stretch.
func (g *pollGate) cycle() time.Duration {
	return time.Duration(max(0, g.waiters.Load())) * g.spacing()
}

// wait takes the next poll slot and waits for it, returning pollSlot then
// (or at refreshBy, when that comes first: zero, never), pollWoken when
// woken comes first (nil: never), pollDeadline when deadline (zero: none)
// passes first, or ctx's error. A slot that is free now is taken without
// a timer.
func (g *pollGate) wait(ctx context.Context, deadline, refreshBy time.Time, woken <-chan struct{}) (int, error) {
	g.mu.Lock()
	now := time.Now()
	slot := g.next
	if slot.Before(now) {
		slot = now
	}
	gap := g.spacing()
	g.next = slot.Add(gap)
	g.mu.Unlock()
	at := slot
	if !refreshBy.IsZero() && refreshBy.Before(at) {
		at = refreshBy // the row's refresh cannot wait for the slot
	}
	d := at.Sub(now)
	if d <= 0 {
		return pollSlot, nil
	}
	giveBack := func() {
		g.mu.Lock()
		if g.next.Equal(slot.Add(gap)) {
			g.next = slot
		}
		g.mu.Unlock()
	}
	var dl <-chan time.Time
	if !deadline.IsZero() {
		left := time.Until(deadline)
		if left <= 0 {
			giveBack()
			return pollDeadline, nil
		}
		if left < d {
			dt := time.NewTimer(left)
			defer dt.Stop()
			dl = dt.C
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return pollSlot, nil
	case <-woken:
		giveBack()
		return pollWoken, nil
	case <-dl:
		giveBack()
		return pollDeadline, nil
	case <-ctx.Done():
		giveBack()
		return 0, ctx.Err()
	}
}
