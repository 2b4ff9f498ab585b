package pgadvisory

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/wirecount"
)

// TestLimitedHandoffRoundTrips counts, on the wire, the round trips between
// a holder's fn returning and a waiting call's fn starting in the same
// Locker, with polling switched off (a waiter sleeps an hour unless woken),
// n = 1: on pgx, the holder's COMMIT, then the woken waiter's BEGIN and
// slot statement in one round trip: 2, a slot handed on within 2 round
// trips of its release.
//
// Control: on database/sql, whose BEGIN is a round trip of its own, the
// count is 3.
func TestLimitedHandoffRoundTrips(t *testing.T) {
	ctx, calls := pollingOff(t, &limitedPollMin, &limitedPollMax)
	c := wirecount.New()
	counted := func() *pgxpool.Pool {
		return testdb.PoolConfig(t, func(cfg *pgxpool.Config) {
			cfg.MaxConns = 2
			cfg.ConnConfig.DialFunc = c.Dial(cfg.ConnConfig.DialFunc)
			cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
		})
	}
	admin := stdlib.OpenDBFromPool(testdb.Pool(t))
	t.Cleanup(func() { _ = admin.Close() })
	require.NoError(t, Migrate(ctx, admin))

	// A call's fn records the count when it starts and when it returns.
	type held struct {
		started, release chan struct{}
		in, out          atomic.Int64
		err              chan error
	}
	hold := func(run func(ctx context.Context, fn func() error) error) *held {
		h := &held{started: make(chan struct{}), release: make(chan struct{}), err: make(chan error, 1)}
		calls.Add(1)
		go func() {
			defer calls.Done()
			h.err <- run(ctx, func() error {
				h.in.Store(c.RoundTrips())
				close(h.started)
				select {
				case <-h.release:
				case <-ctx.Done():
					return ctx.Err()
				}
				h.out.Store(c.RoundTrips())
				return nil
			})
		}()
		return h
	}
	started := func(h *held) {
		t.Helper()
		select {
		case <-h.started:
		case <-time.After(10 * time.Second):
			t.Fatal("fn did not start")
		}
	}
	end := func(hs ...*held) {
		t.Helper()
		for _, h := range hs {
			close(h.release)
			require.NoError(t, <-h.err)
		}
	}
	// handoff: a holder of lock (n = 1) and a waiter; once the waiter
	// sleeps and only the holder's connection is in use (busy: the pool's
	// connections in use, its losing try's ROLLBACK over), the holder
	// returns; the round trips until the waiter's fn starts.
	handoff := func(t *testing.T, run func(lock Lock, n int, opts ...Option) func(context.Context, func() error) error,
		w lockerWaiters, busy func() int) int64 {
		t.Helper()
		// Prepare the slot statements (with and without WithWait) on both
		// connections: two calls of a lock with n = 2 hold their slots at
		// once, on the two connections.
		warm := ID(testdb.Key(t))
		for _, opts := range [][]Option{nil, {WithWait(0)}} {
			h1, h2 := hold(run(warm, 2, opts...)), hold(run(warm, 2, opts...))
			started(h1)
			started(h2)
			end(h1, h2)
		}
		lock := ID(testdb.Key(t))
		holder := hold(run(lock, 1))
		started(holder)
		waiter := hold(run(lock, 1, WithWait(0)))
		require.Eventually(t, func() bool { return w.count(lock.ID) == 1 && busy() == 1 }, 10*time.Second, time.Millisecond)
		close(holder.release)
		require.NoError(t, <-holder.err)
		started(waiter)
		n := waiter.in.Load() - holder.out.Load()
		end(waiter)
		return n
	}

	t.Run("pgx", func(t *testing.T) {
		pool := counted()
		l, err := New(Pgx(pool))
		require.NoError(t, err)
		// The Locker listens before the waiter waits: the listener's
		// wake-up of every waiter after connecting is over.
		lw := listening(t, l.s, pgxListener(pool))
		n := handoff(t, func(lock Lock, n int, opts ...Option) func(context.Context, func() error) error {
			return func(ctx context.Context, fn func() error) error {
				return l.RunLimited(ctx, lock, n, func(pgx.Tx) error { return fn() }, opts...)
			}
		}, lw, func() int { return int(pool.Stat().AcquiredConns()) })
		require.EqualValues(t, 2, n, "the holder's COMMIT, the waiter's BEGIN and slot statement")
	})
	t.Run("control_database_sql", func(t *testing.T) {
		pool := counted()
		db := stdlib.OpenDBFromPool(pool)
		t.Cleanup(func() { _ = db.Close() })
		l, err := New(Stdlib(db))
		require.NoError(t, err)
		lw := listening(t, l.s, stdlibListener(db))
		n := handoff(t, func(lock Lock, n int, opts ...Option) func(context.Context, func() error) error {
			return func(ctx context.Context, fn func() error) error {
				return l.RunLimited(ctx, lock, n, func(*sql.Tx) error { return fn() }, opts...)
			}
		}, lw, func() int { return db.Stats().InUse })
		require.EqualValues(t, 3, n, "COMMIT, BEGIN, the slot statement")
	})
}

// listening makes s's Locker listen (a probe waits for another lock) and
// returns its limited waiters once the listener's wake-up of every waiter
// after connecting has come, so that none comes later.
func listening(t *testing.T, s *lockerState, listen func(context.Context) (notifyConn, error)) lockerWaiters {
	t.Helper()
	lw := s.limitedWaiters()
	probe := lw.join(-1, listen)
	t.Cleanup(func() { lw.leave(probe) })
	select {
	case <-probe.ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up after the listener connected")
	}
	return lw
}
