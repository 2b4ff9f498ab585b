package pgadvisory

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// pollingOff sets the polling bounds lo and hi to an hour for the test: a
// waiter then sleeps between its tries unless woken. It returns the ctx of
// the test's calls and the group they join; at cleanup ctx is canceled and
// the calls end before the bounds are restored (cleanups run last in,
// first out), even when the test fails.
func pollingOff(t *testing.T, lo, hi *time.Duration) (context.Context, *sync.WaitGroup) {
	t.Helper()
	lo0, hi0 := *lo, *hi
	*lo, *hi = time.Hour, time.Hour
	t.Cleanup(func() { *lo, *hi = lo0, hi0 })
	ctx, cancel := context.WithCancel(testdb.Context(t))
	calls := new(sync.WaitGroup)
	t.Cleanup(func() { cancel(); calls.Wait() })
	return ctx, calls
}

// migratedLocker is a pgx Locker on a new pool of the test's database,
// whose schema it migrates, closed at cleanup. With deaf true it never
// listens: no NOTIFY reaches it, as behind a pooler.
func migratedLocker(ctx context.Context, t *testing.T, deaf bool, opts ...LockerOption) *Locker[pgx.Tx] {
	t.Helper()
	pool := testdb.Pool(t)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, Migrate(ctx, db))
	l, err := New(Pgx(pool), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	if deaf {
		l.s.waits.mu.Lock()
		l.s.waits.cannot = true
		l.s.waits.mu.Unlock()
	}
	return l
}

// heldCall is a call started by startHeld.
type heldCall struct {
	started, release chan struct{}
	done             chan error
}

// startHeld starts run in a goroutine of calls and returns it as a
// heldCall: the fn that run gets (hold) closes started, then holds until
// release is closed (or ctx ends); done receives run's result.
func startHeld(ctx context.Context, calls *sync.WaitGroup, run func(hold func() error) error) *heldCall {
	c := &heldCall{started: make(chan struct{}), release: make(chan struct{}), done: make(chan error, 1)}
	hold := func() error {
		close(c.started)
		select {
		case <-c.release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	calls.Add(1)
	go func() {
		defer calls.Done()
		c.done <- run(hold)
	}()
	return c
}

// runs fails the test unless c's fn has started or starts within 10s.
func (c *heldCall) runs(t *testing.T, what string) {
	t.Helper()
	select {
	case <-c.started:
	case <-time.After(10 * time.Second):
		t.Fatal(what)
	}
}

// end releases c and requires its call to succeed.
func (c *heldCall) end(t *testing.T) {
	t.Helper()
	close(c.release)
	require.NoError(t, <-c.done)
}
