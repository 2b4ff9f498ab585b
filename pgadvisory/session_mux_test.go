package pgadvisory_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Session locks of one Locker share a few server connections (2 by
// default, WithSessionConns). The tests count the backends of a pool of
// their own, told apart by its application_name.

// muxDoor opens a pool of driver drv whose connections carry a unique
// application_name (returned), with n shared session connections (n < 0:
// the default).
func muxDoor(t *testing.T, drv frontdoor.Driver, n int, opts ...frontdoor.Option) (frontdoor.Door, string) {
	t.Helper()
	app := fmt.Sprintf("mux-%d", testdb.Key(t))
	opts = append([]frontdoor.Option{frontdoor.Settings(map[string]string{"application_name": app})}, opts...)
	door := frontdoor.Open(t, drv, opts...)
	if n >= 0 {
		door = door.WithLocker(pgadvisory.WithSessionConns(n))
	}
	return door, app
}

// backends counts the server backends whose application_name is app.
func backends(t testing.TB, w *witness.Witness, app string) int {
	t.Helper()
	var n int
	require.NoError(t, w.DB.QueryRow("SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE application_name = $1", app).Scan(&n))
	return n
}

// holdersOf maps each granted key of keys to the backend that holds it.
func holdersOf(t testing.TB, w *witness.Witness, keys []int64) map[int64]int64 {
	t.Helper()
	pids := map[int64]int64{}
	for _, h := range w.Holds(t, keys...) {
		if h.Granted {
			pids[h.Key] = int64(h.PID)
		}
	}
	return pids
}

// TestSessionManyLocksFewConns: 1,000 concurrent session locks, or
// leaderships, on distinct keys from one process are all granted at once
// (each leadership elected with its published term, CurrentLeader naming
// it) on at most 2 server connections; their connections go back to the
// pool afterwards. One table, one story, for RunSession and Lead. The
// control (SetSessionConns 0) takes one connection per call.
func TestSessionManyLocksFewConns(t *testing.T) {
	const calls = 1000
	w := witness.Of(migrated.DB(t))
	for _, tc := range []struct {
		name string
		hold func(ctx context.Context, door frontdoor.Door, key int64, fn func(ctx context.Context, term int64) error) error
		lead bool
	}{
		{"session", func(ctx context.Context, door frontdoor.Door, key int64, fn func(context.Context, int64) error) error {
			return door.RunSession(ctx, pgadvisory.ID(key), func(ctx context.Context) error { return fn(ctx, 0) }, pgadvisory.WithCheckInterval(100*time.Millisecond))
		}, false},
		{"lead", func(ctx context.Context, door frontdoor.Door, key int64, fn func(context.Context, int64) error) error {
			return door.Lead(ctx, pgadvisory.ID(key), fn, pgadvisory.WithCheckInterval(100*time.Millisecond))
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
				ctx := testdb.Context(t)
				door, app := muxDoor(t, drv, -1)
				base := testdb.Key(t) << 12
				keys := make([]int64, calls)
				for i := range keys {
					keys[i] = base + int64(i)
				}
				var inside sync.WaitGroup
				inside.Add(calls)
				release := make(chan struct{})
				errs := make(chan error, calls)
				terms := make([]int64, calls)
				for i, key := range keys {
					go func() {
						errs <- tc.hold(ctx, door, key, func(ctx context.Context, term int64) error {
							terms[i] = term
							inside.Done()
							select {
							case <-release:
								return nil
							case <-ctx.Done():
								return context.Cause(ctx)
							}
						})
					}()
				}
				waited := make(chan struct{})
				go func() { inside.Wait(); close(waited) }()
				frontdoor.Await(t, waited, "all calls inside fn")

				holders := holdersOf(t, w, keys)
				require.Len(t, holders, calls, "every lock is granted")
				pids := map[int64]bool{}
				for _, pid := range holders {
					pids[pid] = true
				}
				require.LessOrEqual(t, len(pids), 2, "backends holding the locks")
				require.LessOrEqual(t, backends(t, w, app), 2, "backends of the pool")
				if tc.lead {
					for _, i := range []int{0, calls / 2, calls - 1} {
						leader, err := door.CurrentLeader(ctx, pgadvisory.ID(keys[i]))
						require.NoError(t, err)
						require.Equal(t, terms[i], leader.Term)
						require.Equal(t, holders[keys[i]], int64(leader.PID))
					}
				}
				time.Sleep(300 * time.Millisecond) // a few checks of all the locks
				close(release)
				for range calls {
					require.NoError(t, frontdoor.Await(t, errs, "a call's end"))
				}
				require.Empty(t, w.Holds(t, keys...))
				frontdoor.RequireIdle(t, door)
			})
		})
	}

	t.Run("control: a connection per call", func(t *testing.T) {
		ctx := testdb.Context(t)
		door, app := muxDoor(t, frontdoor.Pgx, 0)
		const n = 5
		var inside sync.WaitGroup
		inside.Add(n)
		release := make(chan struct{})
		errs := make(chan error, n)
		for i := range n {
			key := testdb.Key(t) + int64(i)<<40
			go func() {
				errs <- door.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error { inside.Done(); <-release; return nil })
			}()
		}
		inside.Wait()
		require.Equal(t, n, backends(t, w, app))
		close(release)
		for range n {
			require.NoError(t, frontdoor.Await(t, errs, "a call's end"))
		}
	})
}

// TestSessionWaiterDoesNotBlockItsConnection: a call that waits for a
// lock held elsewhere (WithWait) waits in lockgen's queue, holding no
// connection (none of the pool's backends is in the server's lock queue;
// the pool's backends are the shared connection and the Locker's
// listening one): a lock on the single shared connection is taken,
// checked and released meanwhile. The waiter is granted, on the shared
// connection, when the holder unlocks, and when the holder's backend
// dies.
func TestSessionWaiterDoesNotBlockItsConnection(t *testing.T) {
	w := witness.Of(migrated.DB(t))
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		for _, how := range []string{"holder unlocks", "holder's backend dies"} {
			t.Run(how, func(t *testing.T) {
				ctx := testdb.Context(t)
				door, app := muxDoor(t, drv, 1)
				key, other := testdb.Key(t), testdb.Key(t)+1<<40
				holder, err := pgx.Connect(ctx, testdb.URL(t))
				require.NoError(t, err)
				defer func() { _ = holder.Close(context.Background()) }()
				var holderPID int64
				require.NoError(t, holder.QueryRow(ctx, "SELECT pg_backend_pid() FROM (SELECT pg_advisory_lock($1)) AS l", key).Scan(&holderPID))

				// The shared connection exists and holds a lock already.
				sharedIn, sharedOut := make(chan struct{}), make(chan struct{})
				sharedErr := make(chan error, 1)
				go func() {
					sharedErr <- door.RunSession(ctx, pgadvisory.ID(key+2<<40), func(context.Context) error { close(sharedIn); <-sharedOut; return nil })
				}()
				frontdoor.Await(t, sharedIn, "the first lock")

				granted := make(chan struct{})
				var waiterPID atomic.Int64
				waitErr := make(chan error, 1)
				go func() {
					waitErr <- door.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error {
						waiterPID.Store(holdersOf(t, w, []int64{key})[key])
						close(granted)
						return nil
					}, pgadvisory.WithWait(0))
				}()
				require.Eventually(t, func() bool { return queueRows(t, w.DB, key) == 1 }, 30*time.Second, 5*time.Millisecond)
				require.Zero(t, w.BlockedBy(t, holderPID, "%"), "nobody waits in the server's lock queue")
				require.LessOrEqual(t, backends(t, w, app), 2, "the shared connection and the listening one")

				// Another lock on the shared connection while the waiter waits.
				checks := 0
				require.NoError(t, door.RunSession(ctx, pgadvisory.ID(other), func(ctx context.Context) error {
					require.Equal(t, holdersOf(t, w, []int64{key + 2<<40})[key+2<<40], holdersOf(t, w, []int64{other})[other],
						"both locks on the shared connection")
					for range 5 {
						select {
						case <-ctx.Done():
							return context.Cause(ctx)
						case <-time.After(40 * time.Millisecond):
							checks++
						}
					}
					return nil
				}, pgadvisory.WithCheckInterval(10*time.Millisecond)))
				require.Equal(t, 5, checks)
				select {
				case <-granted:
					t.Fatal("the waiter was granted while the lock was held")
				default:
				}

				if how == "holder unlocks" {
					_, err = holder.Exec(ctx, "SELECT pg_advisory_unlock($1)", key)
				} else {
					_, err = w.DB.ExecContext(ctx, "SELECT pg_terminate_backend($1)", holderPID)
				}
				require.NoError(t, err)
				frontdoor.Await(t, granted, "the waiter's grant")
				require.Equal(t, holdersOf(t, w, []int64{key + 2<<40})[key+2<<40], waiterPID.Load(), "granted on the shared connection")
				require.NoError(t, frontdoor.Await(t, waitErr, "the waiter's end"))
				close(sharedOut)
				require.NoError(t, frontdoor.Await(t, sharedErr, "the shared call's end"))
				require.Empty(t, w.Holds(t, key, other, key+2<<40))
				frontdoor.RequireIdle(t, door)
			})
		}
	})
}

// TestSessionSameKeyInProcess: advisory locks are re-entrant within a
// server session, so two calls of this process that share a connection
// would both be granted the same key. The key table makes a key held by
// another call of this process contended: ErrLocked without WithWait, a
// wait with it; for sets that overlap, and shared against exclusive. The
// control shows the trap: one server session is granted the same key
// twice.
func TestSessionSameKeyInProcess(t *testing.T) {
	w := witness.Of(migrated.DB(t))
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		door, _ := muxDoor(t, drv, 1)
		// hold runs a call that holds its locks until the returned func is
		// called, which returns the call's error.
		hold := func(t *testing.T, key int64, opts ...pgadvisory.Option) func() error {
			in, out, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
			go func() {
				done <- door.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error { close(in); <-out; return nil }, opts...)
			}()
			frontdoor.Await(t, in, "the holder")
			return func() error { close(out); return frontdoor.Await(t, done, "the holder's return") }
		}
		requireLocked := func(t *testing.T, key int64, opts ...pgadvisory.Option) {
			t.Helper()
			err := door.RunSession(ctx, pgadvisory.ID(key), notCalled(t), opts...)
			pe := sqlstate.RequireTyped(t, err, pgadvisory.ErrLocked, "lock", "")
			require.NotNil(t, pe)
		}

		t.Run("same key", func(t *testing.T) {
			key := testdb.Key(t)
			end := hold(t, key)
			requireLocked(t, key)
			require.NoError(t, end())
			require.Empty(t, w.Holds(t, key))
		})
		t.Run("same key, waiting", func(t *testing.T) {
			key := testdb.Key(t)
			var holderReturned atomic.Bool
			in, out, held := make(chan struct{}), make(chan struct{}), make(chan error, 1)
			go func() {
				held <- door.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error {
					close(in)
					<-out
					holderReturned.Store(true)
					return nil
				})
			}()
			frontdoor.Await(t, in, "the holder")
			granted := make(chan error, 1)
			go func() {
				granted <- door.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error {
					if !holderReturned.Load() {
						return errors.New("the waiter ran while the holder's fn ran")
					}
					return nil
				}, pgadvisory.WithWait(0))
			}()
			require.Eventually(t, func() bool { return queueRows(t, w.DB, key) == 1 }, 30*time.Second, 5*time.Millisecond,
				"the waiter queues behind the holder")
			require.Len(t, w.Holds(t, key), 1, "in lockgen's queue, not the server's")
			select {
			case err := <-granted:
				t.Fatalf("the waiter ended while the key was held in this process: %v", err)
			case <-time.After(200 * time.Millisecond):
			}
			close(out)
			require.NoError(t, frontdoor.Await(t, held, "the holder"))
			require.NoError(t, frontdoor.Await(t, granted, "the waiter"))
			require.Empty(t, w.Holds(t, key))
		})
		t.Run("same key, wait times out", func(t *testing.T) {
			key := testdb.Key(t)
			end := hold(t, key)
			err := door.RunSession(ctx, pgadvisory.ID(key), notCalled(t), pgadvisory.WithWait(100*time.Millisecond))
			// Queued, the timeout is the call's own: no SQLSTATE.
			sqlstate.RequireTyped(t, err, pgadvisory.ErrLockTimeout, "lock", "")
			require.Zero(t, queueRows(t, w.DB, key), "the timed-out waiter left the queue")
			require.NoError(t, end())
		})
		t.Run("overlapping sets", func(t *testing.T) {
			key := testdb.Key(t)
			end := hold(t, key, pgadvisory.WithLocks(key+1, key+2))
			requireLocked(t, key+3, pgadvisory.WithLocks(key+2, key+4))
			require.Len(t, w.Holds(t, key, key+1, key+2, key+3, key+4), 3, "the loser took nothing")
			require.NoError(t, door.RunSession(ctx, pgadvisory.ID(key+3), func(context.Context) error { return nil }, pgadvisory.WithLocks(key+4)),
				"a disjoint set is free")
			require.NoError(t, end())
			require.Empty(t, w.Holds(t, key, key+1, key+2, key+3, key+4))
		})
		t.Run("shared and exclusive", func(t *testing.T) {
			key := testdb.Key(t)
			end := hold(t, key, pgadvisory.WithShared())
			end2 := hold(t, key, pgadvisory.WithShared())
			requireLocked(t, key)
			require.NoError(t, end())
			requireLocked(t, key)
			require.NoError(t, end2())
			end = hold(t, key)
			requireLocked(t, key, pgadvisory.WithShared())
			require.NoError(t, end())
			require.Empty(t, w.Holds(t, key))
		})
		t.Run("control: one server session is granted a key twice", func(t *testing.T) {
			key := testdb.Key(t)
			conn, err := w.DB.Conn(ctx)
			require.NoError(t, err)
			defer conn.Close()
			var first, second bool
			require.NoError(t, conn.QueryRowContext(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&first))
			require.NoError(t, conn.QueryRowContext(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&second))
			require.True(t, first && second)
			_, err = conn.ExecContext(ctx, "SELECT pg_advisory_unlock_all()")
			require.NoError(t, err)
		})
	})
}

// TestSessionPoolCloseAfterCalls: once the calls ended, the shared
// connections are back in the pool, and closing it does not hang.
func TestSessionPoolCloseAfterCalls(t *testing.T) {
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		door, _ := muxDoor(t, drv, 2)
		var wg sync.WaitGroup
		for i := range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				require.NoError(t, door.RunSession(ctx, pgadvisory.ID(testdb.Key(t)+int64(i)<<40), func(context.Context) error {
					time.Sleep(10 * time.Millisecond)
					return nil
				}))
			}()
		}
		wg.Wait()
		frontdoor.RequireIdle(t, door)
		closed := make(chan struct{})
		go func() {
			if door.Driver == frontdoor.SQL {
				_ = door.DB().Close()
			} else {
				door.Pool().Close()
			}
			close(closed)
		}()
		frontdoor.Await(t, closed, "the pool's Close")
	})
}

// TestSetSessionConnsRefusals: a negative number and a nil pool are
// refused.
func TestSetSessionConnsRefusals(t *testing.T) {
	err := pgadvisory.SetSessionConns(nil, 2)
	require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument)
	err = pgadvisory.SetSessionConnsPgx(nil, 2)
	require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument)
	err = pgadvisory.SetSessionConns(testdb.DB(t), -1)
	require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument)
	require.ErrorContains(t, err, "pgadvisory: ")
	require.ErrorContains(t, err, "negative")
}

// TestSharedConnKilled: killing the backend of one shared connection ends
// exactly the session locks and leaderships on it (their contexts canceled
// with ErrLockLost, the call's error Op "watch"; a deposed leader's lock has
// no leader), while those on the other connection go on. One table, one
// story, for RunSession and Lead.
func TestSharedConnKilled(t *testing.T) {
	w := witness.Of(migrated.DB(t))
	for _, tc := range []struct {
		name string
		hold func(ctx context.Context, door frontdoor.Door, key int64, fn func(context.Context) error) error
		lead bool
	}{
		{"session", func(ctx context.Context, door frontdoor.Door, key int64, fn func(context.Context) error) error {
			return door.RunSession(ctx, pgadvisory.ID(key), fn, pgadvisory.WithCheckInterval(50*time.Millisecond))
		}, false},
		{"lead", func(ctx context.Context, door frontdoor.Door, key int64, fn func(context.Context) error) error {
			return door.Lead(ctx, pgadvisory.ID(key), func(ctx context.Context, _ int64) error { return fn(ctx) }, pgadvisory.WithCheckInterval(50*time.Millisecond))
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
				ctx := testdb.Context(t)
				door, _ := muxDoor(t, drv, 2)
				const calls = 20
				keys := make([]int64, calls)
				base := testdb.Key(t) << 8
				var inside sync.WaitGroup
				inside.Add(calls)
				release := make(chan struct{})
				type result struct {
					key   int64
					err   error
					cause error
				}
				results := make(chan result, calls)
				for i := range keys {
					keys[i] = base + int64(i)
					key := keys[i]
					go func() {
						var cause error
						err := tc.hold(ctx, door, key, func(ctx context.Context) error {
							inside.Done()
							select {
							case <-release:
								return nil
							case <-ctx.Done():
								cause = context.Cause(ctx)
								return ctx.Err()
							}
						})
						results <- result{key, err, cause}
					}()
				}
				done := make(chan struct{})
				go func() { inside.Wait(); close(done) }()
				frontdoor.Await(t, done, "every call holds its lock")
				holders := holdersOf(t, w, keys)
				require.Len(t, holders, calls)
				byPID := map[int64][]int64{}
				for key, pid := range holders {
					byPID[pid] = append(byPID[pid], key)
				}
				require.Len(t, byPID, 2, "the locks are spread over both connections")
				var victim int64
				for pid := range byPID {
					victim = pid
					break
				}
				doomed := map[int64]bool{}
				for _, key := range byPID[victim] {
					doomed[key] = true
				}
				var ok bool
				require.NoError(t, w.DB.QueryRow("SELECT pg_terminate_backend($1)", victim).Scan(&ok))
				require.True(t, ok)
				for range doomed {
					r := frontdoor.Await(t, results, "a canceled call")
					require.True(t, doomed[r.key], "call on key %d, on the surviving connection, was canceled: %v", r.key, r.err)
					require.ErrorIs(t, r.cause, pgadvisory.ErrLockLost)
					require.ErrorIs(t, r.err, pgadvisory.ErrLockLost)
					var pe *pgadvisory.Error
					require.ErrorAs(t, r.err, &pe)
					require.Equal(t, pgadvisory.OpWatch, pe.Op)
					require.Equal(t, []int64{r.key}, pe.LockIDs)
					if tc.lead {
						_, err := door.CurrentLeader(ctx, pgadvisory.ID(r.key))
						require.ErrorIs(t, err, pgadvisory.ErrNoLeader)
					}
				}
				time.Sleep(300 * time.Millisecond) // six more checks of the survivors
				select {
				case r := <-results:
					t.Fatalf("call on key %d ended although its connection lives: %v", r.key, r.err)
				default:
				}
				survivors := holdersOf(t, w, keys)
				require.Len(t, survivors, calls-len(doomed))
				if tc.lead {
					for key, pid := range survivors {
						leader, err := door.CurrentLeader(ctx, pgadvisory.ID(key))
						require.NoError(t, err)
						require.Equal(t, pid, int64(leader.PID))
					}
				}
				close(release)
				for range calls - len(doomed) {
					r := frontdoor.Await(t, results, "a surviving call")
					require.False(t, doomed[r.key])
					require.NoError(t, r.err)
				}
				require.Empty(t, w.Holds(t, keys...))
				frontdoor.RequireIdle(t, door)
			})
		})
	}
}
