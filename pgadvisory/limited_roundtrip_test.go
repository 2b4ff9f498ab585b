package pgadvisory_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/wirecount"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestRoundTripsRunSessionLimited: a session-limited call costs what
// RunSession costs on a shared connection, whatever its n. With every slot
// held elsewhere it is refused after one slot statement, as a RunSession
// on a held key is after its try (the statement tries the slots in order
// on the server, not one round trip each); with one slot free it takes
// that slot in the same statement, which also reads the lock's registered
// limit, and releases it: RunSession's two round trips. (The Locker
// checked a connection of the pool in the warm-up; the connections it
// opens later skip the check.) Both drivers, n 1, 3 and 8.
func TestRoundTripsRunSessionLimited(t *testing.T) {
	migrated.DB(t)
	ctx := testdb.Context(t)
	c := wirecount.New()
	doors := []frontdoor.Door{frontdoor.OnDB(countedDB(t, c)), frontdoor.OnPool(countedPool(t, c))}
	opts := []pgadvisory.Option{pgadvisory.WithCheckInterval(time.Minute)}
	// steady is the round trips of op's runs after a warm-up, all equal.
	steady := func(t *testing.T, want error, op func() error) int64 {
		t.Helper()
		require.ErrorIs(t, op(), want, "warm-up")
		var n int64
		for i := range 3 {
			before := c.RoundTrips()
			require.ErrorIs(t, op(), want)
			got := c.RoundTrips() - before
			if i > 0 {
				require.Equal(t, n, got, "round trips of run %d", i)
			}
			n = got
		}
		return n
	}
	for _, door := range doors {
		t.Run(door.Label(), func(t *testing.T) {
			held := testdb.Key(t)
			holdElsewhere(t, held)
			refused := steady(t, pgadvisory.ErrLocked, func() error {
				return door.RunSession(ctx, pgadvisory.ID(held), notCalled(t), opts...)
			})
			granted := steady(t, nil, func() error {
				return door.RunSession(ctx, pgadvisory.ID(testdb.Key(t)), func(context.Context) error { return nil }, opts...)
			})
			require.EqualValues(t, 1, refused, "RunSession refused: the try")
			require.EqualValues(t, 2, granted, "RunSession: the try, the unlock")
			for _, n := range []int{1, 3, 8} {
				t.Run(fmt.Sprint("n", n), func(t *testing.T) {
					lock := pgadvisory.Lock{Name: "test.session_limited_round_trips", ID: testdb.Key(t)}
					keys := slotKeys(lock.ID, n)
					require.NoError(t, door.RunSessionLimited(ctx, lock, n, func(context.Context) error { return nil }, opts...),
						"registers n")
					holdElsewhere(t, keys[1:]...)
					var slot int
					require.Equal(t, granted, steady(t, nil, func() error {
						return door.RunSessionLimited(ctx, lock, n, func(ctx context.Context) error {
							slot, _ = pgadvisory.Slot(ctx)
							return nil
						}, opts...)
					}), "a call that finds its slot costs what RunSession does")
					require.Zero(t, slot, "the one free slot")
					holdElsewhere(t, keys[0])
					require.Equal(t, refused, steady(t, pgadvisory.ErrLocked, func() error {
						return door.RunSessionLimited(ctx, lock, n, notCalled(t), opts...)
					}), "a call with no free slot is refused after one slot statement, whatever n")
				})
			}
		})
	}
}
