package frontdoor

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/lockgen/lockgen/pgadvisory"
)

// Hold takes lockID with d.RunExclusive in the background and keeps it: fn
// runs work (if not nil) and then blocks until release is called. Hold
// returns once the lock is held, and fails t if it is not taken within 30s.
// release ends fn and returns the call's error; it also runs when t ends.
func (d Door) Hold(t testing.TB, lockID int64, work func(Tx) error, opts ...pgadvisory.Option) (release func() error) {
	t.Helper()
	acquired, stop, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- d.RunExclusive(context.Background(), lockID, func(tx Tx) error {
			if work != nil {
				if err := work(tx); err != nil {
					return err
				}
			}
			close(acquired)
			<-stop
			return nil
		}, opts...)
	}()
	select {
	case <-acquired:
	case err := <-done:
		t.Fatalf("frontdoor: Hold: lock %d not taken: %v", lockID, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("frontdoor: Hold: lock %d not taken within 30s", lockID)
	}
	var once sync.Once
	var err error
	release = func() error {
		once.Do(func() {
			close(stop)
			err = <-done
		})
		return err
	}
	t.Cleanup(func() { _ = release() })
	return release
}

// Await waits for the result of a call run in the background (what names
// it in the failure) and fails t if none comes within 90s.
func Await[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(90 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}
