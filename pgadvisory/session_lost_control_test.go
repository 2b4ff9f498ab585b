package pgadvisory_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// TestSessionLockLostControl is the control of TestSessionLockLost and
// TestFaultSessionBlackhole: a hand-written session lock (pg_advisory_lock
// on a dedicated connection, then the work, as goose's session locker and
// most libraries do) has no watcher. When its backend is terminated the
// server releases the lock and another session takes it, while the work's
// context is still live: two holders at once, and the first cannot know.
// RunSession and RunSessionPgx cancel the work's context with ErrLockLost
// instead.
func TestSessionLockLostControl(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := testdb.DB(t)
	key := testdb.Key(t)

	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	var pid int
	require.NoError(t, conn.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	_, err = conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", key)
	require.NoError(t, err)

	// The work runs under the caller's context, as hand-written code does.
	work := func(workCtx context.Context) (stolen bool, workAlive bool) {
		var ok bool
		require.NoError(t, db.QueryRowContext(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&ok))
		require.True(t, ok)
		// Another instance tries the lock until it gets it.
		other, err := db.Conn(ctx)
		require.NoError(t, err)
		defer other.Close()
		require.Eventually(t, func() bool {
			require.NoError(t, other.QueryRowContext(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&stolen))
			return stolen
		}, 30*time.Second, 20*time.Millisecond, "the server releases a terminated backend's lock")
		// Give a watcher, had there been one, ten 50ms check intervals.
		select {
		case <-workCtx.Done():
		case <-time.After(500 * time.Millisecond):
		}
		_, err = other.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", key)
		require.NoError(t, err)
		return stolen, workCtx.Err() == nil
	}
	stolen, workAlive := work(ctx)
	require.True(t, stolen, "another session holds the lock")
	require.True(t, workAlive, "the hand-written holder's work runs on, unaware: the failure RunSession prevents")
}
