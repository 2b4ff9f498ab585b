package pgadvisory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// A session lock lost while fn runs (its backend terminated) cancels fn's
// context with ErrLockLost, and the call says so; a canceled parent context
// is not a lost lock. The control shows what happens without the watcher:
// a hand-written session lock's work runs on while another session holds
// the lock. The helpers are in session_test.go.

func TestSessionLockLost(t *testing.T) {
	forEachSessionDoor(t, 0, func(t *testing.T, e *sessionPools, door, other frontdoor.Door) {
		ctx := testdb.Context(t)
		interval := pgadvisory.WithCheckInterval(50 * time.Millisecond)

		t.Run("backend terminated", func(t *testing.T) {
			key := testdb.Key(t)
			var cause error
			var events []pgadvisory.Event
			err := door.RunSession(ctx, pgadvisory.ID(key), func(fnCtx context.Context) error {
				holder := e.w.Holder(t, key)
				var ok bool
				// On the test's ctx: fn's may end as soon as the backend
				// is gone, before this statement's answer is read.
				require.NoError(t, e.db.QueryRowContext(ctx, "SELECT pg_terminate_backend($1)", holder.PID).Scan(&ok))
				require.True(t, ok)
				select {
				case <-fnCtx.Done():
				case <-time.After(30 * time.Second):
					t.Error("fn's context was not canceled after its backend was terminated")
					return errors.New("not canceled")
				}
				cause = context.Cause(fnCtx)
				return fnCtx.Err()
			}, interval, pgadvisory.WithObserver(func(ev pgadvisory.Event) { events = append(events, ev) }))

			require.ErrorIs(t, cause, pgadvisory.ErrLockLost)
			require.ErrorIs(t, err, pgadvisory.ErrLockLost)
			require.ErrorIs(t, err, context.Canceled, "fn's own error is kept")
			var pe *pgadvisory.Error
			require.ErrorAs(t, err, &pe)
			require.Equal(t, pgadvisory.OpWatch, pe.Op)
			require.Equal(t, []int64{key}, pe.LockIDs)

			kinds := make([]pgadvisory.EventKind, len(events))
			for i, ev := range events {
				kinds[i] = ev.Kind
			}
			require.Equal(t, []pgadvisory.EventKind{pgadvisory.EventAcquired, pgadvisory.EventError, pgadvisory.EventReleased}, kinds)
			require.ErrorIs(t, events[2].Err, pgadvisory.ErrLockLost)

			// The dead backend took the lock with it.
			require.Eventually(t, func() bool { return len(e.w.Holds(t, key)) == 0 }, 30*time.Second, 20*time.Millisecond)
			requireSessionFree(t, e, other, key)
		})

		t.Run("control: no loss, no cancelation", func(t *testing.T) {
			key := testdb.Key(t)
			require.NoError(t, door.RunSession(ctx, pgadvisory.ID(key), func(ctx context.Context) error {
				// Ten check intervals pass without the context being canceled.
				select {
				case <-ctx.Done():
					t.Errorf("fn's context canceled although the lock is held: %v", context.Cause(ctx))
				case <-time.After(500 * time.Millisecond):
				}
				e.w.Holder(t, key)
				return nil
			}, interval))
			requireSessionFree(t, e, other, key)
		})
	})
}

func TestSessionParentContext(t *testing.T) {
	forEachSessionDoor(t, 0, func(t *testing.T, e *sessionPools, door, other frontdoor.Door) {
		t.Run("canceled while fn runs", func(t *testing.T) {
			key := testdb.Key(t)
			ctx, cancel := context.WithCancel(testdb.Context(t))
			defer cancel()
			var cause error
			err := door.RunSession(ctx, pgadvisory.ID(key), func(fctx context.Context) error {
				e.w.Holder(t, key)
				cancel()
				select {
				case <-fctx.Done():
				case <-time.After(30 * time.Second):
					t.Error("fn's context was not canceled with its parent")
				}
				cause = context.Cause(fctx)
				return fctx.Err()
			}, pgadvisory.WithCheckInterval(50*time.Millisecond))
			require.ErrorIs(t, cause, context.Canceled)
			require.NotErrorIs(t, cause, pgadvisory.ErrLockLost)
			require.ErrorIs(t, err, context.Canceled)
			require.NotErrorIs(t, err, pgadvisory.ErrLockLost)
			requireSessionFree(t, e, other, key)
		})
		t.Run("canceled, fn returns nil anyway", func(t *testing.T) {
			key := testdb.Key(t)
			ctx, cancel := context.WithCancel(testdb.Context(t))
			defer cancel()
			err := door.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error {
				cancel()
				return nil
			})
			require.ErrorIs(t, err, context.Canceled)
			requireSessionFree(t, e, other, key)
		})
		t.Run("canceled before the call", func(t *testing.T) {
			key := testdb.Key(t)
			ctx, cancel := context.WithCancel(testdb.Context(t))
			cancel()
			err := door.RunSession(ctx, pgadvisory.ID(key), notCalled(t))
			require.ErrorIs(t, err, context.Canceled)
			requireSessionFree(t, e, other, key)
		})
	})
}

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
