package pgadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/keyspace"
	"github.com/lockgen/lockgen/pgadvisory"
)

// limitedDoor is RunLimited of one front door, with fn given the slot.
type limitedDoor struct {
	name string
	run  func(ctx context.Context, lock pgadvisory.Lock, n int, fn func(slot int) error, opts ...pgadvisory.Option) error
}

// limitedDoors are RunLimited on database/sql and on pgx, over the package
// database with lockgen's schema.
func limitedDoors(t *testing.T) []limitedDoor {
	t.Helper()
	db := migrated.DB(t)
	pool := testdb.Pool(t)
	sl, err := pgadvisory.New(pgadvisory.Stdlib(db))
	require.NoError(t, err)
	pl, err := pgadvisory.New(pgadvisory.Pgx(pool))
	require.NoError(t, err)
	return []limitedDoor{
		{"database/sql", func(ctx context.Context, lock pgadvisory.Lock, n int, fn func(int) error, opts ...pgadvisory.Option) error {
			return sl.RunLimited(ctx, lock, n, func(tx *sql.Tx) error {
				slot, ok := sl.Slot(tx)
				if !ok {
					return errors.New("no slot for the call's tx")
				}
				return fn(slot)
			}, opts...)
		}},
		{"pgx", func(ctx context.Context, lock pgadvisory.Lock, n int, fn func(int) error, opts ...pgadvisory.Option) error {
			return pl.RunLimited(ctx, lock, n, func(tx pgx.Tx) error {
				slot, ok := pl.Slot(tx)
				if !ok {
					return errors.New("no slot for the call's tx")
				}
				return fn(slot)
			}, opts...)
		}},
	}
}

// slotKeys are the keys of lock's slots 0..n-1.
func slotKeys(id int64, n int) []int64 {
	keys := make([]int64, n)
	for i := range keys {
		keys[i] = keyspace.SlotID(id, int32(i))
	}
	return keys
}

// TestRunLimitedHoldsDistinctSlots: n calls inside fn at once hold n
// different slots (their keys granted in pg_locks), the call after them is
// refused with ErrLocked without running fn, and once one returns its slot
// is free for the next call. Both drivers.
func TestRunLimitedHoldsDistinctSlots(t *testing.T) {
	admin := migrated.DB(t)
	w := witness.Of(admin)
	for _, d := range limitedDoors(t) {
		t.Run(d.name, func(t *testing.T) {
			ctx := testdb.Context(t)
			lock := pgadvisory.Lock{Name: "test.limited", ID: testdb.Key(t)}
			const n = 3
			release := make(chan struct{})
			entered := make(chan int, n)
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- d.run(ctx, lock, n, func(slot int) error {
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
				select {
				case s := <-entered:
					require.False(t, seen[s], "slot %d held twice", s)
					require.True(t, s >= 0 && s < n)
					seen[s] = true
				case <-ctx.Done():
					t.Fatal("the holders did not enter fn")
				}
			}
			require.Equal(t, n, w.Locks(t, true, slotKeys(lock.ID, n)...), "n slot keys granted")
			require.Zero(t, w.Locks(t, true, lock.ID), "the lock's own key is not taken")

			ran := false
			err := d.run(ctx, lock, n, func(int) error { ran = true; return nil })
			require.ErrorIs(t, err, pgadvisory.ErrLocked)
			var pe *pgadvisory.Error
			require.ErrorAs(t, err, &pe)
			require.Equal(t, pgadvisory.Op("lock"), pe.Op)
			require.Equal(t, "test.limited", pe.Name)
			require.False(t, ran)

			close(release)
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			require.Zero(t, w.Locks(t, true, slotKeys(lock.ID, n)...), "every slot freed at commit")
			require.NoError(t, d.run(ctx, lock, n, func(int) error { ran = true; return nil }))
			require.True(t, ran)
		})
	}
}

// TestRunLimitedCommitsWithTheSlot: fn's writes commit with the call, and
// roll back with fn's error.
func TestRunLimitedCommitsWithTheSlot(t *testing.T) {
	db := migrated.DB(t)
	schema := testdb.Schema(t)
	ctx := testdb.Context(t)
	_, err := db.ExecContext(ctx, `CREATE TABLE `+schema+`.limited_writes (v text)`)
	require.NoError(t, err)
	l, err := pgadvisory.New(pgadvisory.Stdlib(db))
	require.NoError(t, err)
	lock := pgadvisory.Lock{Name: "test.limited_writes", ID: testdb.Key(t)}
	write := func(v string, fail error) error {
		return l.RunLimited(ctx, lock, 2, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO `+schema+`.limited_writes VALUES ($1)`, v); err != nil {
				return err
			}
			return fail
		})
	}
	require.NoError(t, write("kept", nil))
	boom := errors.New("boom")
	require.ErrorIs(t, write("rolled back", boom), boom)
	var got []string
	rows, err := db.QueryContext(ctx, `SELECT v FROM `+schema+`.limited_writes`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var v string
		require.NoError(t, rows.Scan(&v))
		got = append(got, v)
	}
	require.Equal(t, []string{"kept"}, got)
}

// TestRunLimitedMismatchedN: while a call with n = 3 holds a slot, calls
// with n = 5 and n = 2 are refused with ErrInvalidArgument naming both
// values, without running fn; once no slot is held, a call with n = 5
// changes the lock's limit, after which n = 3 is refused. The control:
// with the same n, a second call runs. Both drivers.
func TestRunLimitedMismatchedN(t *testing.T) {
	for _, d := range limitedDoors(t) {
		t.Run(d.name, func(t *testing.T) {
			ctx := testdb.Context(t)
			lock := pgadvisory.Lock{Name: "test.limited_n", ID: testdb.Key(t)}
			held := make(chan struct{})
			release := make(chan struct{})
			var releaseOnce sync.Once
			free := func() { releaseOnce.Do(func() { close(release) }) }
			defer free() // a failing check must not leave the holder inside fn
			done := make(chan error, 1)
			go func() {
				done <- d.run(ctx, lock, 3, func(int) error {
					close(held)
					<-release
					return nil
				})
			}()
			<-held
			for _, other := range []int{5, 2} {
				ran := false
				err := d.run(ctx, lock, other, func(int) error { ran = true; return nil })
				require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument, "n = %d", other)
				require.Contains(t, err.Error(), "n is "+itoa(other))
				require.Contains(t, err.Error(), "limited to 3")
				require.False(t, ran)
			}
			// Control: the same n runs beside the holder.
			require.NoError(t, d.run(ctx, lock, 3, func(int) error { return nil }))
			free()
			require.NoError(t, <-done)

			// No slot held: n = 5 changes the limit, then 3 is refused.
			require.NoError(t, d.run(ctx, lock, 5, func(int) error { return nil }))
			held2 := make(chan struct{})
			release2 := make(chan struct{})
			var release2Once sync.Once
			free2 := func() { release2Once.Do(func() { close(release2) }) }
			defer free2()
			go func() {
				done <- d.run(ctx, lock, 5, func(int) error {
					close(held2)
					<-release2
					return nil
				})
			}()
			<-held2
			err := d.run(ctx, lock, 3, func(int) error { return nil })
			require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument)
			require.Contains(t, err.Error(), "limited to 5")
			free2()
			require.NoError(t, <-done)
		})
	}
}

func itoa(n int) string { return string(rune('0' + n)) }

// TestRunLimitedRefusals: options and arguments that do not fit a limited
// call are refused with ErrInvalidArgument before anything is sent, and a
// lock declared WithLimit is refused by the other verbs; the control runs.
func TestRunLimitedRefusals(t *testing.T) {
	db := migrated.DB(t)
	ctx := testdb.Context(t)
	l, err := pgadvisory.New(pgadvisory.Stdlib(db))
	require.NoError(t, err)
	lock := pgadvisory.Lock{Name: "test.limited_refusals", ID: testdb.Key(t)}
	fn := func(*sql.Tx) error { return nil }
	for name, c := range map[string]struct {
		n    int
		opts []pgadvisory.Option
		want string
	}{
		"n=0":         {0, nil, "n = 0"},
		"n too large": {pgadvisory.MaxLimit + 1, nil, "1 to 1024"},
		"WithShared":  {3, []pgadvisory.Option{pgadvisory.WithShared()}, "slot is held exclusively"},
		"WithFencing": {3, []pgadvisory.Option{pgadvisory.WithFencing()}, "one published token"},
		"WithLocks":   {3, []pgadvisory.Option{pgadvisory.WithLocks(1)}, "one slot of one lock"},
		"WithHolder":  {3, []pgadvisory.Option{pgadvisory.WithHolder("x")}, "names no holder"},
		"declared 4":  {3, []pgadvisory.Option{pgadvisory.WithLimit(4)}, "declared with limit 4"},
		"WithLimit 0": {3, []pgadvisory.Option{pgadvisory.WithLimit(0)}, "WithLimit(0)"},
	} {
		err := l.RunLimited(ctx, lock, c.n, fn, c.opts...)
		require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument, name)
		require.ErrorContains(t, err, c.want, name)
	}
	limited := lock.With(pgadvisory.WithLimit(3))
	require.ErrorContains(t, l.RunOnce(ctx, limited, "w", fn), "WithLimit (declared with the lock test.limited_refusals")
	require.ErrorIs(t, l.RunExclusive(ctx, limited, fn), pgadvisory.ErrInvalidArgument)
	require.ErrorIs(t, l.RunSession(ctx, limited, func(context.Context) error { return nil }), pgadvisory.ErrInvalidArgument)
	// Control: the declared limit's own n runs.
	require.NoError(t, l.RunLimited(ctx, limited, 3, fn))
}

// TestRunLimitedSQLJobTakesASlot: a SQL job holding slots through
// pgadvisory.slot_id counts against the limit: with both slots of n = 2
// held by SQL, RunLimited is refused; with one, it runs in the other.
func TestRunLimitedSQLJobTakesASlot(t *testing.T) {
	db := migrated.DB(t)
	ctx := testdb.Context(t)
	l, err := pgadvisory.New(pgadvisory.Stdlib(db))
	require.NoError(t, err)
	lock := pgadvisory.Lock{Name: "test.limited_sql", ID: testdb.Key(t)}
	require.NoError(t, l.RunLimited(ctx, lock, 2, func(*sql.Tx) error { return nil })) // registers n = 2
	job, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = job.Rollback() }()
	var got bool
	require.NoError(t, job.QueryRowContext(ctx, `SELECT pg_try_advisory_xact_lock(pgadvisory.slot_id($1, 1))`, lock.ID).Scan(&got))
	require.True(t, got)
	require.NoError(t, l.RunLimited(ctx, lock, 2, func(tx *sql.Tx) error {
		slot, _ := l.Slot(tx)
		require.Equal(t, 0, slot, "the slot the SQL job left")
		return nil
	}))
	require.NoError(t, job.QueryRowContext(ctx, `SELECT pg_try_advisory_xact_lock(pgadvisory.slot_id($1, 0))`, lock.ID).Scan(&got))
	require.True(t, got)
	require.ErrorIs(t, l.RunLimited(ctx, lock, 2, func(*sql.Tx) error { return nil }), pgadvisory.ErrLocked)
	require.NoError(t, job.Rollback())
	require.NoError(t, l.RunLimited(ctx, lock, 2, func(*sql.Tx) error { return nil }))
}

// TestSlotOutsideFn: Slot and Locker.Slot report nothing outside fn.
func TestSlotOutsideFn(t *testing.T) {
	_, ok := pgadvisory.Slot(context.Background())
	require.False(t, ok)
	db := migrated.DB(t)
	l, err := pgadvisory.New(pgadvisory.Stdlib(db))
	require.NoError(t, err)
	var tx *sql.Tx
	_, ok = l.Slot(tx)
	require.False(t, ok)
}

// TestRunLimitedObserved: observers see a limited call as one call of kind
// run_limited (its registration and polls inside it), acquired then
// released; a call without a free slot as contended; a session-limited
// call as run_session_limited.
func TestRunLimitedObserved(t *testing.T) {
	db := migrated.DB(t)
	ctx := testdb.Context(t)
	lock := pgadvisory.Lock{Name: "test.limited_observed", ID: testdb.Key(t)}
	log := &callLog{keys: []int64{lock.ID}}
	l, err := pgadvisory.New(pgadvisory.Stdlib(db), pgadvisory.WithLockerObserver(log))
	require.NoError(t, err)
	kinds := func() []pgadvisory.EventKind {
		log.mu.Lock()
		defer log.mu.Unlock()
		last := log.calls[len(log.calls)-1]
		var ks []pgadvisory.EventKind
		for _, e := range last.events {
			ks = append(ks, e.Kind)
		}
		return ks
	}
	require.NoError(t, l.RunLimited(ctx, lock, 1, func(*sql.Tx) error { return nil })) // registers n = 1 inside the call
	require.Len(t, log.calls, 1)
	require.Equal(t, pgadvisory.CallLimited, log.calls[0].call.Kind)
	require.Equal(t, "run_limited", log.calls[0].call.Kind.String())
	require.Equal(t, []pgadvisory.EventKind{pgadvisory.EventAcquired, pgadvisory.EventReleased}, kinds())

	require.NoError(t, l.RunLimited(ctx, lock, 1, func(*sql.Tx) error {
		err := l.RunLimited(ctx, lock, 1, func(*sql.Tx) error { return nil })
		require.ErrorIs(t, err, pgadvisory.ErrLocked)
		require.Equal(t, []pgadvisory.EventKind{pgadvisory.EventContended}, kinds())
		return nil
	}))
	require.NoError(t, l.RunSessionLimited(ctx, lock, 1, func(context.Context) error { return nil }))
	require.Equal(t, pgadvisory.CallSessionLimited, log.calls[len(log.calls)-1].call.Kind)
	require.Equal(t, []pgadvisory.EventKind{pgadvisory.EventAcquired, pgadvisory.EventReleased}, kinds())
}

// TestRunLimitedThroughPgBouncer: RunLimited through PgBouncer in
// transaction mode (prepared and simple protocol; the pooler has two server
// connections), both drivers: the limit's registration, a holder through
// the pooler in one slot and a SQL job on a direct connection in the other
// (both granted in pg_locks), the next call refused with ErrLocked, a
// mismatched n refused, and the slots free once they end.
func TestRunLimitedThroughPgBouncer(t *testing.T) {
	admin := migrated.DB(t)
	w := witness.Of(admin)
	for _, mode := range []string{"exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			e := newPgBouncerPools(t, mode)
			sl, err := pgadvisory.New(pgadvisory.Stdlib(e.db))
			require.NoError(t, err)
			pl, err := pgadvisory.New(pgadvisory.Pgx(e.pool))
			require.NoError(t, err)
			ctx := testdb.Context(t)
			lock := pgadvisory.Lock{Name: "test.limited_pgbouncer", ID: testdb.Key(t)}
			require.NoError(t, pl.RunLimited(ctx, lock, 2, func(pgx.Tx) error { return nil })) // registers n = 2
			release := make(chan struct{})
			entered := make(chan int, 1)
			done := make(chan error, 1)
			go func() {
				done <- sl.RunLimited(ctx, lock, 2, func(tx *sql.Tx) error {
					s, _ := sl.Slot(tx)
					entered <- s
					<-release
					return nil
				})
			}()
			held := <-entered
			job, err := admin.BeginTx(ctx, nil)
			require.NoError(t, err)
			defer func() { _ = job.Rollback() }()
			var got bool
			require.NoError(t, job.QueryRowContext(ctx, `SELECT pg_try_advisory_xact_lock(pgadvisory.slot_id($1, $2))`, lock.ID, 1-held).Scan(&got))
			require.True(t, got)
			require.Equal(t, 2, w.Locks(t, true, slotKeys(lock.ID, 2)...))

			require.ErrorIs(t, pl.RunLimited(ctx, lock, 2, func(pgx.Tx) error { return nil }), pgadvisory.ErrLocked)
			err = pl.RunLimited(ctx, lock, 3, func(pgx.Tx) error { return nil })
			require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument)
			require.ErrorContains(t, err, "limited to 2")
			close(release)
			require.NoError(t, <-done)
			require.NoError(t, job.Rollback())
			require.Zero(t, w.Locks(t, true, slotKeys(lock.ID, 2)...))
			require.NoError(t, sl.RunLimited(ctx, lock, 2, func(*sql.Tx) error { return nil }))
		})
	}
}

// TestRunLimitedTakesOnlyFreeSlotsBelowN: with every slot of n = 4 but one
// held by a SQL job, each call takes that one (Locker.Slot names it, and
// its key is the one granted) from whichever slot it tries first; with all
// four held, every call is refused with ErrLocked, so no call takes a slot
// numbered n or more. Both drivers.
func TestRunLimitedTakesOnlyFreeSlotsBelowN(t *testing.T) {
	admin := migrated.DB(t)
	w := witness.Of(admin)
	for _, d := range limitedDoors(t) {
		t.Run(d.name, func(t *testing.T) {
			ctx := testdb.Context(t)
			lock := pgadvisory.Lock{Name: "test.limited_free", ID: testdb.Key(t)}
			const n = 4
			keys := slotKeys(lock.ID, n)
			require.NoError(t, d.run(ctx, lock, n, func(int) error { return nil })) // registers n
			for free := range n {
				job, err := admin.BeginTx(ctx, nil)
				require.NoError(t, err)
				t.Cleanup(func() { _ = job.Rollback() }) // also when a check fails
				for s, key := range keys {
					if s != free {
						_, err := job.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, key)
						require.NoError(t, err)
					}
				}
				for range 4 {
					require.NoError(t, d.run(ctx, lock, n, func(slot int) error {
						if slot != free {
							return errors.New("slot " + itoa(slot) + " reported, but only slot " + itoa(free) + " is free")
						}
						if w.Locks(t, true, keys[free]) != 1 {
							return errors.New("the free slot's key is not granted inside fn")
						}
						return nil
					}))
				}
				_, err = job.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, keys[free])
				require.NoError(t, err)
				for range 10 {
					err := d.run(ctx, lock, n, func(slot int) error { return errors.New("ran in slot " + itoa(slot)) })
					require.ErrorIs(t, err, pgadvisory.ErrLocked)
				}
				require.NoError(t, job.Rollback())
			}
		})
	}
}
