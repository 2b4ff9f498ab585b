package pgadvisory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestWatchLeader: WatchLeader reports the vacancy at once, then a lease
// leader, its resignation, a session-lock leader and its resignation, each
// as CurrentLeader reports it at that step; it returns nil when ctx ends
// and fn's error when fn fails.
func TestWatchLeader(t *testing.T) {
	migrated.DB(t)
	ctx := testdb.Context(t)
	key := testdb.Key(t)
	lock := pgadvisory.ID(key)
	watcher, err := pgadvisory.New(pgadvisory.Stdlib(testdb.DB(t)), pgadvisory.WithDefaultCheckInterval(20*time.Millisecond))
	require.NoError(t, err)
	leader, err := pgadvisory.New(pgadvisory.Pgx(testdb.Pool(t)), pgadvisory.WithDefaultHolder("leader"))
	require.NoError(t, err)

	events := make(chan pgadvisory.Leader, 16)
	wctx, stop := context.WithCancel(ctx)
	returned := make(chan error, 1)
	go func() {
		returned <- watcher.WatchLeader(wctx, lock, func(l pgadvisory.Leader) error {
			events <- l
			return nil
		})
	}()
	next := func(what string) pgadvisory.Leader {
		t.Helper()
		select {
		case l := <-events:
			return l
		case <-time.After(10 * time.Second):
			t.Fatalf("no event: %s", what)
			return pgadvisory.Leader{}
		}
	}
	require.Equal(t, pgadvisory.Leader{}, next("the vacancy, at once"))

	var lastTerm int64
	for _, lease := range []bool{true, false} {
		var opts []pgadvisory.Option
		if lease {
			opts = append(opts, pgadvisory.WithLease(time.Minute))
		}
		require.NoError(t, leader.Lead(ctx, lock, func(fctx context.Context, term int64) error {
			got := next("a new leader")
			require.Equal(t, term, got.Term)
			require.Greater(t, term, lastTerm)
			lastTerm = term
			require.Equal(t, "leader", got.Holder)
			require.Equal(t, lease, got.PID == 0, "a lease leader has PID 0, a session-lock leader its backend's")
			cur, err := watcher.CurrentLeader(ctx, lock)
			require.NoError(t, err)
			require.Equal(t, got, cur, "what CurrentLeader reports")
			select {
			case l := <-events:
				t.Errorf("a change reported while nothing changed: %+v", l)
			case <-time.After(100 * time.Millisecond):
			}
			return nil
		}, opts...))
		require.Equal(t, pgadvisory.Leader{}, next("the vacancy after the resignation"))
		_, err := watcher.CurrentLeader(ctx, lock)
		require.ErrorIs(t, err, pgadvisory.ErrNoLeader)
	}
	stop()
	require.NoError(t, frontdoor.Await(t, returned, "WatchLeader's return"), "nil once ctx ends")

	boom := errors.New("boom")
	require.ErrorIs(t, watcher.WatchLeader(ctx, lock, func(pgadvisory.Leader) error { return boom }), boom)
}
