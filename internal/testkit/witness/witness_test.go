package witness_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// TestWitnessSeesCommitsAndLocks: marks show up once committed, and the
// lock probes see a session lock held on another connection, and nothing
// once it is released.
func TestWitnessSeesCommitsAndLocks(t *testing.T) {
	ctx := testdb.Context(t)
	w := witness.New(t)
	door := frontdoor.Open(t, frontdoor.Pgx, frontdoor.MaxConns(2))
	key := testdb.Key(t)

	require.NoError(t, door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
		require.NoError(t, w.Mark(ctx, tx, "kept"))
		require.False(t, w.Committed(t, "kept"), "not visible before COMMIT")
		require.False(t, w.LockFree(t, key))
		require.Equal(t, 1, w.Locks(t, true, key))
		require.Equal(t, "ExclusiveLock", w.Holder(t, key).Mode)
		return nil
	}))
	require.True(t, w.Committed(t, "kept"))
	require.True(t, w.LockFree(t, key))
	require.Empty(t, w.Holds(t, key))

	require.NoError(t, door.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error {
		h := w.Holder(t, key)
		require.True(t, w.BackendAlive(t, int64(h.PID)))
		require.Equal(t, "idle", h.State)
		require.False(t, w.Sleeping(int64(h.PID)))
		require.Zero(t, w.Locks(t, false, key), "nobody waits")
		return nil
	}))
	require.Zero(t, w.Locks(t, true, key))
}
