package pgadvisory_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestWaitTimeoutDoesNotLeakIntoFn: WithWait's timeout bounds the wait for
// the lock only; inside fn, lock_timeout is what it was before the call (the
// session's value), on both drivers' Lockers, for a single lock and a set;
// a session-level lock_timeout survives the statement that sets and puts
// back lock_timeout around an advisory lock. The control shows the timeout really was in force while waiting
// (ErrLockTimeout).
func TestWaitTimeoutDoesNotLeakIntoFn(t *testing.T) {
	frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
		ctx := testdb.Context(t)
		key := testdb.Key(t)
		for _, opts := range [][]pgadvisory.Option{
			{pgadvisory.WithWait(1500 * time.Millisecond)},
			{pgadvisory.WithWait(1500 * time.Millisecond), pgadvisory.WithLocks(key + 1)},
		} {
			var setting string
			require.NoError(t, door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
				return tx.QueryRow(ctx, "SHOW lock_timeout").Scan(&setting)
			}, opts...))
			require.Equal(t, "0", setting)
		}

		// Control: while waiting, the timeout is in force.
		require.NoError(t, door.RunExclusive(ctx, key, func(frontdoor.Tx) error {
			err := door.RunExclusive(ctx, key, noop, pgadvisory.WithWait(100*time.Millisecond))
			require.ErrorIs(t, err, pgadvisory.ErrLockTimeout)
			return nil
		}))
	})

	// A session-level lock_timeout set by the caller survives too.
	ctx := testdb.Context(t)
	pool := testdb.Pool(t)
	key := testdb.Key(t)
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
FROM (SELECT current_setting('lock_timeout') AS previous, set_config('lock_timeout', '100ms', true)) AS lock_timeout`, key).Scan(new(bool)))
	require.NoError(t, tx.QueryRow(ctx, "SHOW lock_timeout").Scan(&inside))
	require.Equal(t, "7s", inside)
	require.NoError(t, tx.Rollback(ctx))
	_, err = conn.Exec(ctx, "RESET lock_timeout")
	require.NoError(t, err)
}
