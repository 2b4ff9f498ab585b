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
// waiters (session_queue.go), lease campaigns (lease.go) and waiting
// limited calls (limited.go) each poll on their own schedule; without the
// gate a Locker's statements would grow with its waiters (1,000 waiting
// session keys: about 5,000 statements/s on its shared connections,
// crowding out their pg_locks checks). With it a Locker sends at most
// pollRate poll statements per second, and each waiter's interval
// stretches when many wait: a holder that died is then noticed later
// (docs/waiting.md).
//
// Waiters for a slot line up in the order they asked; the first is let
// through once gap has passed since the last slot, and a waiter that
// stops waiting (woken, ctx, timeout) leaves the line, so the slots go on
// to the ones still waiting (a woken burst leaves no idle slots behind).
// A waiter whose queue row would expire before its slot polls by the
// row's refresh time instead, counted as a slot: a row's expiry follows
// the cycle of its last try, and waiters that joined together in a burst
// set theirs before the others counted.
type pollGate struct {
	mu    sync.Mutex
	last  time.Time     // when the last slot was taken
	line  []*pollTicket // the waiters for a slot, first first
	timer *time.Timer   // lets the first of line through (armed while line is not empty)
	gap   time.Duration // between slots; 0: time.Second/pollRate (set before use)
	// waiters polling through the gate now (enter, exit)
	waiters atomic.Int64
}

// pollTicket is a waiter's place in the gate's line; ch is closed when
// its slot comes.
type pollTicket struct {
	ch      chan struct{}
	granted bool // under the gate's mu
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

// wait waits for the next poll slot, returning pollSlot then (or at
// refreshBy, when that comes first: zero, never), pollWoken when woken
// comes first (nil: never), pollDeadline when deadline (zero: none)
// passes first, or ctx's error. A slot that is free now, with nobody in
// line, is taken without a timer.
func (g *pollGate) wait(ctx context.Context, deadline, refreshBy time.Time, woken <-chan struct{}) (int, error) {
	g.mu.Lock()
	now := time.Now()
	if len(g.line) == 0 && now.Sub(g.last) >= g.spacing() {
		g.last = now
		g.mu.Unlock()
		return pollSlot, nil
	}
	tk := &pollTicket{ch: make(chan struct{})}
	g.line = append(g.line, tk)
	if len(g.line) == 1 {
		g.arm(now)
	}
	g.mu.Unlock()

	var dl, refresh <-chan time.Time
	if !deadline.IsZero() {
		left := time.Until(deadline)
		if left <= 0 {
			return g.leave(tk, pollDeadline), nil
		}
		dt := time.NewTimer(left)
		defer dt.Stop()
		dl = dt.C
	}
	if !refreshBy.IsZero() {
		rt := time.NewTimer(time.Until(refreshBy))
		defer rt.Stop()
		refresh = rt.C
	}
	select {
	case <-tk.ch:
		return pollSlot, nil
	case <-refresh:
		// The row's refresh cannot wait for the slot: poll now, as a slot.
		got := g.leave(tk, pollSlot)
		g.mu.Lock()
		g.last = time.Now()
		g.mu.Unlock()
		return got, nil
	case <-woken:
		return g.leave(tk, pollWoken), nil
	case <-dl:
		return g.leave(tk, pollDeadline), nil
	case <-ctx.Done():
		if g.leave(tk, -1) == pollSlot {
			return pollSlot, nil // let through meanwhile: the slot is used
		}
		return 0, ctx.Err()
	}
}

// leave takes tk out of the line and returns outcome, or pollSlot when
// tk was let through meanwhile (its slot is then used).
func (g *pollGate) leave(tk *pollTicket, outcome int) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if tk.granted {
		return pollSlot
	}
	for i, t := range g.line {
		if t == tk {
			g.line = append(g.line[:i:i], g.line[i+1:]...)
			break
		}
	}
	return outcome
}

// arm sets the timer for the first of the line's slot; under mu.
func (g *pollGate) arm(now time.Time) {
	d := g.last.Add(g.spacing()).Sub(now)
	if g.timer == nil {
		g.timer = time.AfterFunc(d, g.letThrough)
		return
	}
	g.timer.Reset(d)
}

// letThrough lets the first of the line through when its slot has come,
// and arms the timer for the next one.
func (g *pollGate) letThrough() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.line) == 0 {
		return
	}
	now := time.Now()
	if now.Sub(g.last) >= g.spacing() {
		tk := g.line[0]
		g.line = g.line[1:]
		tk.granted = true
		close(tk.ch)
		g.last = now
		if len(g.line) == 0 {
			return
		}
	}
	g.arm(now)
}
