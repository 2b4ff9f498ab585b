package pgadvisory_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestCurrentLeaderNotAnotherBackendsLock: after a leader resigned, its
// backend stays alive in the pool and its term stays published; another
// backend that then holds the lock (a plain session lock, no election) does
// not make CurrentLeader name the resigned leader. The control: while the
// leader leads, it is named.
func TestCurrentLeaderNotAnotherBackendsLock(t *testing.T) {
	db := migrated.DB(t)
	ctx := testdb.Context(t)
	key := testdb.Key(t)
	lock := pgadvisory.ID(key)
	l, err := pgadvisory.New(pgadvisory.Stdlib(testdb.DB(t)), pgadvisory.WithDefaultHolder("resigned"))
	require.NoError(t, err)
	require.NoError(t, l.Lead(ctx, lock, func(context.Context, int64) error {
		got, err := l.CurrentLeader(ctx, lock)
		require.NoError(t, err)
		require.Equal(t, "resigned", got.Holder, "control: the leader is named while it leads")
		return nil
	}))
	other, err := db.Conn(ctx)
	require.NoError(t, err)
	defer func() { _ = other.Close() }()
	_, err = other.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, key)
	require.NoError(t, err)
	_, err = l.CurrentLeader(ctx, lock)
	require.ErrorIs(t, err, pgadvisory.ErrNoLeader, "another backend's lock is not the resigned leader's")
	_, err = other.ExecContext(ctx, `SELECT pg_advisory_unlock($1)`, key)
	require.NoError(t, err)
}
