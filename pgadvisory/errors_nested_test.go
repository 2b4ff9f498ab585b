package pgadvisory_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// ErrLocked and ErrAlreadyDone name the lock, and a caller tells "fn was not
// called" (the call's own: Op "lock" or "run-once") from "fn ran and failed
// with it" (a nested call's, wrapped with Op "fn", rolled back). errors.Is
// works for both.

func TestErrLockedNamesTheLock(t *testing.T) {
	frontdoor.ForEach(t, func(t *testing.T, d frontdoor.Door) {
		ctx := testdb.Context(t)
		lock := pgadvisory.Lock{Name: "reports.daily_email", ID: testdb.Key(t)}
		d.Hold(t, lock.ID, nil)
		err := d.RunExclusiveLock(ctx, lock, func(frontdoor.Tx) error { t.Error("fn called"); return nil })
		require.ErrorIs(t, err, pgadvisory.ErrLocked)
		var pe *pgadvisory.Error
		require.ErrorAs(t, err, &pe)
		require.Equal(t, pgadvisory.OpLock, pe.Op, "fn was not called")
		require.Equal(t, []int64{lock.ID}, pe.LockIDs)
		require.Equal(t, lock.Name, pe.Name)
		require.Contains(t, err.Error(), lock.Name)
		require.Contains(t, err.Error(), "lock is held by another session")
		require.NotEqual(t, pgadvisory.ErrLocked, err, "ErrLocked is an *Error now: compare with errors.Is")

		err = d.RunSession(ctx, lock, func(context.Context) error { t.Error("fn called"); return nil })
		require.ErrorIs(t, err, pgadvisory.ErrLocked)
		require.ErrorAs(t, err, &pe)
		require.Equal(t, pgadvisory.OpLock, pe.Op)
		require.Contains(t, err.Error(), lock.Name)
	}, frontdoor.MaxConns(4))
}

func TestNestedErrLocked(t *testing.T) {
	frontdoor.ForEach(t, func(t *testing.T, d frontdoor.Door) {
		ctx := testdb.Context(t)
		w := witness.New(t)
		outer, inner := testdb.Key(t), testdb.Key(t)
		d.Hold(t, inner, nil)
		called := false
		err := d.RunExclusive(ctx, outer, func(tx frontdoor.Tx) error {
			called = true
			if err := w.Mark(ctx, tx, "outer-work"); err != nil {
				return err
			}
			return d.RunExclusive(ctx, inner, func(frontdoor.Tx) error { return nil })
		})
		require.True(t, called)
		require.ErrorIs(t, err, pgadvisory.ErrLocked, "errors.Is still finds the nested ErrLocked")
		var pe *pgadvisory.Error
		require.ErrorAs(t, err, &pe)
		require.Equal(t, pgadvisory.OpFn, pe.Op, "fn ran: the outer call's error says so")
		require.Equal(t, []int64{outer}, pe.LockIDs)
		require.Nil(t, pe.Kind, "the outer call's own lock was granted")
		require.False(t, w.Committed(t, "outer-work"), "rolled back")

		// CONTROL: the outer call's own ErrLocked says Op "lock".
		d.Hold(t, outer, nil)
		err = d.RunExclusive(ctx, outer, func(frontdoor.Tx) error { t.Error("fn called"); return nil })
		require.ErrorAs(t, err, &pe)
		require.Equal(t, pgadvisory.OpLock, pe.Op)
	}, frontdoor.MaxConns(8))
}

func TestNestedErrAlreadyDone(t *testing.T) {
	migrated.DB(t)
	frontdoor.ForEach(t, func(t *testing.T, d frontdoor.Door) {
		ctx := testdb.Context(t)
		outer, inner := testdb.Key(t), testdb.Key(t)
		require.NoError(t, d.RunOnce(ctx, inner, "2026-12-02", func(frontdoor.Tx) error { return nil }))
		err := d.RunOnce(ctx, outer, "2026-12-02", func(frontdoor.Tx) error {
			return d.RunOnce(ctx, inner, "2026-12-02", func(frontdoor.Tx) error { return nil })
		})
		require.ErrorIs(t, err, pgadvisory.ErrAlreadyDone)
		var pe *pgadvisory.Error
		require.ErrorAs(t, err, &pe)
		require.Equal(t, pgadvisory.OpFn, pe.Op)

		// The outer window was not claimed: fn failed, the claim rolled back.
		called := false
		require.NoError(t, d.RunOnce(ctx, outer, "2026-12-02", func(frontdoor.Tx) error { called = true; return nil }))
		require.True(t, called)

		// CONTROL: the call's own ErrAlreadyDone says Op "run-once" and the window.
		err = d.RunOnce(ctx, outer, "2026-12-02", func(frontdoor.Tx) error { t.Error("fn called"); return nil })
		require.ErrorIs(t, err, pgadvisory.ErrAlreadyDone)
		require.ErrorAs(t, err, &pe)
		require.Equal(t, pgadvisory.OpRunOnce, pe.Op)
		require.Contains(t, err.Error(), `"2026-12-02"`)
	}, frontdoor.MaxConns(8))
}

// TestSessionLostCauseOnce: fn returns its context's cause after the session
// lock was lost (as fn usually does); the error names the loss once. fn
// terminates its backend with the test's context, not with its own, which
// the loss it provokes cancels (a race the statement could lose).
func TestSessionLostCauseOnce(t *testing.T) {
	forEachSessionDoor(t, 0, func(t *testing.T, e *sessionPools, door, _ frontdoor.Door) {
		tctx := testdb.Context(t)
		terminate := func(key int64) {
			holder := e.w.Holder(t, key)
			var ok bool
			require.NoError(t, e.db.QueryRowContext(tctx, "SELECT pg_terminate_backend($1)", holder.PID).Scan(&ok))
			require.True(t, ok)
		}
		awaitLoss := func(ctx context.Context) {
			select {
			case <-ctx.Done():
			case <-tctx.Done():
				t.Error("the loss was not noticed before the test's deadline")
			}
		}
		key := testdb.Key(t)
		err := door.RunSession(tctx, pgadvisory.ID(key), func(ctx context.Context) error {
			terminate(key)
			awaitLoss(ctx)
			return context.Cause(ctx)
		}, pgadvisory.WithCheckInterval(50*time.Millisecond))
		require.ErrorIs(t, err, pgadvisory.ErrLockLost)
		require.Equal(t, 1, strings.Count(err.Error(), "session lock lost"), err.Error())
		require.NotContains(t, err.Error(), "fn returned", err.Error())
		require.Equal(t, 1, strings.Count(err.Error(), "pgadvisory: "), err.Error())

		// CONTROL: fn's own, different error is still reported with the loss.
		key = testdb.Key(t)
		boom := errors.New("boom")
		err = door.RunSession(tctx, pgadvisory.ID(key), func(ctx context.Context) error {
			terminate(key)
			awaitLoss(ctx)
			return boom
		}, pgadvisory.WithCheckInterval(50*time.Millisecond))
		require.ErrorIs(t, err, boom)
		require.Contains(t, err.Error(), "fn returned: boom")
	})
}
