package pgadvisory_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/wirecount"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// sessionQueueConns are the two kinds of session-lock Lockers whose
// waiting calls queue: with shared session connections (the default) and
// with a connection of their own per lock (WithSessionConns(0)).
var sessionQueueConns = map[string][]pgadvisory.LockerOption{
	"shared-conns": nil,
	"own-conns":    {pgadvisory.WithSessionConns(0)},
}

// sessionSetModes are the kinds of session-lock calls on sets the queue
// tests run: all exclusive, all shared, and shared ones between exclusive
// ones (odd calls shared).
var sessionSetModes = []string{"plain", "shared", "mixed"}

// sessionSetCall is RunSession on set[0] with WithLocks(set[1:]...),
// WithWait(0), and WithShared when shared.
func sessionSetCall(ctx context.Context, door frontdoor.Door, set []int64, shared bool, fn func(context.Context) error, opts ...pgadvisory.Option) error {
	opts = append(opts, pgadvisory.WithLocks(set[1:]...))
	if shared {
		opts = append(opts, pgadvisory.WithShared())
	}
	return door.RunSession(ctx, pgadvisory.ID(set[0]), fn, opts...)
}

// TestSessionWaitSetsQueued: session locks on sets (RunSession with
// WithLocks and WithWait), exclusive, shared and the two mixed, wait in
// lockgen's queue as transaction locks do, on a Locker with shared
// session connections and on one without: locks A, B and C are held
// elsewhere; 10 calls on overlapping sets, in both orders of their IDs,
// join one at a time on a Locker whose pool has 4 connections. While all
// wait, the queues hold one row per lock of each call, the server shows
// at most 5 connections of the Locker and none waiting for a lock.
// Released, every call runs, none while another holds one of its locks
// unless both are shared, each after every earlier call that shares a
// lock with it ended unless both are shared, and shared calls held a
// lock together; every lock of a set is held by one backend while fn
// runs. The queues are empty afterwards.
func TestSessionWaitSetsQueued(t *testing.T) {
	admin := migrated.DB(t)
	for conns, lopts := range sessionQueueConns {
		for _, mode := range sessionSetModes {
			for _, driver := range frontdoor.Drivers {
				t.Run(fmt.Sprintf("%s/%s/%s", conns, mode, driver), func(t *testing.T) {
					testSessionWaitSetsQueued(t, admin, driver, mode, lopts)
				})
			}
		}
	}
}

func testSessionWaitSetsQueued(t *testing.T, admin *sql.DB, driver frontdoor.Driver, mode string, lopts []pgadvisory.LockerOption) {
	ctx := testdb.Context(t)
	a, b, c := testdb.Key(t), testdb.Key(t), testdb.Key(t)
	app := fmt.Sprintf("sessionsets_%d", a)
	door := queueDoor(t, driver, app, 4, append([]pgadvisory.LockerOption{orderInterval}, lopts...)...)
	releases := []func(){holdSession(t, admin, a), holdSession(t, admin, b), holdSession(t, admin, c)}
	w := witness.Of(admin)

	sets := [][]int64{{a, b}, {b, a}, {a}, {c, b}, {b}, {a, b, c}, {c}, {a, c}, {b, c}, {a}}
	run := newSetRun(sets)
	run.shared = make([]bool, len(sets))
	for i := range sets {
		run.shared[i] = mode == "shared" || mode == "mixed" && i%2 == 1
	}
	queuedSets(t, admin, app, []int64{a, b, c}, run, releases, func() {
		require.Zero(t, w.Locks(t, false, a, b, c), "no call waits in the server's queue")
	}, func(i int) error {
		set, fn := sets[i], run.sessionFn(i, 30*time.Millisecond)
		return sessionSetCall(ctx, door, set, run.shared[i], func(ctx context.Context) error {
			if held := w.Locks(t, true, set...); held < len(set) {
				return fmt.Errorf("call %d %v: %d of its locks held while fn runs", i, set, held)
			}
			return fn(ctx)
		}, pgadvisory.WithWait(0))
	})
	require.Zero(t, w.Locks(t, true, a, b, c), "nothing stays held")
}

// TestSessionWaitSetsCanceledLeavesNothing: a queued session-lock call on
// a set whose ctx ends removes its rows from every queue it joined; one
// whose WithWait timeout passes returns ErrLockTimeout and removes them
// too. While it waits for B (held elsewhere) it holds none of its locks:
// A is free for a call that does not wait. Once B is free the set is
// granted. Exclusive and shared, with and without shared session
// connections.
func TestSessionWaitSetsCanceledLeavesNothing(t *testing.T) {
	admin := migrated.DB(t)
	for conns, lopts := range sessionQueueConns {
		for _, shared := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/shared=%v", conns, shared), func(t *testing.T) {
				frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
					ctx := testdb.Context(t)
					a, b := testdb.Key(t), testdb.Key(t)
					release := holdSession(t, admin, b)
					fn := func(context.Context) error { return nil }

					cctx, cancel := context.WithCancel(ctx)
					done := make(chan error, 1)
					go func() { done <- sessionSetCall(cctx, door, []int64{a, b}, shared, fn, pgadvisory.WithWait(0)) }()
					require.Eventually(t, func() bool { return setRows(t, admin, a, b) == 2 }, 30*time.Second, 2*time.Millisecond, "queued")
					require.NoError(t, door.RunExclusive(ctx, a, func(frontdoor.Tx) error { return nil }), "the waiting set keeps none of its locks")
					cancel()
					require.ErrorIs(t, frontdoor.Await(t, done, "the canceled waiter"), context.Canceled)
					require.Zero(t, setRows(t, admin, a, b), "a canceled waiter leaves no row")

					err := sessionSetCall(ctx, door, []int64{a, b}, shared, fn, pgadvisory.WithWait(300*time.Millisecond))
					require.ErrorIs(t, err, pgadvisory.ErrLockTimeout)
					require.Zero(t, setRows(t, admin, a, b), "a timed-out waiter leaves no row")
					release()
					require.NoError(t, sessionSetCall(ctx, door, []int64{a, b}, shared, fn, pgadvisory.WithWait(0)))
					require.Zero(t, witness.Of(admin).Locks(t, true, a, b), "nothing stays held")
				}, frontdoor.Locker(lopts...))
			})
		}
	}
}

// TestSessionQueuedSetAndSharedWakes: the wake-ups of session locks on
// sets and shared ones, each waiter in another Locker than the holder, on
// Lockers whose waiters do not poll (a check interval of an hour, and the
// next poll slot an hour away once all are queued and their Lockers
// listen), so that only the server's NOTIFY and the waiters' own Locker
// can wake them.
//   - A set {K1, K2} taken through the queue is released: a waiter on K2
//     alone and one on K1 alone both run (the release names the head of
//     each lock's queue, not of the first one only).
//   - An exclusive holder taken through the queue is released with three
//     shared waiters behind it, two in one Locker and one in another: the
//     release names the first; its Locker's other waiter is woken by its
//     grant, the other Locker's by the NOTIFY naming a waiter not its own.
//     All three hold the lock together.
//
// With and without shared session connections.
func TestSessionQueuedSetAndSharedWakes(t *testing.T) {
	admin := migrated.DB(t)
	slow := pgadvisory.WithDefaultCheckInterval(time.Hour) // no polls
	for conns, lopts := range sessionQueueConns {
		t.Run(conns, func(t *testing.T) {
			frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
				ctx := testdb.Context(t)
				open := func() frontdoor.Door {
					return frontdoor.Open(t, drv, frontdoor.Locker(append([]pgadvisory.LockerOption{slow}, lopts...)...))
				}
				holder, b, c := open(), open(), open()
				k1, k2 := testdb.Key(t), testdb.Key(t)

				t.Run("set", func(t *testing.T) {
					in, out := make(chan struct{}), make(chan struct{})
					held := make(chan error, 1)
					go func() {
						held <- sessionSetCall(ctx, holder, []int64{k1, k2}, false, func(context.Context) error { close(in); <-out; return nil }, pgadvisory.WithWait(0))
					}()
					frontdoor.Await(t, in, "the set's holder")
					ran := make(chan int64, 2)
					ends := make(chan error, 2)
					for _, k := range []struct {
						door frontdoor.Door
						id   int64
					}{{b, k2}, {c, k1}} {
						go func() {
							ends <- k.door.RunSession(ctx, pgadvisory.ID(k.id), func(context.Context) error { ran <- k.id; return nil }, pgadvisory.WithWait(0))
						}()
					}
					require.Eventually(t, func() bool { return setRows(t, admin, k1, k2) == 2 && listening(b) && listening(c) }, 10*time.Second, 5*time.Millisecond)
					noPolls(b, c)
					close(out)
					require.NoError(t, frontdoor.Await(t, held, "the set's release"))
					got := map[int64]bool{}
					for range 2 {
						select {
						case id := <-ran:
							got[id] = true
						case <-time.After(10 * time.Second):
							t.Fatalf("a waiter was not woken by the set's release (woken: %v)", got)
						}
					}
					for range 2 {
						require.NoError(t, frontdoor.Await(t, ends, "a waiter's end"))
					}
					require.Zero(t, setRows(t, admin, k1, k2))
				})

				t.Run("shared", func(t *testing.T) {
					in, out := make(chan struct{}), make(chan struct{})
					held := make(chan error, 1)
					go func() {
						held <- holder.RunSession(ctx, pgadvisory.ID(k1), func(context.Context) error { close(in); <-out; return nil }, pgadvisory.WithWait(0))
					}()
					frontdoor.Await(t, in, "the exclusive holder")
					started := make(chan struct{}, 3)
					all := make(chan struct{})
					ends := make(chan error, 3)
					for i, door := range []frontdoor.Door{b, b, c} {
						go func() {
							ends <- door.RunSession(ctx, pgadvisory.ID(k1), func(context.Context) error {
								started <- struct{}{}
								select {
								case <-all:
									return nil
								case <-time.After(20 * time.Second):
									return fmt.Errorf("shared waiter %d: the others did not join it", i)
								}
							}, pgadvisory.WithWait(0), pgadvisory.WithShared())
						}()
						require.Eventually(t, func() bool { return queueRows(t, admin, k1) == i+1 && listening(door) }, 10*time.Second, 5*time.Millisecond)
					}
					noPolls(b, c)
					close(out)
					require.NoError(t, frontdoor.Await(t, held, "the exclusive release"))
					for i := range 3 {
						select {
						case <-started:
						case <-time.After(10 * time.Second):
							t.Fatalf("%d of 3 shared waiters woken by the release", i)
						}
					}
					// b's two may share a backend (its shared connection).
					require.GreaterOrEqual(t, witness.Of(admin).Locks(t, true, k1), 2, "the three hold the lock together")
					close(all)
					for range 3 {
						require.NoError(t, frontdoor.Await(t, ends, "a shared waiter's end"))
					}
					require.Zero(t, queueRows(t, admin, k1))
				})
			})
		})
	}
}

// noPolls keeps the waiters of doors' Lockers from polling for an hour
// (their next poll slot), once the polls already under way are done: from
// then on only a wake-up lets them try.
func noPolls(doors ...frontdoor.Door) {
	for _, door := range doors {
		if l := door.PgxLocker(); l != nil {
			pgadvisory.PollBacklogForTest(l, time.Hour)
		} else {
			pgadvisory.PollBacklogForTest(door.SQLLocker(), time.Hour)
		}
	}
	time.Sleep(100 * time.Millisecond)
}

// listening reports whether door's Locker's waiters are woken by NOTIFY
// now: once so, a wake-up can come only from a notification or a poll
// (the listening connection's start wakes every waiter once).
func listening(door frontdoor.Door) bool {
	if l := door.PgxLocker(); l != nil {
		return pgadvisory.ListeningForTest(l)
	}
	return pgadvisory.ListeningForTest(door.SQLLocker())
}

// TestSessionUnqueuedReleaseWakesOwnWaiters: the release of a session lock
// that did not come through the queue (RunSession without WithWait) sends
// no NOTIFY, but wakes its own Locker's waiters for the key at once: on a
// Locker whose waiters do not poll (a check interval of an hour, the next
// poll slot an hour away), a queued waiter runs once the holder returns.
// With and without shared session connections, one lock and a set.
func TestSessionUnqueuedReleaseWakesOwnWaiters(t *testing.T) {
	slow := pgadvisory.WithDefaultCheckInterval(time.Hour) // no polls
	admin := migrated.DB(t)
	for conns, lopts := range sessionQueueConns {
		t.Run(conns, func(t *testing.T) {
			frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
				ctx := testdb.Context(t)
				door := frontdoor.Open(t, drv, frontdoor.Locker(append([]pgadvisory.LockerOption{slow}, lopts...)...))
				for _, n := range []int{1, 3} {
					keys := make([]int64, n)
					for i := range keys {
						keys[i] = testdb.Key(t)
					}
					in, out := make(chan struct{}), make(chan struct{})
					held := make(chan error, 1)
					go func() {
						held <- sessionSetCall(ctx, door, keys, false, func(context.Context) error { close(in); <-out; return nil })
					}()
					frontdoor.Await(t, in, "the holder, which did not queue")
					ran, waited := make(chan struct{}), make(chan error, 1)
					go func() {
						waited <- sessionSetCall(ctx, door, keys, false, func(context.Context) error { close(ran); return nil }, pgadvisory.WithWait(0))
					}()
					require.Eventually(t, func() bool { return setRows(t, admin, keys...) == n }, 10*time.Second, 5*time.Millisecond)
					noPolls(door)
					close(out)
					require.NoError(t, frontdoor.Await(t, held, "the holder's release"))
					select {
					case <-ran:
					case <-time.After(10 * time.Second):
						t.Fatalf("set of %d: the waiter was not woken by its own Locker's release", n)
					}
					require.NoError(t, frontdoor.Await(t, waited, "the waiter's end"))
					require.Zero(t, setRows(t, admin, keys...))
				}
			})
		})
	}
}

// TestSessionWaitDefaultReadOnlySession: on connections whose transactions
// are read-only by default (default_transaction_read_only = on, as a
// reporting role may have), lockgen's queue cannot be written and lockgen
// does not override the setting: a waiting session lock (one lock, a set,
// a shared one), with and without shared session connections, waits in the
// server's queue instead, as before the queue existed, and runs once the
// holder releases; it failed with 25006 when its try had to join the queue.
func TestSessionWaitDefaultReadOnlySession(t *testing.T) {
	admin := migrated.DB(t)
	w := witness.Of(admin)
	for conns, lopts := range sessionQueueConns {
		t.Run(conns, func(t *testing.T) {
			frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
				ctx := testdb.Context(t)
				door := frontdoor.Open(t, drv, frontdoor.Locker(lopts...),
					frontdoor.Settings(map[string]string{"default_transaction_read_only": "on"}))
				for _, kind := range []struct {
					n      int
					shared bool
				}{{1, false}, {3, false}, {1, true}} {
					keys := make([]int64, kind.n)
					for i := range keys {
						keys[i] = testdb.Key(t)
					}
					release := holdSession(t, admin, keys[len(keys)-1])
					ran, done := make(chan struct{}), make(chan error, 1)
					go func() {
						done <- sessionSetCall(ctx, door, keys, kind.shared, func(context.Context) error { close(ran); return nil }, pgadvisory.WithWait(0))
					}()
					require.Eventually(t, func() bool { return w.Locks(t, false, keys...) >= 1 }, 30*time.Second, 2*time.Millisecond,
						"%d locks, shared %v: the call waits in the server's queue", kind.n, kind.shared)
					require.Zero(t, setRows(t, admin, keys...), "nothing in lockgen's queue")
					release()
					require.NoError(t, frontdoor.Await(t, done, "the waiting call"))
					frontdoor.Await(t, ran, "its fn")
					require.Zero(t, w.Locks(t, true, keys...), "nothing stays held")
				}
			})
		})
	}
}

// TestSessionReadOnlyFallbackKeepsNeighbours: a queued try that fails in
// wait_try (here 25006: a session read-only by default, whose try must
// join the queue behind an exclusive waiter of another Locker) took no
// lock, so the shared connection it ran on is not cleaned up: a shared
// lock of another call on that connection, on the same key, stays held
// (releasing "whatever the backend holds of the set" would have closed
// the connection and lost it), and the waiting call runs, in the server's
// queue, beside it.
func TestSessionReadOnlyFallbackKeepsNeighbours(t *testing.T) {
	admin := migrated.DB(t)
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		key := testdb.Key(t)
		door := frontdoor.Open(t, drv, frontdoor.Locker(pgadvisory.WithSessionConns(1)),
			frontdoor.Settings(map[string]string{"default_transaction_read_only": "on"}))
		other := frontdoor.Open(t, drv)

		in, out := make(chan struct{}), make(chan struct{})
		held := make(chan error, 1)
		go func() {
			held <- door.RunSession(ctx, pgadvisory.ID(key), func(ctx context.Context) error {
				close(in)
				select {
				case <-out:
					return nil
				case <-ctx.Done():
					return fmt.Errorf("the shared holder lost its lock: %w", context.Cause(ctx))
				}
			}, pgadvisory.WithShared())
		}()
		frontdoor.Await(t, in, "the shared holder")
		queued := make(chan error, 1)
		go func() {
			queued <- other.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error { return nil }, pgadvisory.WithWait(0))
		}()
		require.Eventually(t, func() bool { return queueRows(t, admin, key) == 1 }, 30*time.Second, 2*time.Millisecond, "the exclusive waiter is queued")

		require.NoError(t, door.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error { return nil },
			pgadvisory.WithShared(), pgadvisory.WithWait(10*time.Second)), "the read-only waiter runs beside the shared holder")
		close(out)
		require.NoError(t, frontdoor.Await(t, held, "the shared holder's end"))
		require.NoError(t, frontdoor.Await(t, queued, "the exclusive waiter's end"))
	})
}

// TestSessionWaitSerializableDefault: on sessions whose transactions are
// serializable by default (default_transaction_isolation = serializable),
// the queue statements of concurrent session waiters conflict (40001, at
// once with a few waiters); a try that fails so took nothing and is tried
// again. 16 goroutines on four Lockers make 20 waiting session calls each
// on one lock and on a set, both kinds of Locker: every call runs, none
// while another holds its lock, and the queues are empty afterwards. A
// Locker without shared connections, whose tries take pool connections,
// gives a connection whose try conflicted back to the pool: it opens no
// more connections than its pool holds (closing them made the pool open
// one per conflict). Each subtest takes about 5s, as at READ COMMITTED;
// before the queue's refreshes ran at READ COMMITTED and kept their
// connections, 50-110s (timing out under load).
func TestSessionWaitSerializableDefault(t *testing.T) {
	admin := migrated.DB(t)
	for conns, lopts := range sessionQueueConns {
		t.Run(conns, func(t *testing.T) {
			frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
				ctx := testdb.Context(t)
				own := len(lopts) > 0
				if !own {
					// More shared connections, more statements at once.
					lopts = []pgadvisory.LockerOption{pgadvisory.WithSessionConns(4)}
				}
				const poolSize = 12         // above the 8 goroutines of each Locker
				var doors [2]frontdoor.Door // two Lockers, as two processes
				var dials [2]*wirecount.Counter
				for i := range doors {
					dials[i] = wirecount.New()
					doors[i] = frontdoor.Open(t, drv, frontdoor.Locker(lopts...), frontdoor.MaxConns(poolSize),
						frontdoor.Settings(map[string]string{"default_transaction_isolation": "serializable"}),
						frontdoor.Configure(func(cfg *pgx.ConnConfig) { cfg.DialFunc = dials[i].Dial(cfg.DialFunc) }))
				}
				if own {
					defer func() {
						for i, d := range dials {
							// The pool's connections, the Locker's listening
							// connection, and one spare for a reconnection.
							require.LessOrEqual(t, d.Conns(), int64(poolSize+2), "connections opened by Locker %d", i)
						}
					}()
				}
				a, b := testdb.Key(t), testdb.Key(t)
				const goroutines, each = 16, 20
				var sets [][]int64
				for i := range goroutines * each {
					sets = append(sets, [][]int64{{a}, {a, b}}[i%2])
				}
				run := newSetRun(sets)
				concurrentSetCalls(t, admin, run, goroutines, each, []int64{a, b}, func(g, i int) error {
					return sessionSetCall(ctx, doors[g%len(doors)], sets[i], false, run.sessionFn(i, 0), pgadvisory.WithWait(0))
				})

			})
		})
	}
}

// TestSessionReleaseSerializationFailure: the release of a session lock
// taken through the queue (its unlock and the wake-up of the queue's head,
// which reads the queue, in one statement) that the server fails with a
// serialization failure (40001, as on a session serializable by default)
// finishes the release instead of reporting the lock lost, whether the
// failure came after the unlock ran or before: RunSession returns nil, the
// lock is free and the queue empty. The server's failure is the Locker's
// release statement rewritten to raise 40001 after its unlock, or in its
// place, for every kind of Locker and driver.
func TestSessionReleaseSerializationFailure(t *testing.T) {
	admin := migrated.DB(t)
	_, err := admin.Exec(`CREATE OR REPLACE FUNCTION public.lockgen_test_serialization_failure(n int) RETURNS int
LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'lockgen test: a serialization failure' USING ERRCODE = '40001'; END$$`)
	require.NoError(t, err)
	failures := map[string]func(query string) string{
		// The unlock runs, then the statement fails.
		"after-unlock": func(query string) string {
			return "SELECT public.lockgen_test_serialization_failure(r.n) FROM (" + query + ") AS r"
		},
		// The statement fails before its unlock runs (the unlock's
		// branch, which types the parameter, never runs): the backend
		// still holds the lock.
		"before-unlock": func(query string) string {
			return "SELECT public.lockgen_test_serialization_failure(0) UNION ALL SELECT r.n FROM (" + query + ") AS r WHERE false"
		},
	}
	for conns, lopts := range sessionQueueConns {
		for when, rewrite := range failures {
			t.Run(conns+"/"+when, func(t *testing.T) {
				frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
					ctx := testdb.Context(t)
					door := frontdoor.Open(t, drv, frontdoor.Locker(lopts...))
					var rewritten atomic.Int32
					counted := func(query string) string {
						rewritten.Add(1)
						return rewrite(query)
					}
					if l := door.PgxLocker(); l != nil {
						pgadvisory.ReleaseSQLForTest(l, counted)
					} else {
						pgadvisory.ReleaseSQLForTest(door.SQLLocker(), counted)
					}
					for _, set := range [][]int64{{testdb.Key(t)}, {testdb.Key(t), testdb.Key(t)}} {
						ran := false
						require.NoError(t, sessionSetCall(ctx, door, set, false, func(context.Context) error {
							ran = true
							return nil
						}, pgadvisory.WithWait(10*time.Second)), "the release of %v finished", set)
						require.True(t, ran)
						for _, key := range set {
							var free bool
							require.NoError(t, admin.QueryRow("SELECT pg_try_advisory_lock($1) AND pg_advisory_unlock($1)", key).Scan(&free))
							require.True(t, free, "lock %d is free after the release", key)
						}
						require.Zero(t, setRows(t, admin, set...), "the queues of %v are empty", set)
					}
					require.EqualValues(t, 2, rewritten.Load(), "both releases went through the failing statement")
				})
			})
		}
	}
}
