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

// TestLeadQueuedElectionInTurnsLeavesQueue: a candidate queued behind a
// leader is woken by its resignation, and its try statement takes the
// lock, but the election in it gives up after one turn: the resigned
// leader's write is still in flight. The candidate keeps the lock and
// elects in turns; its place in the queue is gone at once, not when its
// row expires (7.5s with this check interval), and once the write
// commits it is elected with the next term.
func TestLeadQueuedElectionInTurnsLeavesQueue(t *testing.T) {
	admin := migrated.DB(t)
	schema := testdb.Schema(t)
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		key := testdb.Key(t)
		table := fencing.Table(t, admin, schema, "queued_in_turns_"+map[frontdoor.Driver]string{frontdoor.SQL: "sql", frontdoor.Pgx: "pgx"}[drv], key, "strict")
		leader := frontdoor.Open(t, drv, frontdoor.MaxConns(3))
		d := frontdoor.Open(t, drv, frontdoor.MaxConns(3))
		opts := []pgadvisory.Option{pgadvisory.WithCheckInterval(10 * time.Second)}

		elected, resign := make(chan int64, 1), make(chan struct{})
		led := make(chan error, 1)
		go func() {
			led <- leader.Lead(ctx, pgadvisory.ID(key), func(_ context.Context, term int64) error {
				elected <- term
				<-resign
				return nil
			}, opts...)
		}()
		oldTerm := frontdoor.Await(t, elected, "the first leader")
		_, release, written := fencing.OpenWriter(t, ctx, leader, table, oldTerm, 1)

		done := make(chan error, 1)
		terms := make(chan int64, 1)
		go func() {
			done <- d.Lead(ctx, pgadvisory.ID(key), func(_ context.Context, term int64) error {
				terms <- term
				return nil
			}, opts...)
		}()
		require.Eventually(t, func() bool { return queueRows(t, admin, key) == 1 }, 30*time.Second, time.Millisecond,
			"the candidate waits in the queue")

		close(resign)
		require.NoError(t, frontdoor.Await(t, led, "the first leader's Lead"))
		require.Eventually(t, func() bool { return queueRows(t, admin, key) == 0 }, time.Second, time.Millisecond,
			"the candidate that took the lock left the queue while it elects in turns")
		select {
		case term := <-terms:
			t.Fatalf("elected with term %d while the previous term's write is in flight", term)
		case <-time.After(100 * time.Millisecond):
		}

		release()
		require.NoError(t, frontdoor.Await(t, written, "the previous term's write"))
		require.Equal(t, oldTerm+1, frontdoor.Await(t, terms, "the candidate's election"))
		require.NoError(t, frontdoor.Await(t, done, "the candidate's Lead"))
		require.Zero(t, queueRows(t, admin, key))
		frontdoor.RequireIdle(t, d)
	})
}
