package pgadvisory_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Leaderships on shared session connections: many of them on few server
// connections (a dying connection that deposes exactly its leaders is
// TestSharedConnKilled, session_mux_test.go).

// TestLeadManyLeadershipsFewConns: 1,000 concurrent leaderships on
// distinct keys from one process are all elected (each with its published
// term, CurrentLeader naming it) on at most 2 server connections.
func TestLeadManyLeadershipsFewConns(t *testing.T) {
	const leaderships = 1000
	w := witness.Of(migrated.DB(t))
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		door, app := muxDoor(t, drv, -1)
		base := testdb.Key(t) << 12
		keys := make([]int64, leaderships)
		for i := range keys {
			keys[i] = base + int64(i)
		}
		var elected sync.WaitGroup
		elected.Add(leaderships)
		release := make(chan struct{})
		errs := make(chan error, leaderships)
		terms := make([]int64, leaderships)
		for i, key := range keys {
			go func() {
				errs <- door.Lead(ctx, key, func(ctx context.Context, term int64) error {
					terms[i] = term
					elected.Done()
					select {
					case <-release:
						return nil
					case <-ctx.Done():
						return context.Cause(ctx)
					}
				}, pgadvisory.WithCheckInterval(100*time.Millisecond))
			}()
		}
		done := make(chan struct{})
		go func() { elected.Wait(); close(done) }()
		frontdoor.Await(t, done, "all leaders elected")

		holders := holdersOf(t, w, keys)
		require.Len(t, holders, leaderships, "every leadership holds its lock")
		pids := map[int64]bool{}
		for _, pid := range holders {
			pids[pid] = true
		}
		require.LessOrEqual(t, len(pids), 2, "backends holding the leaderships")
		require.LessOrEqual(t, backends(t, w, app), 2, "backends of the pool")
		for _, i := range []int{0, leaderships / 2, leaderships - 1} {
			leader, err := door.CurrentLeader(ctx, keys[i])
			require.NoError(t, err)
			require.Equal(t, terms[i], leader.Term)
			require.Equal(t, holders[keys[i]], int64(leader.PID))
		}
		close(release)
		for range leaderships {
			require.NoError(t, frontdoor.Await(t, errs, "a leadership's end"))
		}
		require.Empty(t, w.Holds(t, keys...))
		frontdoor.RequireIdle(t, door)
	})
}
