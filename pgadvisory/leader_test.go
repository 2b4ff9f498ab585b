package pgadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Leader election (Lead): one leader at a time, terms that strictly
// increase and are the lock's published fencing token, failover when the
// leader's backend dies, and what a deposed leader can no longer do.

// candidates opens n replicas of drv, each with its own pool (as separate
// processes have), on the migrated package database.
func candidates(t *testing.T, drv frontdoor.Driver, n int) []frontdoor.Door {
	t.Helper()
	doors := make([]frontdoor.Door, n)
	for i := range doors {
		doors[i] = frontdoor.Open(t, drv, frontdoor.MaxConns(3))
	}
	return doors
}

// TestLeadOneLeaderAtATime: three candidates campaign over many rounds,
// each leader resigning after a short time. An overlap detector (the
// number of active leaders) never exceeds one, terms strictly increase in
// the order of election, each term is the lock's published token while
// its leader leads, and CurrentLeader names it.
func TestLeadOneLeaderAtATime(t *testing.T) {
	admin := migrated.DB(t)
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		key := testdb.Key(t)
		doors := candidates(t, drv, 3)
		const rounds = 15 // elections per candidate

		var active, maxActive atomic.Int32
		var mu sync.Mutex
		var terms []int64
		var wg sync.WaitGroup
		errs := make([]error, len(doors))
		for i, d := range doors {
			holder := []string{"alpha", "bravo", "charlie"}[i]
			wg.Go(func() {
				for range rounds {
					err := d.Lead(ctx, pgadvisory.ID(key), func(ctx context.Context, term int64) error {
						n := active.Add(1)
						defer active.Add(-1)
						for {
							m := maxActive.Load()
							if n <= m || maxActive.CompareAndSwap(m, n) {
								break
							}
						}
						mu.Lock()
						terms = append(terms, term)
						mu.Unlock()
						if got := fencing.Published(t, admin, key); got != term {
							return errors.New("the term is not the published token")
						}
						leader, err := d.CurrentLeader(ctx, pgadvisory.ID(key))
						if err != nil {
							return err
						}
						if leader.Term != term || leader.Holder != holder {
							return errors.New("CurrentLeader does not name this leader")
						}
						time.Sleep(5 * time.Millisecond)
						return nil
					}, pgadvisory.WithHolder(holder))
					if err != nil {
						errs[i] = err
						return
					}
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		require.EqualValues(t, 1, maxActive.Load(), "two leaders at once")
		require.Len(t, terms, rounds*len(doors))
		for i := 1; i < len(terms); i++ {
			require.Greater(t, terms[i], terms[i-1], "terms must strictly increase in the order of election")
		}
		// Nobody leads now: the last leader resigned and released at once.
		_, err := doors[0].CurrentLeader(ctx, pgadvisory.ID(key))
		require.ErrorIs(t, err, pgadvisory.ErrNoLeader)
		require.Empty(t, witness.Of(admin).Holds(t, key))
	})
}

// TestLeadControlOverlapDetectorSees: the detector of
// TestLeadOneLeaderAtATime does see two "leaders" that do not exclude each
// other (fn run without the lock).
func TestLeadControlOverlapDetectorSees(t *testing.T) {
	var active, maxActive atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 3 {
		wg.Go(func() {
			<-start
			n := active.Add(1)
			defer active.Add(-1)
			for {
				m := maxActive.Load()
				if n <= m || maxActive.CompareAndSwap(m, n) {
					break
				}
			}
			time.Sleep(50 * time.Millisecond)
		})
	}
	close(start)
	wg.Wait()
	require.Greater(t, maxActive.Load(), int32(1))
}

// TestLeadFailoverWhenBackendKilled: the leader's backend is terminated.
// Its leadership context is canceled within two check intervals (plus the
// check timeout, the bound of one check), Lead returns ErrLockLost, a
// waiting candidate is elected with a higher term, and a write with the old
// term is rejected with ErrStaleToken (the new term's is accepted).
func TestLeadFailoverWhenBackendKilled(t *testing.T) {
	admin := migrated.DB(t)
	w := witness.Of(admin)
	schema := testdb.Schema(t)
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		key := testdb.Key(t)
		table := fencing.Table(t, admin, schema, "failover_"+map[frontdoor.Driver]string{frontdoor.SQL: "sql", frontdoor.Pgx: "pgx"}[drv], key, "strict")
		doors := candidates(t, drv, 2)
		const interval, checkTimeout = 100 * time.Millisecond, time.Second
		opts := []pgadvisory.Option{pgadvisory.WithCheckInterval(interval), pgadvisory.WithCheckTimeout(checkTimeout)}

		elected := make(chan int64, 1)
		canceledAfter := make(chan time.Duration, 1)
		var killedAt time.Time
		first := make(chan error, 1)
		go func() {
			first <- doors[0].Lead(ctx, pgadvisory.ID(key), func(lctx context.Context, term int64) error {
				elected <- term
				<-lctx.Done()
				canceledAfter <- time.Since(killedAt)
				return context.Cause(lctx)
			}, append(opts, pgadvisory.WithHolder("first"))...)
		}()
		oldTerm := frontdoor.Await(t, elected, "the first leader")

		// The second candidate queues behind it.
		second := make(chan error, 1)
		newTerms := make(chan int64, 1)
		go func() {
			second <- doors[1].Lead(ctx, pgadvisory.ID(key), func(lctx context.Context, term int64) error {
				newTerms <- term
				<-lctx.Done()
				return nil
			}, append(opts, pgadvisory.WithHolder("second"))...)
		}()
		require.Eventually(t, func() bool { return waitingFor(t, w, []int64{key}) == 1 }, 30*time.Second, 10*time.Millisecond, "the second candidate waits")
		require.NoError(t, fencing.Write(admin, oldTerm, `INSERT INTO `+table+` (id, balance) VALUES (1, 1)`), "the leader's write")

		holder := grantedHolder(t, w, key)
		killedAt = time.Now()
		var ok bool
		require.NoError(t, admin.QueryRowContext(ctx, "SELECT pg_terminate_backend($1)", holder.PID).Scan(&ok))
		require.True(t, ok)

		took := frontdoor.Await(t, canceledAfter, "the deposed leader's context")
		require.Less(t, took, 2*interval+checkTimeout, "canceled within two check intervals (with the check timeout's margin)")
		err := frontdoor.Await(t, first, "the deposed leader's Lead")
		require.ErrorIs(t, err, pgadvisory.ErrLockLost)

		newTerm := frontdoor.Await(t, newTerms, "the new leader")
		require.Greater(t, newTerm, oldTerm)
		leader, err := doors[1].CurrentLeader(ctx, pgadvisory.ID(key))
		require.NoError(t, err)
		require.Equal(t, pgadvisory.Leader{Holder: "second", Term: newTerm, PID: int32(grantedHolder(t, w, key).PID), Since: leader.Since}, leader)

		// The deposed leader's late write, on a connection of its own, is
		// rejected; the new leader's is accepted.
		err = doors[0].RunFenced(ctx, oldTerm, func(tx frontdoor.Tx) error {
			return tx.Exec(ctx, `UPDATE `+table+` SET balance = 666 WHERE id = 1`)
		})
		require.ErrorIs(t, err, pgadvisory.ErrStaleToken)
		require.NoError(t, doors[1].RunFenced(ctx, newTerm, func(tx frontdoor.Tx) error {
			return tx.Exec(ctx, `UPDATE `+table+` SET balance = 2 WHERE id = 1`)
		}))
		require.Equal(t, fencing.Row{Balance: 2, Token: newTerm}, fencing.Rows(t, admin, table)[1])
		_, err = admin.ExecContext(ctx, "SELECT pg_terminate_backend($1)", w.Holder(t, key).PID)
		require.NoError(t, err)
		require.ErrorIs(t, frontdoor.Await(t, second, "the second leader's Lead"), pgadvisory.ErrLockLost)
	})
}

// grantedHolder is the one backend granted key (others may wait).
func grantedHolder(t *testing.T, w *witness.Witness, key int64) witness.Hold {
	t.Helper()
	var granted []witness.Hold
	for _, h := range w.Holds(t, key) {
		if h.Granted {
			granted = append(granted, h)
		}
	}
	require.Len(t, granted, 1, "backends granted %d", key)
	return granted[0]
}

// TestLeadIgnoringItsContext: a leader whose fn ignores the canceled
// leadership context and returns nil later still gets ErrLockLost from
// Lead, and its writes with its term are rejected once another leads.
func TestLeadIgnoringItsContext(t *testing.T) {
	admin := migrated.DB(t)
	w := witness.Of(admin)
	schema := testdb.Schema(t)
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		key := testdb.Key(t)
		table := fencing.Table(t, admin, schema, "ignorer_"+map[frontdoor.Driver]string{frontdoor.SQL: "sql", frontdoor.Pgx: "pgx"}[drv], key, "strict")
		doors := candidates(t, drv, 2)
		interval := pgadvisory.WithCheckInterval(50 * time.Millisecond)
		var lateWrite error
		err := doors[0].Lead(ctx, pgadvisory.ID(key), func(_ context.Context, term int64) error {
			var ok bool
			if err := admin.QueryRowContext(ctx, "SELECT pg_terminate_backend($1)", w.Holder(t, key).PID).Scan(&ok); err != nil || !ok {
				return errors.New("could not terminate the leader's backend")
			}
			// Another replica is elected meanwhile.
			elected := make(chan struct{})
			go func() {
				_ = doors[1].Lead(ctx, pgadvisory.ID(key), func(context.Context, int64) error { close(elected); return nil })
			}()
			frontdoor.Await(t, elected, "the other replica's election")
			lateWrite = doors[0].RunFenced(ctx, term, func(tx frontdoor.Tx) error {
				return tx.Exec(ctx, `INSERT INTO `+table+` (id, balance) VALUES (1, 1)`)
			})
			return nil // ignores that its leadership ended
		}, interval)
		require.ErrorIs(t, err, pgadvisory.ErrLockLost)
		require.ErrorIs(t, lateWrite, pgadvisory.ErrStaleToken)
		require.Empty(t, fencing.Rows(t, admin, table))
	})
}

// TestLeadPanicReleases: a panic in fn goes on to the caller, and the
// leadership is released: the next candidate is elected.
func TestLeadPanicReleases(t *testing.T) {
	admin := migrated.DB(t)
	frontdoor.ForEach(t, func(t *testing.T, d frontdoor.Door) {
		ctx := testdb.Context(t)
		key := testdb.Key(t)
		var first int64
		require.PanicsWithValue(t, "boom", func() {
			_ = d.Lead(ctx, pgadvisory.ID(key), func(_ context.Context, term int64) error {
				first = term
				panic("boom")
			})
		})
		require.NotZero(t, first)
		require.Empty(t, witness.Of(admin).Holds(t, key), "the panicking leader's lock is released")
		_, err := d.CurrentLeader(ctx, pgadvisory.ID(key))
		require.ErrorIs(t, err, pgadvisory.ErrNoLeader)
		require.NoError(t, d.Lead(ctx, pgadvisory.ID(key), func(_ context.Context, term int64) error {
			if term <= first {
				return errors.New("no higher term")
			}
			return nil
		}, pgadvisory.WithWait(5*time.Second)))
	})
}

// TestLeadWaitBoundAndFnError: WithWait bounds the campaign
// (ErrLockTimeout, fn not called); fn's error is Lead's.
func TestLeadWaitBoundAndFnError(t *testing.T) {
	migrated.DB(t)
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		key := testdb.Key(t)
		doors := candidates(t, drv, 2)
		boom := errors.New("boom")
		err := doors[0].Lead(ctx, pgadvisory.ID(key), func(ctx context.Context, term int64) error {
			called := false
			err := doors[1].Lead(ctx, pgadvisory.ID(key), func(context.Context, int64) error { called = true; return nil },
				pgadvisory.WithWait(100*time.Millisecond))
			if !errors.Is(err, pgadvisory.ErrLockTimeout) || called {
				return errors.New("a bounded campaign did not time out")
			}
			return boom
		})
		require.ErrorIs(t, err, boom)
		require.NotErrorIs(t, err, pgadvisory.ErrLockLost)

		// A campaign canceled by ctx while waiting.
		err = doors[0].Lead(ctx, pgadvisory.ID(key), func(ctx context.Context, term int64) error {
			wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			err := doors[1].Lead(wctx, pgadvisory.ID(key), func(context.Context, int64) error { return nil })
			if !errors.Is(err, context.DeadlineExceeded) {
				return errors.New("a canceled campaign did not end")
			}
			return nil
		})
		require.NoError(t, err)
	})
}

// TestLeadOptions: the options that do not apply to a leadership are
// refused before anything is sent, with a reason.
func TestLeadOptions(t *testing.T) {
	db := testdb.DB(t)
	ctx := testdb.Context(t)
	fn := func(context.Context, int64) error { t.Error("fn ran"); return nil }
	for _, tc := range []struct {
		opt  pgadvisory.Option
		want string
	}{
		{pgadvisory.WithShared(), "WithShared does not apply to Lead: two shared holders would both lead"},
		{pgadvisory.WithLocks(1, 2), "WithLocks does not apply to Lead: a leadership is one lock"},
		{pgadvisory.WithFencing(), "WithFencing does not apply to Lead: the term fn receives is already the lock's published fencing token"},
		{pgadvisory.WithTxOptions(sql.TxOptions{}), "WithTxOptions does not apply to Lead"},
		{pgadvisory.WithHolder("a\x00b"), "WithHolder"},
	} {
		err := pgadvisory.Lead(ctx, db, 1, fn, tc.opt)
		require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument)
		require.ErrorContains(t, err, tc.want)
		require.ErrorIs(t, pgadvisory.Campaign(ctx, db, 1, fn, tc.opt), pgadvisory.ErrInvalidArgument, "Campaign returns a refusal at once")
	}
	require.ErrorIs(t, pgadvisory.Lead(ctx, nil, 1, fn), pgadvisory.ErrInvalidArgument)
	require.ErrorIs(t, pgadvisory.Lead(ctx, db, 1, nil), pgadvisory.ErrInvalidArgument)
	require.ErrorIs(t, pgadvisory.LeadPgx(ctx, nil, 1, fn), pgadvisory.ErrInvalidArgument)
	require.ErrorIs(t, pgadvisory.Campaign(ctx, db, 1, nil), pgadvisory.ErrInvalidArgument)
	_, err := pgadvisory.CurrentLeader(ctx, nil, 1)
	require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument)
	// Declared with the lock: the refusal says so.
	l := pgadvisory.Lock{Name: "jobs.leader", ID: 1}.With(pgadvisory.WithShared())
	err = l.Lead(ctx, db, fn)
	require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument)
	require.ErrorContains(t, err, "declared with the lock jobs.leader")
	// WithHolder still does not apply to RunSession.
	require.ErrorIs(t, pgadvisory.RunSession(ctx, db, 1, func(context.Context) error { return nil }, pgadvisory.WithHolder("x")), pgadvisory.ErrInvalidArgument)
}

// TestLeadNotMigrated: without lockgen's schema the election fails with
// ErrNotMigrated, fn does not run and the lock is released.
func TestLeadNotMigrated(t *testing.T) {
	_, url := testdb.EmptyDatabase(t)
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		d := frontdoor.Open(t, drv, frontdoor.URL(url))
		ctx := testdb.Context(t)
		key := testdb.Key(t)
		err := d.Lead(ctx, pgadvisory.ID(key), func(context.Context, int64) error { t.Error("fn ran"); return nil })
		require.ErrorIs(t, err, pgadvisory.ErrNotMigrated)
		var pe *pgadvisory.Error
		require.ErrorAs(t, err, &pe)
		require.Equal(t, pgadvisory.OpElect, pe.Op)
		frontdoor.RequireIdle(t, d)
		require.ErrorIs(t, d.Campaign(ctx, pgadvisory.ID(key), func(context.Context, int64) error { return nil }), pgadvisory.ErrNotMigrated)
	})
}

// TestLeadSequenceBehind: an election whose term would not be above the
// published token (the sequence went backwards) fails with ErrStaleToken,
// Op "elect", before fn, and releases the lock.
func TestLeadSequenceBehind(t *testing.T) {
	admin := migrated.DB(t)
	frontdoor.ForEach(t, func(t *testing.T, d frontdoor.Door) {
		ctx := testdb.Context(t)
		key := testdb.Key(t)
		fencing.PublishAhead(t, admin, key)
		err := d.Lead(ctx, pgadvisory.ID(key), notCalledLead(t))
		sqlstate.RequireTyped(t, err, pgadvisory.ErrStaleToken, "elect", "LF004")
		require.Empty(t, witness.Of(admin).Holds(t, key))
		frontdoor.RequireIdle(t, d)
	})
}

// TestLeadSequenceEqual: the sequence set back so that nextval returns
// exactly the term published by the previous election (a backup restored
// from just before it) fails the next election with LF004: neither the
// election's UPDATE of the fence row nor its INSERT … ON CONFLICT may
// publish a term equal to the published one, or two leaders would share a
// term. The control is the first election, which published that term; the
// sequence ends where it was.
func TestLeadSequenceEqual(t *testing.T) {
	admin := migrated.DB(t)
	frontdoor.ForEach(t, func(t *testing.T, d frontdoor.Door) {
		ctx := testdb.Context(t)
		key := testdb.Key(t)
		var first int64
		require.NoError(t, d.Lead(ctx, pgadvisory.ID(key), func(_ context.Context, term int64) error { first = term; return nil }))
		require.Equal(t, first, fencing.Published(t, admin, key), "control: the first election published its term")

		_, err := admin.ExecContext(ctx, `SELECT setval('pgadvisory.fencing_token_seq', $1, false)`, first)
		require.NoError(t, err)
		err = d.Lead(ctx, pgadvisory.ID(key), notCalledLead(t))
		pe := sqlstate.RequireTyped(t, err, pgadvisory.ErrStaleToken, "elect", "LF004")
		require.Equal(t, []int64{key}, pe.LockIDs)
		require.Equal(t, first, fencing.Published(t, admin, key), "the published term stays")
		require.Equal(t, first, fencing.LastToken(t, admin), "the sequence is back where it was")
		require.Empty(t, witness.Of(admin).Holds(t, key))
		frontdoor.RequireIdle(t, d)
	})
}
