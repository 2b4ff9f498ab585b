package pgadvisory

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPollGateOutcomes: a waiter behind a slot an hour ahead returns at
// once on its deadline, its ctx or a wake-up, and gives its slot back (the
// next one asked for is the same); a free slot needs no wait; every
// waiter's turn (cycle) grows with the waiters that entered; a row that
// must be refreshed before the slot polls at its refresh time, keeping
// its slot taken.
func TestPollGateOutcomes(t *testing.T) {
	g := &pollGate{gap: time.Hour}
	got, err := g.wait(context.Background(), time.Time{}, time.Time{}, nil)
	require.NoError(t, err)
	require.Equal(t, pollSlot, got, "the first slot is free now")
	ahead := g.next

	got, err = g.wait(context.Background(), time.Now().Add(10*time.Millisecond), time.Time{}, nil)
	require.NoError(t, err)
	require.Equal(t, pollDeadline, got, "WithWait's deadline ends the wait for a slot")
	require.Equal(t, ahead, g.next, "the slot is given back")

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(10*time.Millisecond, cancel)
	_, err = g.wait(ctx, time.Time{}, time.Time{}, nil)
	require.ErrorIs(t, err, context.Canceled, "ctx ends the wait for a slot")
	require.Equal(t, ahead, g.next)

	woken := make(chan struct{})
	time.AfterFunc(10*time.Millisecond, func() { close(woken) })
	got, err = g.wait(context.Background(), time.Time{}, time.Time{}, woken)
	require.NoError(t, err)
	require.Equal(t, pollWoken, got, "a wake-up ends the wait for a slot")
	require.Equal(t, ahead, g.next)

	got, err = g.wait(context.Background(), time.Now().Add(-time.Second), time.Time{}, nil)
	require.NoError(t, err)
	require.Equal(t, pollDeadline, got, "a deadline already passed")

	start := time.Now()
	got, err = g.wait(context.Background(), time.Time{}, start.Add(20*time.Millisecond), nil)
	require.NoError(t, err)
	require.Equal(t, pollSlot, got, "a row due for refresh polls before its slot")
	require.Less(t, time.Since(start), 30*time.Minute, "at its refresh time, not the slot an hour ahead")
	require.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond, "not before its refresh time")
	require.Equal(t, ahead.Add(time.Hour), g.next, "its slot stays taken")

	require.Zero(t, g.cycle())
	g.enter()
	g.enter()
	require.Equal(t, 2*time.Hour, g.cycle())
	g.exit()
	require.Equal(t, time.Hour, g.cycle())
	require.Equal(t, time.Second/pollRate, (&pollGate{}).spacing(), "the default rate")
}
