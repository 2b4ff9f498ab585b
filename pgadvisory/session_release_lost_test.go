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

// The release of a session lock verifies what it releases: when fn returns
// before the watcher's next check noticed a loss, the unlock finds the
// connection dead (or the lock missing) and the call reports ErrLockLost,
// never success, in its error and in the observer's released event. The
// case of a session moved to another server connection behind a pooler is
// in pgbouncer_session_test.go. The helpers are in session_test.go.

// TestSessionReleaseFindsLockLost: fn's backend is
// terminated, another RunSession takes the lock and returns nil, then fn
// returns nil too, before its watcher (interval one minute) checks. The
// second holder really held the lock while the first one's fn still ran
// (the control: two holders overlapped), and the first call now returns
// ErrLockLost from its release, with fn's error kept when it had one.
func TestSessionReleaseFindsLockLost(t *testing.T) {
	forEachSessionDoor(t, 0, func(t *testing.T, e *sessionPools, door, other frontdoor.Door) {
		ctx := testdb.Context(t)
		quiet := pgadvisory.WithCheckInterval(time.Minute) // the watcher never checks

		for _, fnErr := range []error{nil, errors.New("fn failed")} {
			key := testdb.Key(t)
			var events []pgadvisory.Event
			var overlapped bool
			err := door.RunSession(ctx, pgadvisory.ID(key), func(ctx context.Context) error {
				holder := e.w.Holder(t, key)
				var ok bool
				require.NoError(t, e.db.QueryRowContext(ctx, "SELECT pg_terminate_backend($1)", holder.PID).Scan(&ok))
				require.True(t, ok)
				// Another session gets the lock while this fn still runs.
				require.Eventually(t, func() bool {
					return other.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error {
						overlapped = e.w.Holder(t, key).PID != holder.PID
						return nil
					}) == nil
				}, 30*time.Second, 10*time.Millisecond, "the server released the terminated backend's lock")
				require.NoError(t, ctx.Err(), "the watcher did not check")
				return fnErr
			}, quiet, pgadvisory.WithObserver(func(ev pgadvisory.Event) { events = append(events, ev) }))

			require.True(t, overlapped, "control: another holder ran while fn still ran")
			require.ErrorIs(t, err, pgadvisory.ErrLockLost)
			var pe *pgadvisory.Error
			require.ErrorAs(t, err, &pe)
			require.Equal(t, pgadvisory.OpRelease, pe.Op)
			require.Equal(t, []int64{key}, pe.LockIDs)
			require.ErrorContains(t, err, "releasing the session lock")
			if fnErr != nil {
				require.ErrorIs(t, err, fnErr, "fn's error is kept")
			}

			kinds := make([]pgadvisory.EventKind, len(events))
			for i, ev := range events {
				kinds[i] = ev.Kind
			}
			require.Equal(t, []pgadvisory.EventKind{pgadvisory.EventAcquired, pgadvisory.EventError, pgadvisory.EventReleased}, kinds)
			require.ErrorIs(t, events[1].Err, pgadvisory.ErrLockLost)
			require.ErrorIs(t, events[2].Err, pgadvisory.ErrLockLost, "the released event says the lock was lost")
			requireSessionFree(t, e, other, key)
		}
	})
}

// TestSessionReleaseVerifiedControl: the same calls without a loss return
// nil (or fn's error, not ErrLockLost), and a set is verified whole.
func TestSessionReleaseVerifiedControl(t *testing.T) {
	forEachSessionDoor(t, 0, func(t *testing.T, e *sessionPools, door, other frontdoor.Door) {
		ctx := testdb.Context(t)
		quiet := pgadvisory.WithCheckInterval(time.Minute)
		k1, k2, k3 := testdb.Key(t), testdb.Key(t), testdb.Key(t)
		var events []pgadvisory.Event
		require.NoError(t, door.RunSession(ctx, pgadvisory.ID(k1), func(context.Context) error {
			require.Len(t, e.w.Holds(t, k1, k2, k3), 3)
			return nil
		}, quiet, pgadvisory.WithLocks(k2, k3), pgadvisory.WithObserver(func(ev pgadvisory.Event) { events = append(events, ev) })))
		require.Len(t, events, 2)
		require.Equal(t, pgadvisory.EventReleased, events[1].Kind)
		require.NoError(t, events[1].Err)
		require.Empty(t, e.w.Holds(t, k1, k2, k3))

		boom := errors.New("boom")
		err := door.RunSession(ctx, pgadvisory.ID(k1), func(context.Context) error { return boom }, quiet)
		require.ErrorIs(t, err, boom)
		require.NotErrorIs(t, err, pgadvisory.ErrLockLost)
		requireSessionFree(t, e, other, k1)
	})
}
