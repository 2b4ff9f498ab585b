package pgadvisory

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPollGateOutcomes: with slots an hour apart, the first slot is free
// at once; a waiter behind it returns at once on its deadline, its ctx or
// a wake-up, leaving the line; a row that must be refreshed before the
// slot polls at its refresh time, as a slot; every waiter's turn (cycle)
// grows with the waiters that entered.
func TestPollGateOutcomes(t *testing.T) {
	g := &pollGate{gap: time.Hour}
	got, err := g.wait(context.Background(), time.Time{}, time.Time{}, nil)
	require.NoError(t, err)
	require.Equal(t, pollSlot, got, "the first slot is free now")
	first := g.last

	got, err = g.wait(context.Background(), time.Now().Add(10*time.Millisecond), time.Time{}, nil)
	require.NoError(t, err)
	require.Equal(t, pollDeadline, got, "WithWait's deadline ends the wait for a slot")
	require.Empty(t, g.line, "the waiter left the line")

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(10*time.Millisecond, cancel)
	_, err = g.wait(ctx, time.Time{}, time.Time{}, nil)
	require.ErrorIs(t, err, context.Canceled, "ctx ends the wait for a slot")
	require.Empty(t, g.line)

	woken := make(chan struct{})
	time.AfterFunc(10*time.Millisecond, func() { close(woken) })
	got, err = g.wait(context.Background(), time.Time{}, time.Time{}, woken)
	require.NoError(t, err)
	require.Equal(t, pollWoken, got, "a wake-up ends the wait for a slot")
	require.Empty(t, g.line)
	require.Equal(t, first, g.last, "no slot was used")

	got, err = g.wait(context.Background(), time.Now().Add(-time.Second), time.Time{}, nil)
	require.NoError(t, err)
	require.Equal(t, pollDeadline, got, "a deadline already passed")

	start := time.Now()
	got, err = g.wait(context.Background(), time.Time{}, start.Add(20*time.Millisecond), nil)
	require.NoError(t, err)
	require.Equal(t, pollSlot, got, "a row due for refresh polls before its slot")
	require.Less(t, time.Since(start), 30*time.Minute, "at its refresh time, not the slot an hour ahead")
	require.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond, "not before its refresh time")
	require.True(t, g.last.After(first), "its poll counts as a slot")

	require.Zero(t, g.cycle())
	g.enter()
	g.enter()
	require.Equal(t, 2*time.Hour, g.cycle())
	g.exit()
	require.Equal(t, time.Hour, g.cycle())
	require.Equal(t, time.Second/pollRate, (&pollGate{}).spacing(), "the default rate")
}

// TestPollGateWokenLeaveNoIdleSlots: 10 waiters line up for slots 200ms
// apart; 9 of them are woken at once. The one left gets the next slot,
// within a gap or two, not the tenth slot ten gaps on: waiters that left
// the line leave no slot idle. Then slots are let through in the order
// asked for, at most one per gap.
func TestPollGateWokenLeaveNoIdleSlots(t *testing.T) {
	const gap = 200 * time.Millisecond
	g := &pollGate{gap: gap}
	got, err := g.wait(context.Background(), time.Time{}, time.Time{}, nil)
	require.NoError(t, err)
	require.Equal(t, pollSlot, got)
	inLine := func(n int) func() bool {
		return func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.line) == n }
	}

	woken := make(chan struct{})
	type result struct {
		got int
		at  time.Time
	}
	results := make([]chan result, 10)
	for i := range results {
		results[i] = make(chan result, 1)
		var w <-chan struct{}
		if i < 9 {
			w = woken
		}
		go func() {
			got, err := g.wait(context.Background(), time.Time{}, time.Time{}, w)
			if err != nil {
				got = -1
			}
			results[i] <- result{got, time.Now()}
		}()
		// Lined up one after the other (the first may be let through
		// meanwhile on a slow machine).
		require.Eventually(t, func() bool {
			g.mu.Lock()
			defer g.mu.Unlock()
			return len(g.line) >= i && len(g.line) <= i+1
		}, time.Second, time.Millisecond)
	}
	close(woken)
	start := time.Now()
	for i := range 9 {
		r := <-results[i]
		require.Contains(t, []int{pollWoken, pollSlot}, r.got, "waiter %d: woken, or let through before", i)
	}
	last := <-results[9]
	require.Equal(t, pollSlot, last.got)
	require.Less(t, last.at.Sub(start), 4*gap, "the waiter left in line gets the next slot, not the tenth")

	g.mu.Lock()
	g.last = time.Now() // the next slot a gap ahead: time to line up
	g.mu.Unlock()
	order := make(chan int, 3)
	for i := range 3 {
		go func() {
			got, err := g.wait(context.Background(), time.Time{}, time.Time{}, nil)
			if err == nil && got == pollSlot {
				order <- i
			}
		}()
		require.Eventually(t, inLine(i+1), time.Second, time.Millisecond)
	}
	begin := time.Now()
	for i := range 3 {
		require.Equal(t, i, <-order, "slots in the order asked for")
	}
	require.GreaterOrEqual(t, time.Since(begin), gap, "at most one slot per gap")
}
