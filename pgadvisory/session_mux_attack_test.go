package pgadvisory_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/faultproxy"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Attacks on shared session connections: what an operator or a user does
// that could make a lock on a shared connection be lost, or held, when it
// should not.

// holdShared starts a session call on door that holds key until the
// returned end is called; end returns the call's error and the cause of
// its context if it was canceled.
func holdShared(t *testing.T, ctx context.Context, door frontdoor.Door, key int64, opts ...pgadvisory.Option) (end func() (error, error), canceled <-chan struct{}) {
	t.Helper()
	in, out, gone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	type result struct{ err, cause error }
	done := make(chan result, 1)
	go func() {
		var cause error
		err := door.RunSession(ctx, pgadvisory.ID(key), func(ctx context.Context) error {
			close(in)
			select {
			case <-out:
				return nil
			case <-ctx.Done():
				cause = context.Cause(ctx)
				close(gone)
				return ctx.Err()
			}
		}, opts...)
		done <- result{err, cause}
	}()
	frontdoor.Await(t, in, "the holder")
	var once sync.Once
	return func() (error, error) {
		once.Do(func() { close(out) })
		r := frontdoor.Await(t, done, "the holder's end")
		return r.err, r.cause
	}, gone
}

// requireKeptThenEnd requires that the lock of holdShared (its end and
// canceled) was not lost, what being the lock named in the failure, then
// ends it and requires its call and fn to have ended without an error.
func requireKeptThenEnd(t *testing.T, end func() (error, error), canceled <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-canceled:
		t.Fatalf("%s was lost", what)
	default:
	}
	err, cause := end()
	require.NoError(t, err)
	require.NoError(t, cause)
}

// TestSessionSharedServerTimeouts: lock_timeout, statement_timeout and
// idle_in_transaction_session_timeout set short for the database do not
// end locks on a shared connection (no statement of it runs long, and it
// is never idle in a transaction); a waiting call outlasts them.
func TestSessionSharedServerTimeouts(t *testing.T) {
	url := timeoutDatabase(t)
	admin := testdb.DB(t)
	var name string
	require.NoError(t, openOn(t, url).QueryRow("SELECT current_database()").Scan(&name))
	_, err := admin.Exec("ALTER DATABASE " + pgx.Identifier{name}.Sanitize() + " SET idle_in_transaction_session_timeout = '100ms'")
	require.NoError(t, err)
	w := witness.Of(openOn(t, url))
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		door := frontdoor.Open(t, drv, frontdoor.URL(url), frontdoor.MaxConns(4))
		door = door.WithLocker(pgadvisory.WithSessionConns(1))
		interval := pgadvisory.WithCheckInterval(20 * time.Millisecond)
		var ends []func() (error, error)
		var cancels []<-chan struct{}
		base := testdb.Key(t) << 8
		for i := range 10 {
			end, canceled := holdShared(t, ctx, door, base+int64(i), interval)
			ends = append(ends, end)
			cancels = append(cancels, canceled)
		}
		// A waiter, granted after 600ms: past both timeouts.
		holder, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		defer func() { _ = holder.Close(context.Background()) }()
		_, err = holder.Exec(ctx, "SELECT pg_advisory_lock($1)", base+100)
		require.NoError(t, err)
		waited := make(chan error, 1)
		go func() {
			waited <- door.RunSession(ctx, pgadvisory.ID(base+100), func(context.Context) error { return nil }, pgadvisory.WithWait(0), interval)
		}()
		time.Sleep(600 * time.Millisecond)
		_, err = holder.Exec(ctx, "SELECT pg_advisory_unlock($1)", base+100)
		require.NoError(t, err)
		require.NoError(t, frontdoor.Await(t, waited, "the waiter"))
		for i, canceled := range cancels {
			select {
			case <-canceled:
				t.Fatalf("lock %d lost under the database's timeouts", i)
			default:
			}
		}
		for _, end := range ends {
			err, cause := end()
			require.NoError(t, err)
			require.NoError(t, cause)
		}
		require.Empty(t, w.Holds(t, base, base+1, base+100))
	})
}

// TestSessionSharedHalfOpen: the shared connection's link goes silent.
// Every lock on it is canceled within the check interval plus the check
// timeout (ErrLockLost, "did not answer"); a lock of another pool on a
// healthy link is not. Once the link heals, the server releases the
// locks, and the pool takes new ones on a new connection.
func TestSessionSharedHalfOpen(t *testing.T) {
	w := witness.Of(testdb.DB(t))
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		px := faultproxy.ToTestDB(t)
		t.Cleanup(func() { px.Blackhole(false) })
		door := frontdoor.Open(t, drv, frontdoor.MaxConns(4), frontdoor.Configure(px.Route))
		door = door.WithLocker(pgadvisory.WithSessionConns(1))
		healthy := frontdoor.Open(t, drv, frontdoor.MaxConns(2))
		opts := []pgadvisory.Option{pgadvisory.WithCheckInterval(50 * time.Millisecond), pgadvisory.WithCheckTimeout(200 * time.Millisecond)}
		key := testdb.Key(t)
		endA, goneA := holdShared(t, ctx, door, key, opts...)
		endB, goneB := holdShared(t, ctx, door, key+1, opts...)
		endC, goneC := holdShared(t, ctx, healthy, key+2, opts...)
		require.Equal(t, w.Holder(t, key).PID, w.Holder(t, key+1).PID, "one shared connection")
		px.Blackhole(true)
		frontdoor.Await(t, goneA, "lock A canceled")
		frontdoor.Await(t, goneB, "lock B canceled")
		for _, end := range []func() (error, error){endA, endB} {
			err, cause := end()
			require.ErrorIs(t, cause, pgadvisory.ErrLockLost)
			require.ErrorIs(t, err, pgadvisory.ErrLockLost)
			require.ErrorContains(t, err, "did not answer within 200ms")
		}
		select {
		case <-goneC:
			t.Fatal("a lock on a healthy link was canceled")
		default:
		}
		require.Len(t, w.Holds(t, key, key+1), 2, "the server has heard nothing yet")
		px.Blackhole(false)
		require.Eventually(t, func() bool { return len(w.Holds(t, key, key+1)) == 0 }, 30*time.Second, 10*time.Millisecond)
		require.NoError(t, door.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error { return nil }, opts...))
		err, cause := endC()
		require.NoError(t, err)
		require.NoError(t, cause)
		frontdoor.RequireIdle(t, door)
	})
}

// TestSessionSharedPanic: fn panics. The panic reaches the caller, the
// lock is released at once, and the other lock on the connection is
// untouched.
func TestSessionSharedPanic(t *testing.T) {
	w := witness.Of(testdb.DB(t))
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		door := frontdoor.Open(t, drv, frontdoor.MaxConns(4))
		door = door.WithLocker(pgadvisory.WithSessionConns(1))
		key := testdb.Key(t)
		end, gone := holdShared(t, ctx, door, key, pgadvisory.WithCheckInterval(20*time.Millisecond))
		recovered := func() (r any) {
			defer func() { r = recover() }()
			_ = door.RunSession(ctx, pgadvisory.ID(key+1), func(context.Context) error { panic("boom") })
			return nil
		}()
		require.Equal(t, "boom", recovered)
		require.Empty(t, w.Holds(t, key+1), "the panicking call's lock was released")
		w.Holder(t, key)
		time.Sleep(100 * time.Millisecond)
		requireKeptThenEnd(t, end, gone, "the other lock")
		frontdoor.RequireIdle(t, door)
	})
}

// TestSessionSharedCancelWhileWaiting: a waiting call's ctx is canceled.
// The call returns context.Canceled, holds nothing, leaves nothing in
// lockgen's queue, and the lock on the shared connection is untouched.
func TestSessionSharedCancelWhileWaiting(t *testing.T) {
	w := witness.Of(migrated.DB(t))
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		door := frontdoor.Open(t, drv, frontdoor.MaxConns(4))
		door = door.WithLocker(pgadvisory.WithSessionConns(1))
		key := testdb.Key(t)
		end, gone := holdShared(t, ctx, door, key, pgadvisory.WithCheckInterval(20*time.Millisecond))
		holder, err := pgx.Connect(ctx, testdb.URL(t))
		require.NoError(t, err)
		defer func() { _ = holder.Close(context.Background()) }()
		_, err = holder.Exec(ctx, "SELECT pg_advisory_lock($1)", key+1)
		require.NoError(t, err)

		wctx, cancel := context.WithCancel(ctx)
		waited := make(chan error, 1)
		go func() {
			waited <- door.RunSession(wctx, pgadvisory.ID(key+1), func(context.Context) error { t.Error("fn ran"); return nil }, pgadvisory.WithWait(0))
		}()
		require.Eventually(t, func() bool { return waitingFor(t, w, []int64{key + 1}) == 1 }, 30*time.Second, 5*time.Millisecond)
		cancel()
		err = frontdoor.Await(t, waited, "the canceled waiter")
		require.Zero(t, waitingFor(t, w, []int64{key + 1}), "the canceled waiter left the queue")
		require.ErrorIs(t, err, context.Canceled)
		var pe *pgadvisory.Error
		require.ErrorAs(t, err, &pe)
		require.Equal(t, pgadvisory.OpLock, pe.Op)
		_, err = holder.Exec(ctx, "SELECT pg_advisory_unlock($1)", key+1)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return len(w.Holds(t, key+1)) == 0 }, 30*time.Second, 10*time.Millisecond,
			"the canceled waiter holds nothing")
		requireKeptThenEnd(t, end, gone, "the lock on the shared connection")
		frontdoor.RequireIdle(t, door)
	})
}

// TestSessionSharedOpenGivenUp: the pool is exhausted, so the shared
// connection cannot be opened; the call's ctx ends first. The call
// returns the ctx's error, and once a connection is free the pool's
// session locks work again and leave nothing checked out.
func TestSessionSharedOpenGivenUp(t *testing.T) {
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		door := frontdoor.Open(t, drv, frontdoor.MaxConns(1))
		release := door.Checkout(t)
		key := testdb.Key(t)
		ctx, cancel := context.WithTimeout(testdb.Context(t), 100*time.Millisecond)
		defer cancel()
		err := door.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error { t.Error("fn ran"); return nil })
		require.ErrorIs(t, err, context.DeadlineExceeded)
		var pe *pgadvisory.Error
		require.ErrorAs(t, err, &pe)
		require.Equal(t, pgadvisory.OpBegin, pe.Op)
		release()
		require.NoError(t, door.RunSession(testdb.Context(t), pgadvisory.ID(key), func(context.Context) error { return nil }))
		frontdoor.RequireIdle(t, door)
	})
}
