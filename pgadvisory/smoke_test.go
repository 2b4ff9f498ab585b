package pgadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

func TestSmoke(t *testing.T) {
	ctx := context.Background()
	db := testdb.DB(t)
	pool := testdb.Pool(t)
	key := testdb.Key(t)
	called := false
	require.NoError(t, pgadvisory.RunExclusive(ctx, db, key, func(tx *sql.Tx) error {
		called = true
		err := pgadvisory.RunExclusivePgx(ctx, pool, key, func(pgx.Tx) error { return nil })
		require.ErrorIs(t, err, pgadvisory.ErrLocked)
		err = pgadvisory.RunExclusivePgx(ctx, pool, key, func(pgx.Tx) error { return nil }, pgadvisory.WithWait(50*time.Millisecond))
		require.ErrorIs(t, err, pgadvisory.ErrLockTimeout, "%v", err)
		t.Log(err)
		return nil
	}))
	require.True(t, called)
	require.NoError(t, pgadvisory.RunExclusivePgx(ctx, pool, key, func(pgx.Tx) error { return nil }, pgadvisory.WithLocks(key+1, key+2)))
	err := pgadvisory.RunSessionPgx(ctx, pool, key, func(ctx context.Context) error {
		return pgadvisory.RunExclusive(ctx, db, key, func(*sql.Tx) error { return nil })
	})
	require.ErrorIs(t, err, pgadvisory.ErrLocked)
	boom := errors.New("boom")
	err = pgadvisory.RunSession(ctx, db, key, func(ctx context.Context) error { return boom }, pgadvisory.WithCheckInterval(10*time.Millisecond))
	require.ErrorIs(t, err, boom)
}
