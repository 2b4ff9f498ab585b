package pgadvisory_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
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

// TestCurrentLeaderNotAPlainSessionOnTheLeadersBackend: after Lead returned,
// a plain RunSession on the same key is placed on the same backend (one
// shared connection, a pool of one). CurrentLeader and the status view's
// leader columns must not name the resigned leader: its pid, the lock held
// by that pid and its published term all still match, so the resign itself
// must end the record. The control: while the leader leads, both name it on
// that same backend.
func TestCurrentLeaderNotAPlainSessionOnTheLeadersBackend(t *testing.T) {
	admin := migrated.DB(t)
	ctx := testdb.Context(t)
	key := testdb.Key(t)
	lock := pgadvisory.ID(key)
	db := testdb.DB(t)
	db.SetMaxOpenConns(1)
	l, err := pgadvisory.New(pgadvisory.Stdlib(db), pgadvisory.WithDefaultHolder("resigned"), pgadvisory.WithSessionConns(1))
	require.NoError(t, err)
	reader, err := pgadvisory.New(pgadvisory.Stdlib(admin))
	require.NoError(t, err)
	statusHolder := func() sql.NullString {
		var holder sql.NullString
		require.NoError(t, admin.QueryRowContext(ctx,
			`SELECT leader_holder FROM pgadvisory.status WHERE lock_id = $1 AND granted`, key).Scan(&holder))
		return holder
	}

	var leaderPID int32
	require.NoError(t, l.Lead(ctx, lock, func(context.Context, int64) error {
		leaderPID = witness.Of(admin).Holder(t, key).PID
		got, err := reader.CurrentLeader(ctx, lock)
		require.NoError(t, err)
		require.Equal(t, "resigned", got.Holder, "control: the leader is named while it leads")
		require.EqualValues(t, leaderPID, got.PID)
		require.Equal(t, "resigned", statusHolder().String, "control: the status view names the leader while it leads")
		return nil
	}))
	require.NoError(t, l.RunSession(ctx, lock, func(context.Context) error {
		require.Equal(t, leaderPID, witness.Of(admin).Holder(t, key).PID,
			"the reproduction: the plain session lock is on the resigned leader's backend")
		_, err := reader.CurrentLeader(ctx, lock)
		require.ErrorIs(t, err, pgadvisory.ErrNoLeader, "a plain session lock on the leader's backend is not the resigned leader")
		require.False(t, statusHolder().Valid, "the status view names no leader for a plain session lock")
		return nil
	}))
}
