package pgadvisory_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestLeadPublishWaitSparesSharedConnection: an election whose publish
// waits for a deposed leader's write still in flight (it holds the fence
// row) gives up with ErrLockTimeout before its connection's statement
// bound (the check timeout), so the shared connection it ran on is not
// closed and the other locks on it are not lost.
func TestLeadPublishWaitSparesSharedConnection(t *testing.T) {
	admin := migrated.DB(t)
	schema := testdb.Schema(t)
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		key, other := testdb.Key(t), testdb.Key(t)
		table := fencing.Table(t, admin, schema, "publish_wait_"+map[frontdoor.Driver]string{frontdoor.SQL: "sql", frontdoor.Pgx: "pgx"}[drv], key, "strict")
		d := frontdoor.Open(t, drv, frontdoor.MaxConns(4)).WithLocker(pgadvisory.WithSessionConns(1))
		writers := frontdoor.Open(t, drv, frontdoor.MaxConns(2))

		// A first leader, deposed (it resigns), whose write is still in flight.
		var oldTerm int64
		require.NoError(t, writers.Lead(ctx, pgadvisory.ID(key), func(_ context.Context, term int64) error { oldTerm = term; return nil }))
		_, release, done := fencing.OpenWriter(t, ctx, writers, table, oldTerm, 1)

		// Another session lock on the only shared connection.
		otherHeld := make(chan struct{})
		stop := make(chan struct{})
		otherDone := make(chan error, 1)
		go func() {
			otherDone <- d.RunSession(ctx, pgadvisory.ID(other), func(sctx context.Context) error {
				close(otherHeld)
				select {
				case <-stop:
					return nil
				case <-sctx.Done():
					return context.Cause(sctx)
				}
			}, pgadvisory.WithCheckInterval(50*time.Millisecond))
		}()
		frontdoor.Await(t, otherHeld, "the other session lock")

		const checkTimeout = 500 * time.Millisecond
		err := d.Lead(ctx, pgadvisory.ID(key), func(context.Context, int64) error {
			t.Error("elected while the deposed leader's write is in flight")
			return nil
		}, pgadvisory.WithCheckTimeout(checkTimeout))
		require.ErrorIs(t, err, pgadvisory.ErrLockTimeout)
		var pe *pgadvisory.Error
		require.ErrorAs(t, err, &pe)
		require.Equal(t, pgadvisory.OpElect, pe.Op)

		// The other lock lives on: several checks pass on its connection.
		time.Sleep(300 * time.Millisecond)
		close(stop)
		require.NoError(t, frontdoor.Await(t, otherDone, "the other session lock's call"))

		// Once the write commits, the next election publishes.
		release()
		require.NoError(t, frontdoor.Await(t, done, "the deposed leader's write"))
		require.NoError(t, d.Lead(ctx, pgadvisory.ID(key), func(_ context.Context, term int64) error {
			require.Greater(t, term, oldTerm)
			return nil
		}, pgadvisory.WithCheckTimeout(checkTimeout)))
	})
}
