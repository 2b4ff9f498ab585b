package pgadvisory_test

// BenchmarkLeader: leader handoff after a graceful resign, with its
// baselines in the same run (SUITE=leader .ci/bench runs them in
// interleaved passes and prints the ratios).
//
// Lead and RunSession candidates wait in lockgen's queue (a row of
// pgadvisory.waiter) and are woken by the leader's release (NOTIFY); the
// bare baselines wait in the server's queue.
//
// Each op is one handoff: the leader resigns (its fn returns) while the
// next candidate waits in the lock's queue, and the op ends when the next
// candidate's fn starts. The timer runs only over that span; between ops,
// with the timer stopped, the former leader queues again (pg_locks shows it
// waiting), so every op hands over to a waiting candidate.
//
//   - lead_handoff (pgx and stdlib): two candidates, each with its own pool,
//     in a loop around Lead: release, the woken candidate's try statement
//     (grant and term publish in one durable commit), fn.
//   - lead_handoff_pgx_dedicated: lead_handoff_pgx on Lockers without
//     shared session connections (WithSessionConns(0)) whose candidates
//     wait in the server's queue on a connection of their own, as on a
//     database without migration 00011 (ServerQueueForTest): election and
//     resignation without lockgen's queue.
//   - session_handoff_pgx: the same with RunSessionPgx (WithWait): the
//     session-lock protocol's handoff without a term.
//   - bare_handoff: two raw pgx connections, pg_advisory_unlock on one, the
//     grant to a waiting pg_advisory_lock on the other.
//   - bare_durable_handoff: bare_handoff, and the granted connection then
//     publishes a token durably (floor_publish's statement) before it
//     counts as started: the physical floor of a handoff with a durable term.
//   - notify_handoff: the floor of a hand-off to a waiter that holds no
//     connection: the holder's unlock and NOTIFY in one statement, the
//     waiter's listening connection, its try on another connection.
//   - notify_durable_handoff: notify_handoff whose try also publishes a
//     term durably (one statement, one WAL flush): the floor of Lead's
//     hand-off through lockgen's queue.
//   - floor_publish: one durable term publish on a raw connection, BEGIN;
//     UPDATE pgadvisory.fence SET token = nextval(...); COMMIT in one round
//     trip with synchronous_commit on (one WAL flush).
//
// The target is lead_handoff <= 1.5 x bare_handoff; a durable term
// costs one WAL flush that bare_handoff does not pay, so the ratio to
// bare_durable_handoff is reported too.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

func BenchmarkLeader(b *testing.B) {
	admin := migrated.DB(b)
	w := witness.Of(admin)
	lead := func(drv frontdoor.Driver, opts ...pgadvisory.LockerOption) benchCase {
		name := "lead_handoff_" + string(map[frontdoor.Driver]string{frontdoor.SQL: "stdlib", frontdoor.Pgx: "pgx"}[drv])
		if len(opts) > 0 {
			name += "_dedicated"
		}
		return benchCase{name, func(b *testing.B) {
			key := testdb.Key(b)
			var doors [2]frontdoor.Door
			for i := range doors {
				doors[i] = frontdoor.Open(b, drv, frontdoor.MaxConns(2)).WithLocker(opts...)
				if len(opts) > 0 {
					serverQueue(doors[i]) // today's election without lockgen's queue
				}
			}
			benchHandoff(b, w, key, func(ctx context.Context, i int, hold func()) error {
				return doors[i].Lead(ctx, pgadvisory.ID(key), func(context.Context, int64) error {
					hold()
					return nil
				})
			})
		}}
	}
	bare := func(durable bool) benchCase {
		name := "bare_handoff"
		if durable {
			name = "bare_durable_handoff"
		}
		return benchCase{name, func(b *testing.B) {
			key := testdb.Key(b)
			publish := floorPublishSQL(b, admin, key)
			var conns [2]*pgx.Conn
			for i := range conns {
				conns[i] = benchConn(b)
			}
			benchHandoff(b, w, key, func(ctx context.Context, i int, hold func()) error {
				c := conns[i]
				if _, err := c.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
					return err
				}
				if durable {
					if _, err := c.Exec(ctx, publish); err != nil {
						return err
					}
				}
				hold()
				_, err := c.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", key)
				return err
			})
		}}
	}
	session := benchCase{"session_handoff_pgx", func(b *testing.B) {
		key := testdb.Key(b)
		var doors [2]frontdoor.Door
		for i := range doors {
			doors[i] = frontdoor.Open(b, frontdoor.Pgx, frontdoor.MaxConns(2))
		}
		benchHandoff(b, w, key, func(ctx context.Context, i int, hold func()) error {
			return doors[i].RunSession(ctx, pgadvisory.ID(key), func(context.Context) error {
				hold()
				return nil
			}, pgadvisory.WithWait(0))
		})
	}}
	// notify: the floor of a hand-off to a waiter that holds no connection
	// while it waits. Each candidate has a worker connection and a
	// listening one. A candidate tries the lock (and, durable, publishes a
	// term in the same statement, one WAL flush when granted); refused, it
	// waits for a notification on its listening connection and tries
	// again. The holder releases with pg_advisory_unlock and pg_notify in
	// one statement: the release's NOTIFY, the waiter's wake-up and its
	// try, and nothing of lockgen's.
	notify := func(durable bool) benchCase {
		name := "notify_handoff"
		if durable {
			name = "notify_durable_handoff"
		}
		return benchCase{name, func(b *testing.B) {
			ctx := context.Background()
			key := testdb.Key(b)
			channel := "bench_notify_" + strconv.FormatInt(key, 10)
			k := strconv.FormatInt(key, 10)
			try := "SELECT pg_try_advisory_lock(" + k + ")"
			if durable {
				floorPublishSQL(b, admin, key)
				try = "WITH t AS (SELECT pg_try_advisory_lock(" + k + ") AS ok) UPDATE pgadvisory.fence AS f " +
					"SET token = nextval('pgadvisory.fencing_token_seq'), published_at = now() FROM t WHERE t.ok AND f.lock_id = " + k + " RETURNING t.ok"
			}
			release := "SELECT pg_advisory_unlock(" + k + "), pg_notify('" + channel + "', '')"
			var conns, listeners [2]*pgx.Conn
			for i := range conns {
				conns[i], listeners[i] = benchConn(b), benchConn(b)
				if _, err := listeners[i].Exec(ctx, "LISTEN "+channel); err != nil {
					b.Fatal(err)
				}
			}
			var waiting [2]atomic.Bool
			// The candidate that resigned tries again only once the other
			// holds the lock, as a waiter queued first is granted first.
			var holder atomic.Int32
			holder.Store(-1)
			benchHandoffWaiting(b, nil, func() {
				for deadline := time.Now().Add(time.Minute); !waiting[0].Load() && !waiting[1].Load(); time.Sleep(50 * time.Microsecond) {
					if time.Now().After(deadline) {
						b.Fatal("the next candidate does not wait for a notification")
					}
				}
			}, func(ctx context.Context, i int, hold func()) error {
				for holder.Load() == int32(i) && ctx.Err() == nil {
					time.Sleep(50 * time.Microsecond)
				}
				for {
					var ok bool
					if err := conns[i].QueryRow(ctx, try).Scan(&ok); err != nil && !errors.Is(err, pgx.ErrNoRows) {
						return err
					}
					if ok {
						holder.Store(int32(i))
						break
					}
					waiting[i].Store(true)
					_, err := listeners[i].WaitForNotification(ctx)
					waiting[i].Store(false)
					if err != nil {
						return err
					}
				}
				hold()
				_, err := conns[i].Exec(context.WithoutCancel(ctx), release)
				return err
			})
		}}
	}
	floor := benchCase{"floor_publish", func(b *testing.B) {
		ctx := context.Background()
		publish := floorPublishSQL(b, admin, testdb.Key(b))
		c := benchConn(b)
		for range 20 {
			if _, err := c.Exec(ctx, publish); err != nil {
				b.Fatal(err)
			}
		}
		for b.Loop() {
			if _, err := c.Exec(ctx, publish); err != nil {
				b.Fatal(err)
			}
		}
	}}
	runCases(b, bare(false), bare(true), notify(false), notify(true), session, lead(frontdoor.Pgx), lead(frontdoor.SQL),
		lead(frontdoor.Pgx, pgadvisory.WithSessionConns(0)), floor)
}

// floorPublishSQL is a durable term publish for key in one simple-protocol
// message (BEGIN; UPDATE …; COMMIT: one round trip, one WAL flush), after
// key's fence row is created.
func floorPublishSQL(b *testing.B, admin *sql.DB, key int64) string {
	b.Helper()
	if _, err := admin.Exec(`INSERT INTO pgadvisory.fence (lock_id, token) VALUES ($1, nextval('pgadvisory.fencing_token_seq'))`, key); err != nil {
		b.Fatal(err)
	}
	return "BEGIN; UPDATE pgadvisory.fence SET token = nextval('pgadvisory.fencing_token_seq'), published_at = now() WHERE lock_id = " +
		strconv.FormatInt(key, 10) + "; COMMIT"
}

// benchConn is a raw pgx connection to the package database with
// synchronous_commit on, closed when b ends.
func benchConn(b *testing.B) *pgx.Conn {
	b.Helper()
	c, err := pgx.Connect(context.Background(), testdb.URL(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close(context.Background()) })
	if _, err := c.Exec(context.Background(), "SET synchronous_commit = on"); err != nil {
		b.Fatal(err)
	}
	return c
}

// benchHandoff measures handoffs between two candidates, each running
// candidate(ctx, i, hold) in a loop: a candidate takes the leadership, calls
// hold, which returns when it is told to resign (or ctx ends), and gives
// the leadership up. An op is from the resign to the next candidate's hold.
func benchHandoff(b *testing.B, w *witness.Witness, key int64, candidate func(ctx context.Context, i int, hold func()) error) []time.Duration {
	return benchHandoffWaiting(b, nil, func() {
		// In lockgen's queue (Lead, RunSession) or the server's (bare).
		for deadline := time.Now().Add(time.Minute); waitingFor(b, w, []int64{key}) != 1; time.Sleep(50 * time.Microsecond) {
			if time.Now().After(deadline) {
				b.Fatal("the next candidate does not wait in the queue")
			}
		}
	}, candidate)
}

// benchHandoffWaiting is benchHandoff with queued, which returns once the
// candidate that does not hold the leadership waits for it (the timer is
// stopped meanwhile). It returns each op's duration. A candidate elected
// twice in a row (the other did not take over) fails b, unless retakes is
// given: then it is counted there, and the op lasts until it is elected.
func benchHandoffWaiting(b *testing.B, retakes *int, queued func(), candidate func(ctx context.Context, i int, hold func()) error) []time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan int)
	resign := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	errs := make(chan error, 2)
	for i := range 2 {
		hold := func() {
			select {
			case started <- i:
			case <-ctx.Done():
				return
			}
			select {
			case <-resign[i]:
			case <-ctx.Done():
			}
		}
		go func() {
			for ctx.Err() == nil {
				if err := candidate(ctx, i, hold); err != nil && ctx.Err() == nil {
					errs <- fmt.Errorf("candidate %d: %w", i, err)
					return
				}
			}
			errs <- nil
		}()
	}
	defer func() {
		cancel()
		for range 2 {
			if err := <-errs; err != nil {
				b.Error(err)
			}
		}
	}()
	next := func() int {
		select {
		case i := <-started:
			return i
		case err := <-errs:
			errs <- err
			b.Fatal(err)
		case <-time.After(time.Minute):
			b.Fatal("no candidate was elected within a minute")
		}
		return -1
	}
	holder := next()
	handoff := func() {
		resign[holder] <- struct{}{}
		got := next()
		if got == holder && retakes != nil {
			*retakes++
		} else if got == holder {
			b.Fatalf("candidate %d was elected twice in a row: the other did not wait", got)
		}
		holder = got
	}
	for range 10 { // warm-up: statement caches, pools
		queued()
		handoff()
	}
	queued()
	var ops []time.Duration
	for b.Loop() {
		start := time.Now()
		handoff()
		ops = append(ops, time.Since(start))
		b.StopTimer()
		queued()
		b.StartTimer()
	}
	b.StopTimer()
	return ops
}
