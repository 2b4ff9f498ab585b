package pgadvisory_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestSessionSharedStatementEndsWithCtx: a call whose statement runs on,
// or waits for, a shared connection returns when its ctx ends, not when
// the statement does. An election on the only shared connection commits
// while the synchronous standby is stalled, so its statement runs until
// the standby is back; its caller's ctx is canceled. Lead returns
// context.Canceled (Op elect) while the election still waits, and fn
// does not run. A RunSession on a free key queued behind it returns with
// its ctx's deadline too, holding nothing. Once the standby is back, the
// election ends in the background and its lock is released as a leader
// resigns: no lock is left, and a plain session lock on the key on the
// same backend is not named leader. A neighbour on the connection keeps
// its lock throughout. CONTROL: the same election with a live ctx is
// still waiting well past the grace a canceled call gets, and is elected
// once the standby is back.
func TestSessionSharedStatementEndsWithCtx(t *testing.T) {
	sc := startStallable(t)
	w := witness.Of(sc.admin)
	ctx := testdb.Context(t)
	opts := []pgadvisory.Option{pgadvisory.WithCheckInterval(50 * time.Millisecond)}
	for _, drv := range frontdoor.Drivers {
		t.Run(string(drv), func(t *testing.T) {
			d := proxiedClusterDoor(t, sc.c, drv, "elector", sc.px).WithLocker(pgadvisory.WithSessionConns(1))
			key, other, free := testdb.Key(t), testdb.Key(t), testdb.Key(t)
			endOther, lostOther := holdShared(t, ctx, d, other, opts...)

			lctx, cancel := context.WithCancel(ctx)
			defer cancel()
			done, ran := stalledLead(t, sc, lctx, d, key, opts)
			require.Equal(t, w.Holder(t, other).PID, w.Holder(t, key).PID, "one shared connection")

			// Queued behind the election: returns at its deadline.
			qctx, qcancel := context.WithTimeout(ctx, 300*time.Millisecond)
			err := d.RunSession(qctx, pgadvisory.ID(free), func(context.Context) error { return errors.New("fn ran") })
			qcancel()
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.True(t, sc.committing(), "the queued call returned while the election still waits")

			requireAbandonedElection(t, sc, w, key, cancel, done, ran, false)
			require.Empty(t, w.Holds(t, free))
			_, err = d.CurrentLeader(ctx, pgadvisory.ID(key))
			require.ErrorIs(t, err, pgadvisory.ErrNoLeader)
			// It resigned, not merely unlocked: a plain session lock on the
			// key, taken on the same backend (the only shared connection), is
			// not named leader.
			require.NoError(t, d.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error {
				require.Equal(t, w.Holder(t, other).PID, w.Holder(t, key).PID, "the same backend")
				_, err := d.CurrentLeader(ctx, pgadvisory.ID(key))
				require.ErrorIs(t, err, pgadvisory.ErrNoLeader, "the abandoned election's leader is named again")
				return nil
			}))

			// CONTROL: a live ctx waits for the election.
			liveLeadWaits(t, sc, ctx, d, key, opts, func() {})

			requireKeptThenEnd(t, endOther, lostOther, "the neighbour's lock on the shared connection")
			require.Empty(t, w.Holds(t, key, other))
			frontdoor.RequireIdle(t, d)
		})
	}
}

// TestSessionSharedAloneStatementEndsWithCtx: a call alone on its shared
// connection (no other call's lock on it) runs its statements on its own
// goroutine, and still returns when its ctx ends. Its election commits
// while the synchronous standby is stalled; its ctx is canceled. Lead
// returns context.Canceled (Op elect) within the grace, as the election's
// own error and nothing else (no failed release with it), while the
// election still waits, and fn does not run. The connection, which
// carried nothing else, was closed: once the standby is back the lock is
// free, nobody is named leader, and the Locker leads again with a newer
// term. CONTROL: the same election with a live ctx is still waiting well
// past the grace, and is elected once the standby is back.
func TestSessionSharedAloneStatementEndsWithCtx(t *testing.T) {
	sc := startStallable(t)
	w := witness.Of(sc.admin)
	ctx := testdb.Context(t)
	opts := []pgadvisory.Option{pgadvisory.WithCheckInterval(50 * time.Millisecond)}
	for _, drv := range frontdoor.Drivers {
		t.Run(string(drv), func(t *testing.T) {
			d := proxiedClusterDoor(t, sc.c, drv, "elector", sc.px).WithLocker(pgadvisory.WithSessionConns(1))
			key := testdb.Key(t)

			lctx, cancel := context.WithCancel(ctx)
			defer cancel()
			done, ran := stalledLead(t, sc, lctx, d, key, opts)
			abandoned := w.Holder(t, key).PID

			requireAbandonedElection(t, sc, w, key, cancel, done, ran, true)
			_, err := d.CurrentLeader(ctx, pgadvisory.ID(key))
			require.ErrorIs(t, err, pgadvisory.ErrNoLeader)

			// CONTROL: a live ctx waits for the election, on another backend
			// (the abandoned one's connection was closed).
			liveLeadWaits(t, sc, ctx, d, key, opts, func() {
				require.NotEqual(t, abandoned, w.Holder(t, key).PID, "the abandoned election's connection was closed")
			})
			require.Empty(t, w.Holds(t, key))
			frontdoor.RequireIdle(t, d)
		})
	}
}

// stalledLead stalls sc's synchronous standby and starts d.Lead on key
// with ctx, returning once the election's commit waits for the standby:
// the Lead's result, and whether its fn ran.
func stalledLead(t *testing.T, sc stallable, ctx context.Context, d frontdoor.Door, key int64, opts []pgadvisory.Option) (<-chan error, *atomic.Bool) {
	t.Helper()
	sc.stall(true)
	done, ran := startLead(ctx, d, key, opts)
	require.Eventually(t, sc.committing, 30*time.Second, 5*time.Millisecond, "the election's commit waits for the standby")
	return done, ran
}

// startLead starts d.Lead on key with ctx: the Lead's result, and whether
// its fn ran.
func startLead(ctx context.Context, d frontdoor.Door, key int64, opts []pgadvisory.Option) (<-chan error, *atomic.Bool) {
	done := make(chan error, 1)
	ran := new(atomic.Bool)
	go func() {
		done <- d.Lead(ctx, pgadvisory.ID(key), func(context.Context, int64) error {
			ran.Store(true)
			return nil
		}, opts...)
	}()
	return done, ran
}

// requireAbandonedElection cancels (cancel) a Lead on key whose election's
// commit waits for sc's stalled standby, and requires it to return
// context.Canceled with Op elect within 3s, while the commit still waits,
// without running fn (ran). It then ends the stall and waits until key is
// free. alone: the error is the election's own *pgadvisory.Error, with
// nothing joined to it (no failed release).
func requireAbandonedElection(t *testing.T, sc stallable, w *witness.Witness, key int64, cancel context.CancelFunc, done <-chan error, ran *atomic.Bool, alone bool) {
	t.Helper()
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
		var pe *pgadvisory.Error
		require.ErrorAs(t, err, &pe)
		if alone {
			require.IsType(t, &pgadvisory.Error{}, err, "the election's error alone: %v", err)
		}
		require.Equal(t, pgadvisory.OpElect, pe.Op)
	case <-time.After(3 * time.Second):
		t.Fatal("Lead did not return after its ctx ended: it waits for its election statement")
	}
	require.True(t, sc.committing(), "the election statement still runs after the call returned")
	require.False(t, ran.Load(), "fn ran for a call whose ctx ended during its election")

	sc.stall(false)
	require.Eventually(t, func() bool { return len(w.Holds(t, key)) == 0 }, 30*time.Second, 10*time.Millisecond,
		"the abandoned election's lock is released")
}

// liveLeadWaits is the control of a stalled election: a Lead with a live
// ctx is still waiting well past the grace a canceled call gets (while
// stalled runs its checks), and is elected once the standby is back.
func liveLeadWaits(t *testing.T, sc stallable, ctx context.Context, d frontdoor.Door, key int64, opts []pgadvisory.Option, stalled func()) {
	t.Helper()
	done, ran := stalledLead(t, sc, ctx, d, key, opts)
	stalled()
	select {
	case err := <-done:
		t.Fatalf("the control's Lead returned while its election waited: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	sc.stall(false)
	require.NoError(t, frontdoor.Await(t, done, "the control's Lead"))
	require.True(t, ran.Load(), "the control was elected")
}

// TestSessionSharedElectionInTurnsEndsWithCtx: the election of a Lead
// whose try statement gave up waiting for a writer of the previous term
// (one turn) goes on in turns of the shared connection; the writer
// commits, and the turn that then elects commits while the synchronous
// standby is stalled. Its caller's ctx is canceled: Lead returns
// context.Canceled (Op elect) while the election still waits, and fn does
// not run. Once the standby is back, the election ends in the background
// and no lock is left.
//   - neighbour: another call's lock is on the connection, which stays
//     open; the lock is released as a leader resigns, so a plain session
//     lock on the key, on the same backend, is not named leader, and the
//     neighbour keeps its lock throughout.
//   - alone: nothing else is on the connection, which is closed; Lead
//     returns the election's error alone, with no failed release.
func TestSessionSharedElectionInTurnsEndsWithCtx(t *testing.T) {
	sc := startStallable(t)
	w := witness.Of(sc.admin)
	ctx := testdb.Context(t)
	opts := []pgadvisory.Option{pgadvisory.WithCheckInterval(50 * time.Millisecond)}
	for _, drv := range frontdoor.Drivers {
		for _, alone := range []bool{false, true} {
			t.Run(string(drv)+map[bool]string{false: "/neighbour", true: "/alone"}[alone], func(t *testing.T) {
				d := proxiedClusterDoor(t, sc.c, drv, "elector", sc.px).WithLocker(pgadvisory.WithSessionConns(1))
				// The previous leader and its writer commit without waiting
				// for the standby.
				writers := frontdoor.OnDB(clusterDB(t, sc.c, pgcluster.Superuser, "local"))
				key, other := testdb.Key(t), testdb.Key(t)
				table := fencing.Table(t, sc.admin, "public", fmt.Sprintf("in_turns_%s_%t", map[frontdoor.Driver]string{frontdoor.SQL: "sql", frontdoor.Pgx: "pgx"}[drv], alone), key, "strict")
				var oldTerm int64
				require.NoError(t, writers.Lead(ctx, pgadvisory.ID(key), func(_ context.Context, term int64) error { oldTerm = term; return nil }))
				_, release, written := fencing.OpenWriter(t, ctx, writers, table, oldTerm, 1)
				var endOther func() (error, error)
				var lostOther <-chan struct{}
				if !alone {
					endOther, lostOther = holdShared(t, ctx, d, other, opts...)
				}

				sc.stall(true)
				lctx, cancel := context.WithCancel(ctx)
				defer cancel()
				done, ran := startLead(lctx, d, key, opts)
				require.Eventually(t, func() bool { return len(w.Holds(t, key)) == 1 }, 30*time.Second, 5*time.Millisecond,
					"the candidate holds the lock while its election waits for the writer")
				candidate := w.Holder(t, key).PID
				if !alone {
					require.Equal(t, w.Holder(t, other).PID, candidate, "one shared connection")
				}
				time.Sleep(100 * time.Millisecond) // several turns
				require.False(t, sc.committing(), "no election commits while the writer holds the fence row")
				release()
				require.NoError(t, frontdoor.Await(t, written, "the previous term's write"))
				require.Eventually(t, sc.committing, 30*time.Second, 5*time.Millisecond, "the election's commit waits for the standby")

				requireAbandonedElection(t, sc, w, key, cancel, done, ran, alone)
				require.Greater(t, fencing.Published(t, sc.admin, key), oldTerm, "the abandoned election published a newer term")
				_, err := d.CurrentLeader(ctx, pgadvisory.ID(key))
				require.ErrorIs(t, err, pgadvisory.ErrNoLeader)
				require.NoError(t, d.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error {
					if alone {
						require.NotEqual(t, candidate, w.Holder(t, key).PID, "the abandoned election's connection was closed")
					} else {
						require.Equal(t, candidate, w.Holder(t, key).PID, "the same backend")
					}
					_, err := d.CurrentLeader(ctx, pgadvisory.ID(key))
					require.ErrorIs(t, err, pgadvisory.ErrNoLeader, "the abandoned election's leader is named again")
					return nil
				}))
				if !alone {
					requireKeptThenEnd(t, endOther, lostOther, "the neighbour's lock on the shared connection")
				}
				require.Empty(t, w.Holds(t, key, other))
				frontdoor.RequireIdle(t, d)
			})
		}
	}
}
