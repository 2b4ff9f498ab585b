package pgadvisory_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestFencingPoolOfOne: a fenced call publishes on a second connection, so
// on a pool that allows one connection it is refused at once with
// ErrInvalidArgument, before any lock or token; the same pool runs unfenced
// calls (control: the pool itself is fine).
func TestFencingPoolOfOne(t *testing.T) {
	admin := migrated.DB(t)
	for _, door := range frontdoor.OpenAll(t, frontdoor.MaxConns(1)) {
		t.Run(door.Label(), func(t *testing.T) {
			ctx := testdb.Context(t)
			key := testdb.Key(t)
			seq := fencing.LastToken(t, admin)
			var ran bool
			fn := func(frontdoor.Tx) error { ran = true; return nil }
			err := door.RunExclusive(ctx, key, fn, pgadvisory.WithFencing())
			require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument)
			require.ErrorContains(t, err, "allow at least 2")
			require.False(t, ran, "fn must not run")
			require.Equal(t, seq, fencing.LastToken(t, admin), "no token was drawn")
			require.Zero(t, fencing.Published(t, admin, key), "nothing was published")

			require.NoError(t, door.RunExclusive(ctx, key, fn), "control: an unfenced call on the same pool")
			require.True(t, ran)
		})
	}
}

// TestFencingPoolExhausted: a fenced holder whose publish finds no free
// connection fails when its context ends instead of hanging: the error
// wraps context.DeadlineExceeded and says "publish", fn did not run, the
// lock is released and no connection leaks. Once a connection is free again
// the same call succeeds (control: exhaustion was the only cause).
func TestFencingPoolExhausted(t *testing.T) {
	admin := migrated.DB(t)
	for _, door := range frontdoor.OpenAll(t, frontdoor.MaxConns(2)) {
		t.Run(door.Label(), func(t *testing.T) {
			key := testdb.Key(t)
			release := door.Checkout(t)
			ctx, cancel := context.WithTimeout(testdb.Context(t), 500*time.Millisecond)
			defer cancel()
			var ran bool
			fn := func(frontdoor.Tx) error { ran = true; return nil }
			err := door.RunExclusive(ctx, key, fn, pgadvisory.WithFencing())
			release()
			require.ErrorIs(t, err, context.DeadlineExceeded)
			var pe *pgadvisory.Error
			require.ErrorAs(t, err, &pe)
			require.Equal(t, "publish", pe.Op)
			require.False(t, ran, "fn must not run")
			require.Zero(t, fencing.Published(t, admin, key), "nothing was published")
			require.Eventually(t, func() bool { return door.Idle() }, 30*time.Second, 10*time.Millisecond, "no connection leaks")

			require.NoError(t, door.RunExclusive(testdb.Context(t), key, fn, pgadvisory.WithFencing()), "control: with a free connection the same call succeeds")
			require.True(t, ran)
			require.NotZero(t, fencing.Published(t, admin, key))
		})
	}
}
