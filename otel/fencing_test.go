package lockgenotel_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	lockgenotel "github.com/lockgen/lockgen/otel"
	"github.com/lockgen/lockgen/pgadvisory"
)

// lockgen.fencing.rejections counts a stale write once, against the lock
// it was made for: a fenced write makes a span and a rejection but no lock
// attempt, and an outer call that returns the rejection of a nested one
// does not count it again (its attempt says stale_token as error.type).

func TestFencingRejections(t *testing.T) {
	admin := migrated.DB(t)
	frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
		ctx := testdb.Context(t)
		tm := newTelemetry(t)
		lock := pgadvisory.Lock{Name: "otel.fenced", ID: testdb.Key(t)}
		tbl := fencing.Table(t, admin, testdb.Schema(t), "balances", lock.ID, "strict")
		holder := func() int64 { // not observed
			var token int64
			require.NoError(t, door.RunExclusiveLock(ctx, lock, func(tx frontdoor.Tx) error {
				token, _ = tx.FencingToken()
				return tx.Exec(ctx, `INSERT INTO `+tbl+` (id, balance) VALUES (1, 0) ON CONFLICT (id) DO UPDATE SET balance = 0`)
			}, pgadvisory.WithFencing()))
			return token
		}
		stale := holder()
		holder()
		write := func(tx frontdoor.Tx) error { return tx.Exec(ctx, `UPDATE `+tbl+` SET balance = 1`) }
		observed := lock.With(tm.obs.Option())
		rejected := map[attribute.Key]string{
			lockgenotel.LockNameKey: lock.Name, lockgenotel.CallKey: "run_fenced", lockgenotel.RejectionKey: "stale_token",
		}

		require.ErrorIs(t, door.RunFencedLock(ctx, observed, stale, write), pgadvisory.ErrStaleToken)
		m := tm.collect(t)
		require.EqualValues(t, 1, count(m["lockgen.fencing.rejections"], rejected))
		require.Equal(t, lock.ID, m["lockgen.fencing.rejections"][0].attrs[lockgenotel.LockIDKey].AsInt64())
		require.Empty(t, m["lockgen.lock.attempts"], "a fenced write takes no lock")
		spans := tm.spans.GetSpans()
		require.Len(t, spans, 1)
		require.Equal(t, "lockgen.run_fenced otel.fenced", spans[0].Name)
		attrs := spanAttrs(spans[0])
		require.Equal(t, stale, attrs[lockgenotel.FencingTokenKey].AsInt64())
		require.Equal(t, "stale_token", attrs[lockgenotel.ErrorTypeKey].AsString())
		_, hasOutcome := attrs[lockgenotel.OutcomeKey]
		require.False(t, hasOutcome)
		require.Equal(t, codes.Error, spans[0].Status.Code)

		// Nested: the outer call returns the inner one's rejection.
		outer := pgadvisory.Lock{Name: "otel.outer", ID: testdb.Key(t)}
		err := door.RunExclusiveLock(ctx, outer, func(frontdoor.Tx) error {
			return door.RunFencedLock(ctx, observed, stale, write)
		}, tm.obs.Option())
		require.ErrorIs(t, err, pgadvisory.ErrStaleToken)
		m = tm.collect(t)
		require.EqualValues(t, 2, count(m["lockgen.fencing.rejections"], nil), "one more, from the inner call")
		require.EqualValues(t, 2, count(m["lockgen.fencing.rejections"], rejected))
		require.EqualValues(t, 1, count(m["lockgen.lock.attempts"], map[attribute.Key]string{
			lockgenotel.LockNameKey: outer.Name, lockgenotel.OutcomeKey: "acquired", lockgenotel.ErrorTypeKey: "stale_token",
		}))

		// A token-less write in a lock call's own transaction is that call's.
		err = door.RunExclusiveLock(ctx, outer, func(tx frontdoor.Tx) error {
			return tx.Exec(ctx, `INSERT INTO `+tbl+` (id, balance) VALUES (2, 0)`)
		}, tm.obs.Option())
		require.ErrorIs(t, err, pgadvisory.ErrMissingToken)
		m = tm.collect(t)
		require.EqualValues(t, 1, count(m["lockgen.fencing.rejections"], map[attribute.Key]string{
			lockgenotel.LockNameKey: outer.Name, lockgenotel.CallKey: "run_exclusive", lockgenotel.RejectionKey: "missing_token",
		}))
	})
}
