package lockgentest_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockgen/lockgen/lockgentest"
	"github.com/lockgen/lockgen/pgadvisory"
)

// lockFree reports whether another session can take lock right now.
func lockFree(t testing.TB, db *sql.DB, lock pgadvisory.Lock) bool {
	t.Helper()
	var free bool
	if err := db.QueryRow(`SELECT pg_try_advisory_xact_lock($1)`, lock.ID).Scan(&free); err != nil {
		t.Fatal(err)
	}
	return free
}

// deposeDuring runs call, whose fn calls inside once it holds lock; it
// deposes lock then and returns what call returned and how long after
// Depose that was.
func deposeDuring(t *testing.T, db *sql.DB, lock pgadvisory.Lock, call func(ctx context.Context, inside func()) error) (error, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	held := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- call(ctx, func() { close(held) }) }()
	select {
	case <-held:
	case err := <-done:
		t.Fatalf("the call never held %v: %v", lock, err)
	}
	lockgentest.Depose(t, db, lock)
	start := time.Now()
	if !lockFree(t, db, lock) {
		t.Errorf("%v is still held once Depose returned", lock)
	}
	select {
	case err := <-done:
		return err, time.Since(start)
	case <-ctx.Done():
		t.Fatalf("the deposed call did not return")
		return nil, 0
	}
}

// TestDeposeEveryHoldKind: a session lock, a session-lock leader, a lease
// leader and a transaction lock each lose their lock to Depose, and the
// call returns the error it returns in production when that happens.
func TestDeposeEveryHoldKind(t *testing.T) {
	db := lockgentest.NewDB(t)
	locker, err := pgadvisory.New(pgadvisory.Stdlib(db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locker.Close() })
	// waitCtx is fn's loop: it waits for its context to end, as work that
	// honours it does, and returns the context's cause.
	waitCtx := func(ctx context.Context, inside func()) error {
		inside()
		<-ctx.Done()
		return context.Cause(ctx)
	}

	t.Run("RunSession", func(t *testing.T) {
		lock := pgadvisory.Lock{Name: "lockgentest.session", ID: 7_101}
		err, took := deposeDuring(t, db, lock, func(ctx context.Context, inside func()) error {
			return locker.RunSession(ctx, lock, func(ctx context.Context) error { return waitCtx(ctx, inside) },
				pgadvisory.WithCheckInterval(100*time.Millisecond))
		})
		if !errors.Is(err, pgadvisory.ErrLockLost) {
			t.Errorf("RunSession returned %v, want ErrLockLost", err)
		}
		t.Logf("RunSession returned %v after %v", err, took)
	})
	t.Run("Lead", func(t *testing.T) {
		lock := pgadvisory.Lock{Name: "lockgentest.lead", ID: 7_102}
		err, _ := deposeDuring(t, db, lock, func(ctx context.Context, inside func()) error {
			return locker.Lead(ctx, lock, func(ctx context.Context, _ int64) error { return waitCtx(ctx, inside) },
				pgadvisory.WithCheckInterval(100*time.Millisecond))
		})
		if !errors.Is(err, pgadvisory.ErrLockLost) {
			t.Errorf("Lead returned %v, want ErrLockLost", err)
		}
	})
	t.Run("LeadWithLease", func(t *testing.T) {
		lock := pgadvisory.Lock{Name: "lockgentest.lease", ID: 7_103}
		const ttl = 900 * time.Millisecond
		err, took := deposeDuring(t, db, lock, func(ctx context.Context, inside func()) error {
			return locker.Lead(ctx, lock, func(ctx context.Context, _ int64) error { return waitCtx(ctx, inside) },
				pgadvisory.WithLease(ttl))
		})
		if !errors.Is(err, pgadvisory.ErrLockLost) {
			t.Errorf("Lead with a lease returned %v, want ErrLockLost", err)
		}
		// The holder's own deadline ends fn within the ttl of its last
		// renewal; a loaded machine adds its scheduling delays.
		if took > 3*ttl {
			t.Errorf("the deposed lease leader returned %v after Depose, later than three times its ttl %v", took, ttl)
		}
		// Another candidate leads at once: the lease is vacant, not merely
		// unrenewed.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := locker.Lead(ctx, lock, func(context.Context, int64) error { return nil }, pgadvisory.WithLease(time.Hour)); err != nil {
			t.Errorf("the next candidate could not take the deposed lease: %v", err)
		}
	})
	t.Run("RunExclusive", func(t *testing.T) {
		lock := pgadvisory.Lock{Name: "lockgentest.tx", ID: 7_104}
		statements := 0
		err, _ := deposeDuring(t, db, lock, func(ctx context.Context, inside func()) error {
			return locker.RunExclusive(ctx, lock, func(tx *sql.Tx) error {
				inside()
				for { // fn's work: a statement every 10ms until one fails
					if _, err := tx.ExecContext(ctx, `SELECT 1`); err != nil {
						return err
					}
					statements++
					time.Sleep(10 * time.Millisecond)
				}
			})
		})
		if !errors.Is(err, pgadvisory.ErrConnLost) {
			t.Errorf("RunExclusive returned %v, want ErrConnLost", err)
		}
		t.Logf("RunExclusive returned %v after %d statements", err, statements)
	})
	// A limited lock's holder holds one of its slots, not the lock's ID.
	limited := pgadvisory.Lock{Name: "lockgentest.limited", ID: 7_105}.With(pgadvisory.WithLimit(3))
	t.Run("RunLimited", func(t *testing.T) {
		err, _ := deposeDuring(t, db, limited, func(ctx context.Context, inside func()) error {
			return locker.RunLimited(ctx, limited, 0, func(tx *sql.Tx) error {
				inside()
				for { // fn's work: a statement every 10ms until one fails
					if _, err := tx.ExecContext(ctx, `SELECT 1`); err != nil {
						return err
					}
					time.Sleep(10 * time.Millisecond)
				}
			})
		})
		if !errors.Is(err, pgadvisory.ErrConnLost) {
			t.Errorf("RunLimited returned %v, want ErrConnLost", err)
		}
	})
	t.Run("RunSessionLimited", func(t *testing.T) {
		err, _ := deposeDuring(t, db, limited, func(ctx context.Context, inside func()) error {
			return locker.RunSessionLimited(ctx, limited, 0, func(ctx context.Context) error { return waitCtx(ctx, inside) },
				pgadvisory.WithCheckInterval(100*time.Millisecond))
		})
		if !errors.Is(err, pgadvisory.ErrLockLost) {
			t.Errorf("RunSessionLimited returned %v, want ErrLockLost", err)
		}
	})
}

// TestHoldLimitedLock: Hold of a limited lock takes all its slots, so the
// code under test finds none free (ErrLocked) through either verb, and
// finds one once released; the limit comes from the lock's WithLimit or,
// for a lock that does not declare it, from the limit an earlier call
// registered.
func TestHoldLimitedLock(t *testing.T) {
	db := lockgentest.NewDB(t)
	locker, err := pgadvisory.New(pgadvisory.Stdlib(db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locker.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 3
	declared := pgadvisory.Lock{Name: "lockgentest.hold_limited", ID: 7_106}.With(pgadvisory.WithLimit(n))
	undeclared := pgadvisory.Lock{Name: "lockgentest.hold_registered", ID: 7_107}
	// The undeclared lock's limit is registered by a first call.
	if err := locker.RunLimited(ctx, undeclared, n, func(*sql.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		lock pgadvisory.Lock
	}{{"declared", declared}, {"registered", undeclared}} {
		t.Run(tc.name, func(t *testing.T) {
			runLimited := func() error {
				return locker.RunLimited(ctx, tc.lock, n, func(*sql.Tx) error { return nil })
			}
			runSessionLimited := func() error {
				return locker.RunSessionLimited(ctx, tc.lock, n, func(context.Context) error { return nil })
			}
			release := lockgentest.Hold(t, db, tc.lock)
			for name, call := range map[string]func() error{"RunLimited": runLimited, "RunSessionLimited": runSessionLimited} {
				if err := call(); !errors.Is(err, pgadvisory.ErrLocked) {
					t.Errorf("%s while Hold held the lock: %v, want ErrLocked", name, err)
				}
			}
			release()
			for name, call := range map[string]func() error{"RunLimited": runLimited, "RunSessionLimited": runSessionLimited} {
				if err := call(); err != nil {
					t.Errorf("%s after the release: %v", name, err)
				}
			}
		})
	}
}

// TestDeposeNobody: deposing a lock nobody holds fails the test, saying
// so; a lock held by Hold is deposed (its session ended).
func TestDeposeNobody(t *testing.T) {
	db := lockgentest.NewDB(t)
	lock := pgadvisory.Lock{Name: "lockgentest.nobody", ID: 7_201}
	r := runAs(t, func(tb testing.TB) { lockgentest.Depose(tb, db, lock) })
	if !r.Failed() || !strings.Contains(r.failures(), "nobody holds it") {
		t.Fatalf("Depose of a free lock: failed %v, %q", r.Failed(), r.failures())
	}
	release := lockgentest.Hold(t, db, lock)
	r = runAs(t, func(tb testing.TB) { lockgentest.Depose(tb, db, lock) })
	if r.Failed() {
		t.Fatalf("Depose of a held lock failed: %s", r.failures())
	}
	if !lockFree(t, db, lock) {
		t.Fatal("the lock Hold held is still held after Depose")
	}
	release() // its session is gone: release only disconnects
}
