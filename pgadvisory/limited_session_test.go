package pgadvisory_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// sessionLimitedDoor is RunSessionLimited of one front door.
type sessionLimitedDoor struct {
	name string
	run  func(ctx context.Context, lock pgadvisory.Lock, n int, fn func(context.Context) error, opts ...pgadvisory.Option) error
}

// sessionLimitedDoors are RunSessionLimited on database/sql and on pgx,
// each Locker with one shared session connection (so that its calls share
// one backend, where advisory locks are re-entrant).
func sessionLimitedDoors(t *testing.T, opts ...pgadvisory.LockerOption) []sessionLimitedDoor {
	t.Helper()
	db := migrated.DB(t)
	pool := testdb.Pool(t)
	opts = append([]pgadvisory.LockerOption{pgadvisory.WithSessionConns(1)}, opts...)
	sl, err := pgadvisory.New(pgadvisory.Stdlib(db), opts...)
	require.NoError(t, err)
	pl, err := pgadvisory.New(pgadvisory.Pgx(pool), opts...)
	require.NoError(t, err)
	return []sessionLimitedDoor{{"database/sql", sl.RunSessionLimited}, {"pgx", pl.RunSessionLimited}}
}

// TestRunSessionLimitedHoldsDistinctSlots: n calls of one Locker, all on
// its one shared connection, hold n different slots (granted in pg_locks
// on that one backend), the next is refused with ErrLocked, another
// Locker's call too; once they return, the slots are free. With a
// different n, a call is refused naming both values. Both drivers.
func TestRunSessionLimitedHoldsDistinctSlots(t *testing.T) {
	admin := migrated.DB(t)
	w := witness.Of(admin)
	for _, d := range sessionLimitedDoors(t) {
		t.Run(d.name, func(t *testing.T) {
			ctx := testdb.Context(t)
			lock := pgadvisory.Lock{Name: "test.session_limited", ID: testdb.Key(t)}
			const n = 3
			release := make(chan struct{})
			entered := make(chan int, n)
			errs := make(chan error, n)
			var wg sync.WaitGroup
			for range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- d.run(ctx, lock, n, func(ctx context.Context) error {
						slot, ok := pgadvisory.Slot(ctx)
						if !ok {
							return errors.New("no slot in fn's context")
						}
						entered <- slot
						select { // ctx ends when a failed check ends the test
						case <-release:
						case <-ctx.Done():
						}
						return nil
					}, pgadvisory.WithWait(10*time.Second))
				}()
			}
			seen := map[int]bool{}
			for range n {
				s := <-entered
				require.False(t, seen[s], "slot %d held twice", s)
				seen[s] = true
			}
			holds := w.Holds(t, slotKeys(lock.ID, n)...)
			require.Len(t, holds, n)
			require.Equal(t, holds[0].PID, holds[n-1].PID, "one shared backend holds every slot")

			err := d.run(ctx, lock, n, func(context.Context) error { return errors.New("ran") })
			require.ErrorIs(t, err, pgadvisory.ErrLocked)
			var pe *pgadvisory.Error
			require.ErrorAs(t, err, &pe)
			require.Equal(t, []int64{lock.ID}, pe.LockIDs)
			other := sessionLimitedDoors(t)[1]
			require.ErrorIs(t, other.run(ctx, lock, n, func(context.Context) error { return errors.New("ran") }), pgadvisory.ErrLocked)
			err = other.run(ctx, lock, n+2, func(context.Context) error { return errors.New("ran") })
			require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument)
			require.ErrorContains(t, err, "this call's n is 5, but the lock is limited to 3")

			close(release)
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			require.Zero(t, w.Locks(t, true, slotKeys(lock.ID, n)...))
		})
	}
}

// TestRunSessionLimitedLost: the backend that holds a session slot is
// terminated; fn's context is canceled with ErrLockLost within the check
// interval, the slot is free at once, and another call takes it. The call
// returns ErrLockLost.
func TestRunSessionLimitedLost(t *testing.T) {
	admin := migrated.DB(t)
	w := witness.Of(admin)
	for _, d := range sessionLimitedDoors(t) {
		t.Run(d.name, func(t *testing.T) {
			ctx := testdb.Context(t)
			lock := pgadvisory.Lock{Name: "test.session_limited_lost", ID: testdb.Key(t)}
			const interval = 200 * time.Millisecond
			held := make(chan struct{})
			lostAfter := make(chan time.Duration, 1)
			done := make(chan error, 1)
			var killed time.Time
			var mu sync.Mutex
			go func() {
				done <- d.run(ctx, lock, 1, func(ctx context.Context) error {
					close(held)
					select {
					case <-ctx.Done():
					case <-time.After(interval + 5*time.Second):
						lostAfter <- time.Hour // not canceled: fails the test below at once
						return errors.New("fn's context was not canceled")
					}
					mu.Lock()
					lostAfter <- time.Since(killed)
					mu.Unlock()
					return context.Cause(ctx)
				}, pgadvisory.WithCheckInterval(interval))
			}()
			<-held
			h := w.Holder(t, slotKeys(lock.ID, 1)[0])
			mu.Lock()
			killed = time.Now()
			mu.Unlock()
			_, err := admin.ExecContext(ctx, `SELECT pg_terminate_backend($1)`, h.PID)
			require.NoError(t, err)
			require.Eventually(t, func() bool { return w.Locks(t, true, slotKeys(lock.ID, 1)...) == 0 },
				5*time.Second, 5*time.Millisecond, "the slot frees when its backend ends")
			after := <-lostAfter
			require.Less(t, after, interval+2*time.Second, "fn's context canceled within the check interval")
			t.Logf("fn's context canceled %v after the kill (check interval %v)", after.Round(time.Millisecond), interval)
			err = <-done
			require.ErrorIs(t, err, pgadvisory.ErrLockLost)
			require.NoError(t, d.run(ctx, lock, 1, func(context.Context) error { return nil }))
		})
	}
}

// TestRunSessionLimitedNeedsSharedConns: a Locker without shared session
// connections refuses RunSessionLimited; the control (the default) runs.
func TestRunSessionLimitedNeedsSharedConns(t *testing.T) {
	db := migrated.DB(t)
	ctx := testdb.Context(t)
	lock := pgadvisory.Lock{Name: "test.session_limited_conns", ID: testdb.Key(t)}
	l, err := pgadvisory.New(pgadvisory.Stdlib(db), pgadvisory.WithSessionConns(0))
	require.NoError(t, err)
	err = l.RunSessionLimited(ctx, lock, 2, func(context.Context) error { return nil })
	require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument)
	require.ErrorContains(t, err, "WithSessionConns(0)")
	l, err = pgadvisory.New(pgadvisory.Stdlib(db))
	require.NoError(t, err)
	require.NoError(t, l.RunSessionLimited(ctx, lock, 2, func(context.Context) error { return nil }))
	// Refusals as RunLimited's.
	require.ErrorIs(t, l.RunSessionLimited(ctx, lock, 2, func(context.Context) error { return nil }, pgadvisory.WithShared()), pgadvisory.ErrInvalidArgument)
	require.ErrorIs(t, l.RunSessionLimited(ctx, lock, 0, func(context.Context) error { return nil }), pgadvisory.ErrInvalidArgument)
}

// TestRunSessionLimitedTakesOnlyFreeSlotsBelowN is
// TestRunLimitedTakesOnlyFreeSlotsBelowN for session slots: Slot(ctx) names
// the one slot a SQL job's session left free, whose key the call's shared
// backend holds; with all held, every call is refused with ErrLocked.
func TestRunSessionLimitedTakesOnlyFreeSlotsBelowN(t *testing.T) {
	admin := migrated.DB(t)
	w := witness.Of(admin)
	for _, d := range sessionLimitedDoors(t) {
		t.Run(d.name, func(t *testing.T) {
			ctx := testdb.Context(t)
			lock := pgadvisory.Lock{Name: "test.session_limited_free", ID: testdb.Key(t)}
			const n = 4
			keys := slotKeys(lock.ID, n)
			require.NoError(t, d.run(ctx, lock, n, func(context.Context) error { return nil })) // registers n
			job, err := admin.Conn(ctx)
			require.NoError(t, err)
			defer func() { _ = job.Close() }()
			for free := range n {
				for s, key := range keys {
					if s != free {
						_, err := job.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, key)
						require.NoError(t, err)
					}
				}
				for range 4 {
					require.NoError(t, d.run(ctx, lock, n, func(ctx context.Context) error {
						slot, ok := pgadvisory.Slot(ctx)
						if !ok || slot != free {
							return errors.New("Slot(ctx) does not name the one free slot")
						}
						if w.Locks(t, true, keys[free]) != 1 {
							return errors.New("the free slot's key is not granted inside fn")
						}
						return nil
					}))
				}
				_, err = job.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, keys[free])
				require.NoError(t, err)
				for range 10 {
					err := d.run(ctx, lock, n, func(context.Context) error { return errors.New("ran") })
					require.ErrorIs(t, err, pgadvisory.ErrLocked)
				}
				_, err = job.ExecContext(ctx, `SELECT pg_advisory_unlock_all()`)
				require.NoError(t, err)
			}
		})
	}
}
