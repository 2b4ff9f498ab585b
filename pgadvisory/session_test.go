package pgadvisory_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Tests of the session locks of both drivers' Lockers (RunSession). Every
// test body runs once per driver; the "other" door is the opposite one, so
// exclusion is checked across drivers, and transaction locks are taken
// through the Lockers too.
// Who holds what is read from pg_locks (witness.Holds), never inferred from
// try-lock results alone: a session lock leaked on a pooled connection is
// re-entrant for that connection, so only pg_locks shows it reliably.
// This file: a session lock excludes everyone else while fn runs (shared
// holders excepted), with the helpers of the family at its end;
// session_release_test.go and session_lost_test.go hold the other stories.

func TestSessionExcludesWhileFnRuns(t *testing.T) {
	forEachSessionDoor(t, 0, func(t *testing.T, e *sessionPools, door, other frontdoor.Door) {
		ctx := testdb.Context(t)
		key := testdb.Key(t)
		var txids []int64
		err := door.RunSession(ctx, pgadvisory.ID(key), func(ctx context.Context) error {
			holder := e.w.Holder(t, key)
			require.Equal(t, "ExclusiveLock", holder.Mode)
			for range 3 {
				// fn's own work: a transaction of its own on another connection.
				tx, err := e.db.BeginTx(ctx, nil)
				require.NoError(t, err)
				var txid int64
				require.NoError(t, tx.QueryRowContext(ctx, "SELECT txid_current()").Scan(&txid))
				require.NoError(t, tx.Commit())
				txids = append(txids, txid)

				// Everyone else is excluded between and after those transactions.
				require.ErrorIs(t, other.RunExclusive(ctx, key, func(frontdoor.Tx) error {
					t.Error("the other driver's RunExclusive ran under a held session lock")
					return nil
				}), pgadvisory.ErrLocked)
				require.ErrorIs(t, door.RunExclusive(ctx, key, func(frontdoor.Tx) error {
					t.Error("RunExclusive ran under a held session lock")
					return nil
				}), pgadvisory.ErrLocked)
				require.ErrorIs(t, door.RunSession(ctx, pgadvisory.ID(key), notCalled(t)), pgadvisory.ErrLocked)
				require.ErrorIs(t, other.RunSession(ctx, pgadvisory.ID(key), notCalled(t)), pgadvisory.ErrLocked)
				require.ErrorIs(t, other.RunSession(ctx, pgadvisory.ID(key), notCalled(t), pgadvisory.WithShared()), pgadvisory.ErrLocked)
				// Still the same single holder.
				require.Equal(t, holder.PID, e.w.Holder(t, key).PID)
			}
			return nil
		})
		require.NoError(t, err)
		require.Len(t, txids, 3)
		require.NotEqual(t, txids[0], txids[2], "fn's work ran in separate transactions")
		// Control: the same checks succeed once the session is over.
		requireSessionFree(t, e, other, key)
	})
}

func TestSessionContention(t *testing.T) {
	forEachSessionDoor(t, 0, func(t *testing.T, e *sessionPools, door, other frontdoor.Door) {
		ctx := testdb.Context(t)
		t.Run("transaction lock holds it", func(t *testing.T) {
			key := testdb.Key(t)
			require.NoError(t, other.RunExclusive(ctx, key, func(frontdoor.Tx) error {
				holder := e.w.Holder(t, key)
				err := door.RunSession(ctx, pgadvisory.ID(key), notCalled(t))
				require.ErrorIs(t, err, pgadvisory.ErrLocked, "ErrLocked is returned as is")
				// The loser took nothing.
				require.Equal(t, holder.PID, e.w.Holder(t, key).PID)
				return nil
			}))
			requireSessionFree(t, e, other, key)
		})
		t.Run("session lock holds it", func(t *testing.T) {
			key := testdb.Key(t)
			require.NoError(t, other.RunSession(ctx, pgadvisory.ID(key), func(ctx context.Context) error {
				holder := e.w.Holder(t, key)
				require.ErrorIs(t, door.RunSession(ctx, pgadvisory.ID(key), notCalled(t)), pgadvisory.ErrLocked)
				require.ErrorIs(t, door.RunSession(ctx, pgadvisory.ID(key), notCalled(t), pgadvisory.WithShared()), pgadvisory.ErrLocked)
				require.Equal(t, holder.PID, e.w.Holder(t, key).PID)
				return nil
			}))
			requireSessionFree(t, e, other, key)
		})
		t.Run("observer sees contention", func(t *testing.T) {
			key := testdb.Key(t)
			var events []pgadvisory.Event
			require.NoError(t, other.RunSession(ctx, pgadvisory.ID(key), func(ctx context.Context) error {
				err := door.RunSession(ctx, pgadvisory.ID(key), notCalled(t), pgadvisory.WithObserver(func(ev pgadvisory.Event) { events = append(events, ev) }))
				require.ErrorIs(t, err, pgadvisory.ErrLocked)
				return nil
			}))
			require.Len(t, events, 1)
			require.Equal(t, pgadvisory.EventContended, events[0].Kind)
			require.True(t, events[0].Session)
			require.ErrorIs(t, events[0].Err, pgadvisory.ErrLocked)
		})
	})
}

func TestSessionShared(t *testing.T) {
	forEachSessionDoor(t, 0, func(t *testing.T, e *sessionPools, door, other frontdoor.Door) {
		ctx := testdb.Context(t)
		key := testdb.Key(t)
		readers := 0
		require.NoError(t, door.RunSession(ctx, pgadvisory.ID(key), func(ctx context.Context) error {
			require.Equal(t, "ShareLock", e.w.Holder(t, key).Mode)
			// Another reader gets in, on either front door.
			require.NoError(t, other.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error {
				readers++
				holds := e.w.Holds(t, key)
				require.Len(t, holds, 2, "two shared holders: %+v", holds)
				for _, h := range holds {
					require.Equal(t, "ShareLock", h.Mode)
				}
				return nil
			}, pgadvisory.WithShared()))
			require.NoError(t, other.RunExclusive(ctx, key, func(frontdoor.Tx) error { readers++; return nil }, pgadvisory.WithShared()))
			// Writers are excluded.
			require.ErrorIs(t, other.RunSession(ctx, pgadvisory.ID(key), notCalled(t)), pgadvisory.ErrLocked)
			require.ErrorIs(t, door.RunExclusive(ctx, key, func(frontdoor.Tx) error {
				t.Error("exclusive transaction lock ran under a shared session lock")
				return nil
			}), pgadvisory.ErrLocked)
			return nil
		}, pgadvisory.WithShared()))
		require.Equal(t, 2, readers)
		requireSessionFree(t, e, other, key)

		// Control: an exclusive session excludes readers.
		require.NoError(t, door.RunSession(ctx, pgadvisory.ID(key), func(ctx context.Context) error {
			require.ErrorIs(t, other.RunSession(ctx, pgadvisory.ID(key), notCalled(t), pgadvisory.WithShared()), pgadvisory.ErrLocked)
			return nil
		}))
		requireSessionFree(t, e, other, key)
	})
}

func TestSessionMultipleLocks(t *testing.T) {
	forEachSessionDoor(t, 0, func(t *testing.T, e *sessionPools, door, other frontdoor.Door) {
		ctx := testdb.Context(t)
		k1, k2, k3 := testdb.Key(t), testdb.Key(t), testdb.Key(t)

		t.Run("all held while fn runs", func(t *testing.T) {
			require.NoError(t, door.RunSession(ctx, pgadvisory.ID(k1), func(ctx context.Context) error {
				holds := e.w.Holds(t, k1, k2, k3)
				require.Len(t, holds, 3, "%+v", holds)
				for _, h := range holds {
					require.Equal(t, holds[0].PID, h.PID, "one backend holds the set")
				}
				for _, k := range []int64{k1, k2, k3} {
					require.ErrorIs(t, other.RunSession(ctx, pgadvisory.ID(k), notCalled(t)), pgadvisory.ErrLocked)
				}
				return nil
			}, pgadvisory.WithLocks(k3, k2, k2)))
			require.Empty(t, e.w.Holds(t, k1, k2, k3))
		})

		t.Run("none after a partial grant", func(t *testing.T) {
			// k3, the highest key, is held elsewhere: the set's statement takes
			// k1 and k2 before it finds k3 taken.
			require.NoError(t, other.RunExclusive(ctx, k3, func(frontdoor.Tx) error {
				holder := e.w.Holder(t, k3)
				for range 3 {
					err := door.RunSession(ctx, pgadvisory.ID(k1), notCalled(t), pgadvisory.WithLocks(k2, k3))
					require.ErrorIs(t, err, pgadvisory.ErrLocked)
					// Nothing of the set stays locked on any connection,
					// pooled or not.
					require.Empty(t, e.w.Holds(t, k1, k2))
					require.Equal(t, holder.PID, e.w.Holder(t, k3).PID)
				}
				// The rest of the set is free for others.
				require.NoError(t, other.RunSession(ctx, pgadvisory.ID(k1), func(context.Context) error { return nil }, pgadvisory.WithLocks(k2)))
				return nil
			}))
			require.Empty(t, e.w.Holds(t, k1, k2, k3))
		})

		t.Run("control: a partial grant is real and visible", func(t *testing.T) {
			// The same statement shape by hand, without the runtime's cleanup,
			// leaves k1 and k2 locked on an idle connection: what the test
			// above checks does not happen.
			require.NoError(t, other.RunExclusive(ctx, k3, func(frontdoor.Tx) error {
				conn, err := e.db.Conn(ctx)
				require.NoError(t, err)
				defer func() {
					_, _ = conn.ExecContext(ctx, "SELECT pg_advisory_unlock_all()")
					_ = conn.Close()
				}()
				var granted bool
				require.NoError(t, conn.QueryRowContext(ctx,
					"SELECT pg_try_advisory_lock($1) AND pg_try_advisory_lock($2) AND pg_try_advisory_lock($3)",
					k1, k2, k3).Scan(&granted))
				require.False(t, granted)
				holds := e.w.Holds(t, k1, k2)
				require.Len(t, holds, 2, "%+v", holds)
				require.Equal(t, "idle", holds[0].State)
				return nil
			}))
			require.Empty(t, e.w.Holds(t, k1, k2, k3))
		})
	})
}

// sessionPools are one test's pools: db for RunSession, RunExclusive and
// the witness's pg_locks probes, pool for RunSessionPgx and RunExclusivePgx.
type sessionPools struct {
	db   *sql.DB
	pool *pgxpool.Pool
	w    *witness.Witness // on db
}

// forEachSessionDoor runs body for each front door with fresh pools
// (maxConns 0 keeps frontdoor's default size). door is the door under test,
// other the opposite one.
func forEachSessionDoor(t *testing.T, maxConns int, body func(t *testing.T, e *sessionPools, door, other frontdoor.Door)) {
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		var opts []frontdoor.Option
		if maxConns > 0 {
			opts = append(opts, frontdoor.MaxConns(maxConns))
		}
		doors := map[frontdoor.Driver]frontdoor.Door{}
		for _, d := range frontdoor.Drivers {
			doors[d] = frontdoor.Open(t, d, opts...)
		}
		e := &sessionPools{db: doors[frontdoor.SQL].DB(), pool: doors[frontdoor.Pgx].Pool()}
		e.w = witness.Of(e.db)
		other := doors[frontdoor.SQL]
		if drv == frontdoor.SQL {
			other = doors[frontdoor.Pgx]
		}
		body(t, e, doors[drv], other)
	})
}

// notCalled is a session fn that fails the test if it runs.
func notCalled(t *testing.T) func(context.Context) error {
	return func(context.Context) error {
		t.Error("fn was called although the lock is held elsewhere")
		return nil
	}
}

// requireSessionFree checks that nobody holds key, and that a transaction
// lock and another session on it succeed at once.
func requireSessionFree(t *testing.T, e *sessionPools, other frontdoor.Door, key int64) {
	t.Helper()
	ctx := testdb.Context(t)
	require.Empty(t, e.w.Holds(t, key))
	called := false
	require.NoError(t, other.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error { called = true; return nil }))
	require.True(t, called)
	require.NoError(t, other.RunExclusive(ctx, key, func(frontdoor.Tx) error { return nil }))
	require.Empty(t, e.w.Holds(t, key))
}

// TestSessionFullPoolUsesASharedConnection: a pool of 2 connections, one
// holding a session lock on a shared connection, two calls waiting for the
// same key (exclusive and shared: both wait in lockgen's queue, holding no
// connection, which this checks first), and the other connection taken by
// the application. A non-waiting RunSession on a free key must run on the
// open shared connection instead of waiting for a pool connection (it
// hung until its ctx ended). The control: a Locker whose session locks
// each take a connection of their own (WithSessionConns(0)) has to wait
// for the full pool, and its ctx error says that it waited for a pool
// connection.
func TestSessionFullPoolUsesASharedConnection(t *testing.T) {
	ctx := testdb.Context(t)
	admin := migrated.DB(t)
	holdKey, freeKey := testdb.Key(t), testdb.Key(t)
	db := testdb.DB(t)
	db.SetMaxOpenConns(2)
	l, err := pgadvisory.New(pgadvisory.Stdlib(db))
	require.NoError(t, err)

	held, release := make(chan struct{}), make(chan struct{})
	holder := make(chan error, 1)
	go func() {
		holder <- l.RunSession(ctx, pgadvisory.ID(holdKey), func(context.Context) error {
			close(held)
			<-release
			return nil
		})
	}()
	frontdoor.Await(t, held, "the holder's lock")
	queued := make(chan error, 1)
	go func() {
		queued <- l.RunSession(ctx, pgadvisory.ID(holdKey), func(context.Context) error { return nil }, pgadvisory.WithWait(0))
	}()
	require.Eventually(t, func() bool { return queueRows(t, admin, holdKey) == 1 }, 20*time.Second, 10*time.Millisecond,
		"the exclusive waiter is queued")
	// Its try's connection goes back to the pool just after the row commits.
	require.Eventually(t, func() bool { return db.Stats().InUse == 1 }, 20*time.Second, time.Millisecond,
		"the queued waiter holds no connection")
	waiter := make(chan error, 1)
	go func() {
		waiter <- l.RunSession(ctx, pgadvisory.ID(holdKey), func(context.Context) error { return nil }, pgadvisory.WithWait(0), pgadvisory.WithShared())
	}()
	require.Eventually(t, func() bool { return queueRows(t, admin, holdKey) == 2 }, 20*time.Second, 10*time.Millisecond,
		"the shared waiter is queued")
	require.Eventually(t, func() bool { return db.Stats().InUse == 1 }, 20*time.Second, time.Millisecond,
		"the queued waiters hold no connection")
	require.Zero(t, witness.Of(admin).Locks(t, false, holdKey), "nobody waits in the server's queue")
	app, err := db.Conn(ctx)
	require.NoError(t, err)
	defer app.Close()
	require.Equal(t, 2, db.Stats().InUse, "the reproduction: the pool is full")

	callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ran := false
	err = l.RunSession(callCtx, pgadvisory.ID(freeKey), func(context.Context) error { ran = true; return nil })
	require.NoError(t, err, "a non-waiting session lock on a free key runs on the open shared connection")
	require.True(t, ran)

	own, err := pgadvisory.New(pgadvisory.Stdlib(db), pgadvisory.WithSessionConns(0))
	require.NoError(t, err)
	ownCtx, cancelOwn := context.WithTimeout(ctx, time.Second)
	defer cancelOwn()
	err = own.RunSession(ownCtx, pgadvisory.ID(freeKey), func(context.Context) error { return nil })
	require.ErrorIs(t, err, context.DeadlineExceeded, "control: a connection of its own waits for the full pool")
	require.ErrorContains(t, err, "waiting for a connection from the pool")

	require.NoError(t, app.Close())
	close(release)
	require.NoError(t, frontdoor.Await(t, holder, "the holder's return"))
	require.NoError(t, frontdoor.Await(t, waiter, "the waiter's return"))
	require.NoError(t, frontdoor.Await(t, queued, "the queued waiter's return"))
}
