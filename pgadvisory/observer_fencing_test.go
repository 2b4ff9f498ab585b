package pgadvisory_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Fencing rejections reach the observers once, from the call whose own
// statement the guard refused: a stale fenced write (RunFenced, which a
// Lock names), a token-less write in fn's transaction, the publish of a
// token older than the published one. When fn returns a rejection that a
// nested lockgen call saw, the outer call does not report it again (the
// control: the inner call does).

func TestObserverFencingRejections(t *testing.T) {
	admin := migrated.DB(t)
	frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
		ctx := testdb.Context(t)
		key := testdb.Key(t)
		lock := pgadvisory.Lock{Name: "observed.fenced", ID: key}
		tbl := fencing.Table(t, admin, testdb.Schema(t), "balances", key, "strict")
		var log callLog
		observe := pgadvisory.WithCallObserver(&log)

		holder := func() int64 {
			var token int64
			require.NoError(t, door.RunExclusiveLock(ctx, lock, func(tx frontdoor.Tx) error {
				token, _ = tx.FencingToken()
				return tx.Exec(ctx, `INSERT INTO `+tbl+` (id, balance) VALUES (1, 0) ON CONFLICT (id) DO UPDATE SET balance = 0`)
			}, pgadvisory.WithFencing(), observe))
			c := log.only(t)
			require.NoError(t, c.end.Rejection)
			return token
		}
		stale := holder()
		fresh := holder()
		require.Greater(t, fresh, stale)
		staleWrite := func(tx frontdoor.Tx) error { return tx.Exec(ctx, `UPDATE `+tbl+` SET balance = 1`) }

		t.Run("stale write through a Lock", func(t *testing.T) {
			err := door.RunFencedLock(ctx, lock.With(observe), stale, staleWrite)
			require.ErrorIs(t, err, pgadvisory.ErrStaleToken)
			c := log.only(t)
			require.Equal(t, pgadvisory.Call{Kind: pgadvisory.CallFenced, Name: lock.Name, LockIDs: []int64{key}, Token: stale}, c.call)
			require.Equal(t, pgadvisory.OutcomeNone, c.end.Outcome)
			require.Equal(t, pgadvisory.ErrStaleToken, c.end.Rejection)
			require.Empty(t, c.events, "a fenced write takes no lock")

			// Control: the current token's write is accepted.
			require.NoError(t, door.RunFencedLock(ctx, lock.With(observe), fresh, staleWrite))
			require.NoError(t, log.only(t).end.Rejection)
		})

		t.Run("stale write by token alone", func(t *testing.T) {
			observed := door.WithLocker(pgadvisory.WithLockerObserver(&log))
			require.ErrorIs(t, observed.RunFenced(ctx, stale, staleWrite), pgadvisory.ErrStaleToken)
			var mine []*loggedCall
			for _, c := range log.take() {
				if c.call.Kind == pgadvisory.CallFenced && c.call.Token == stale {
					mine = append(mine, c)
				}
			}
			require.Len(t, mine, 1)
			require.Empty(t, mine[0].call.Name)
			require.Empty(t, mine[0].call.LockIDs)
			require.Equal(t, pgadvisory.ErrStaleToken, mine[0].end.Rejection)
		})

		t.Run("nested: reported by the inner call only", func(t *testing.T) {
			outerKey := testdb.Key(t)
			err := door.RunExclusive(ctx, outerKey, func(frontdoor.Tx) error {
				return door.RunFencedLock(ctx, lock.With(observe), stale, staleWrite)
			}, observe)
			require.ErrorIs(t, err, pgadvisory.ErrStaleToken)
			calls := log.take()
			require.Len(t, calls, 2)
			outer, inner := calls[0], calls[1]
			require.Equal(t, []int64{outerKey}, outer.call.LockIDs)
			require.NoError(t, outer.end.Rejection)
			require.Equal(t, pgadvisory.OutcomeAcquired, outer.end.Outcome)
			require.Equal(t, pgadvisory.ErrStaleToken, inner.end.Rejection)
		})

		t.Run("token-less write in fn's transaction", func(t *testing.T) {
			err := door.RunExclusive(ctx, testdb.Key(t), func(tx frontdoor.Tx) error {
				return tx.Exec(ctx, `INSERT INTO `+tbl+` (id, balance) VALUES (2, 0)`)
			}, observe)
			require.ErrorIs(t, err, pgadvisory.ErrMissingToken)
			c := log.only(t)
			require.Equal(t, pgadvisory.ErrMissingToken, c.end.Rejection)
			require.Equal(t, pgadvisory.OutcomeAcquired, c.end.Outcome)
		})

		t.Run("publish behind a newer token", func(t *testing.T) {
			ahead := testdb.Key(t)
			fencing.PublishAhead(t, admin, ahead)
			err := door.RunExclusive(ctx, ahead, func(frontdoor.Tx) error {
				t.Error("fn was called")
				return nil
			}, pgadvisory.WithFencing(), observe)
			require.ErrorIs(t, err, pgadvisory.ErrStaleToken)
			c := log.only(t)
			require.Equal(t, pgadvisory.ErrStaleToken, c.end.Rejection)
			require.Equal(t, pgadvisory.OutcomeError, c.end.Outcome, "fn's turn never came")
		})
	})
}
