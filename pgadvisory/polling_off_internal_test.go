package pgadvisory

import (
	"context"
	"sync"
	"testing"
	"time"

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
