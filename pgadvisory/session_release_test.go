package pgadvisory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Session locks are released when fn ends, however it ends (return, error,
// panic), and never stay behind on a pooled connection: checked in pg_locks
// after every kind of call on a small pool, with a control that shows the
// check sees a leaked lock. The helpers are in session_test.go.

func TestSessionReleasedWhenFnEnds(t *testing.T) {
	forEachSessionDoor(t, 0, func(t *testing.T, e *sessionPools, door, other frontdoor.Door) {
		ctx := testdb.Context(t)
		t.Run("return", func(t *testing.T) {
			key := testdb.Key(t)
			require.NoError(t, door.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error {
				e.w.Holder(t, key)
				return nil
			}))
			requireSessionFree(t, e, other, key)
		})
		t.Run("error", func(t *testing.T) {
			key := testdb.Key(t)
			boom := errors.New("boom")
			err := door.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error {
				e.w.Holder(t, key)
				return boom
			})
			require.ErrorIs(t, err, boom)
			require.NotErrorIs(t, err, pgadvisory.ErrLockLost)
			requireSessionFree(t, e, other, key)
		})
		t.Run("panic", func(t *testing.T) {
			key := testdb.Key(t)
			require.PanicsWithValue(t, "boom", func() {
				_ = door.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error {
					e.w.Holder(t, key)
					panic("boom")
				})
			})
			requireSessionFree(t, e, other, key)
		})
	})
}

func TestSessionNoLockLeftOnPool(t *testing.T) {
	// A small pool, so that the calls below reuse the same few connections
	// over and over.
	forEachSessionDoor(t, 3, func(t *testing.T, e *sessionPools, door, other frontdoor.Door) {
		ctx := testdb.Context(t)
		k1, k2, k3 := testdb.Key(t), testdb.Key(t), testdb.Key(t)
		boom := errors.New("boom")
		cases := []func(){
			func() {
				require.NoError(t, door.RunSession(ctx, pgadvisory.ID(k1), func(context.Context) error { return nil }))
			},
			func() {
				require.ErrorIs(t, door.RunSession(ctx, pgadvisory.ID(k1), func(context.Context) error { return boom }), boom)
			},
			func() {
				require.Panics(t, func() { _ = door.RunSession(ctx, pgadvisory.ID(k1), func(context.Context) error { panic("boom") }) })
			},
			func() {
				require.NoError(t, door.RunSession(ctx, pgadvisory.ID(k1), func(context.Context) error { return nil }, pgadvisory.WithShared(), pgadvisory.WithLocks(k2, k3)))
			},
			func() {
				require.NoError(t, door.RunSession(ctx, pgadvisory.ID(k1), func(ctx context.Context) error {
					require.ErrorIs(t, other.RunSession(ctx, pgadvisory.ID(k1), notCalled(t), pgadvisory.WithLocks(k2)), pgadvisory.ErrLocked)
					return nil
				}))
			},
			func() {
				require.NoError(t, other.RunSession(ctx, pgadvisory.ID(k3), func(ctx context.Context) error {
					require.ErrorIs(t, door.RunSession(ctx, pgadvisory.ID(k1), notCalled(t), pgadvisory.WithLocks(k2, k3)), pgadvisory.ErrLocked)
					return nil
				}))
			},
		}
		for i := range 4 * len(cases) {
			cases[i%len(cases)]()
			require.Empty(t, e.w.Holds(t, k1, k2, k3), "after case %d", i%len(cases))
		}
	})
}

// TestSessionLeakCheckControl shows that witness.Holds sees a session lock left
// on an idle pooled connection, the failure TestSessionNoLockLeftOnPool
// would catch.
func TestSessionLeakCheckControl(t *testing.T) {
	ctx := testdb.Context(t)
	db := testdb.DB(t)
	leaky := testdb.DB(t)
	key := testdb.Key(t)
	conn, err := leaky.Conn(ctx)
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", key)
	require.NoError(t, err)
	require.NoError(t, conn.Close()) // back to the pool, lock and all
	holds := witness.Of(db).Holds(t, key)
	require.Len(t, holds, 1)
	require.Equal(t, "idle", holds[0].State)
	require.NoError(t, leaky.Close()) // closing the connections releases it
	require.Eventually(t, func() bool { return len(witness.Of(db).Holds(t, key)) == 0 }, 30*time.Second, 20*time.Millisecond)
}
