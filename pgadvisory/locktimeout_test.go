package pgadvisory_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestWaitTimeoutDoesNotLeakIntoFn: WithWait's timeout bounds the wait for
// the lock only; inside fn, lock_timeout is what it was before the call (the
// session's value), for both front doors and for session locks. The control
// shows the timeout really was in force while waiting (ErrLockTimeout).
func TestWaitTimeoutDoesNotLeakIntoFn(t *testing.T) {
	ctx := context.Background()
	db := testdb.DB(t)
	pool := testdb.Pool(t)
	key := testdb.Key(t)

	var stdlibSetting, pgxSetting string
	require.NoError(t, pgadvisory.RunExclusive(ctx, db, key, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, "SHOW lock_timeout").Scan(&stdlibSetting)
	}, pgadvisory.WithWait(1500*time.Millisecond)))
	require.Equal(t, "0", stdlibSetting)

	require.NoError(t, pgadvisory.RunExclusivePgx(ctx, pool, key, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, "SHOW lock_timeout").Scan(&pgxSetting)
	}, pgadvisory.WithWait(1500*time.Millisecond), pgadvisory.WithLocks(key+1)))
	require.Equal(t, "0", pgxSetting)

	// A session-level lock_timeout set by the caller survives too.
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "SET lock_timeout = '7s'")
	require.NoError(t, err)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	var inside string
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_advisory_xact_lock($1)::text = ''
  AND set_config('lock_timeout', lock_timeout.previous, true) IS NOT NULL
FROM (SELECT current_setting('lock_timeout') AS previous, set_config('lock_timeout', '100ms', true)) AS lock_timeout`, key+2).Scan(new(bool)))
	require.NoError(t, tx.QueryRow(ctx, "SHOW lock_timeout").Scan(&inside))
	require.Equal(t, "7s", inside)
	require.NoError(t, tx.Rollback(ctx))
	_, err = conn.Exec(ctx, "RESET lock_timeout")
	require.NoError(t, err)

	// Control: while waiting, the timeout is in force.
	require.NoError(t, pgadvisory.RunExclusivePgx(ctx, pool, key, func(pgx.Tx) error {
		err := pgadvisory.RunExclusive(ctx, db, key, func(*sql.Tx) error { return nil }, pgadvisory.WithWait(100*time.Millisecond))
		require.ErrorIs(t, err, pgadvisory.ErrLockTimeout)
		return nil
	}))
}
