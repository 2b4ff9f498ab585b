package pgadvisory_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestSessionSharedSetPartialKeepsOthersHold: on one shared connection,
// call A holds key x shared; call B's shared set {z, x} (z < x, so z is
// tried first) is refused at z, held exclusively by another session. B's
// cleanup gives back what B's try took (nothing of x), not what the
// backend holds of the set: x stays held for A while A's fn runs (another
// session cannot take it exclusively) and A's watcher reports no loss. The
// control, without A, shows x free after B's refusal.
func TestSessionSharedSetPartialKeepsOthersHold(t *testing.T) {
	w := witness.Of(testdb.DB(t))
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		door, _ := muxDoor(t, drv, 1)

		// foreign holds key exclusively on a connection of its own until the
		// returned func is called.
		foreign := func(t *testing.T, key int64) func() {
			conn, err := w.DB.Conn(ctx)
			require.NoError(t, err)
			_, err = conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", key)
			require.NoError(t, err)
			return func() {
				_, err := conn.ExecContext(ctx, "SELECT pg_advisory_unlock_all()")
				require.NoError(t, err)
				require.NoError(t, conn.Close())
			}
		}
		// takenElsewhere tries key exclusively on a separate connection and
		// gives it back at once if granted.
		takenElsewhere := func(t *testing.T, key int64) bool {
			conn, err := w.DB.Conn(ctx)
			require.NoError(t, err)
			defer conn.Close()
			var ok bool
			require.NoError(t, conn.QueryRowContext(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&ok))
			if ok {
				_, err = conn.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", key)
				require.NoError(t, err)
			}
			return ok
		}
		refusedSet := func(t *testing.T, z, x int64) {
			t.Helper()
			err := door.RunSession(ctx, pgadvisory.ID(x), notCalled(t), pgadvisory.WithLocks(z), pgadvisory.WithShared())
			sqlstate.RequireTyped(t, err, pgadvisory.ErrLocked, "lock", "")
		}

		t.Run("another call's hold survives", func(t *testing.T) {
			z, x := testdb.Key(t), testdb.Key(t) // z < x: a set's locks are taken in ascending order
			in, out, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
			go func() {
				done <- door.RunSession(ctx, pgadvisory.ID(x), func(ctx context.Context) error {
					close(in)
					select {
					case <-out:
						return nil
					case <-ctx.Done():
						return ctx.Err()
					}
				}, pgadvisory.WithShared(), pgadvisory.WithCheckInterval(50*time.Millisecond))
			}()
			frontdoor.Await(t, in, "A's fn")
			release := foreign(t, z)
			defer func() { release() }()

			refusedSet(t, z, x)

			require.False(t, takenElsewhere(t, x), "x was taken exclusively elsewhere while A's fn ran: B's cleanup released A's hold")
			time.Sleep(300 * time.Millisecond) // several of A's checks
			require.False(t, takenElsewhere(t, x), "x was taken exclusively elsewhere while A's fn ran")
			close(out)
			require.NoError(t, frontdoor.Await(t, done, "A's return"), "A's watcher reported a loss")
			require.True(t, takenElsewhere(t, x), "x is free once A returned")
			release()
			release = func() {}
			require.Empty(t, w.Holds(t, z, x))
		})
		t.Run("control: without A, x is free after the refusal", func(t *testing.T) {
			z, x := testdb.Key(t), testdb.Key(t) // z < x: a set's locks are taken in ascending order
			release := foreign(t, z)
			defer release()
			refusedSet(t, z, x)
			require.True(t, takenElsewhere(t, x), "x is free: B's try took nothing of it")
			require.Len(t, w.Holds(t, z, x), 1, "only the foreign session's z is held")
		})
	})
}
