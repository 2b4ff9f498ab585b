package pgadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestOptionShared: shared holders coexist; an exclusive request is refused
// while a shared lock is held, and a shared one while an exclusive is held.
func TestOptionShared(t *testing.T) {
	frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
		ctx := testdb.Context(t)
		key := testdb.Key(t)
		shared := pgadvisory.WithShared()

		require.NoError(t, door.RunExclusive(ctx, key, func(frontdoor.Tx) error {
			inner := false
			require.NoError(t, door.RunExclusive(ctx, key, func(frontdoor.Tx) error { inner = true; return nil }, shared),
				"a second shared holder is admitted")
			require.True(t, inner)
			require.ErrorIs(t, door.RunExclusive(ctx, key, noop), pgadvisory.ErrLocked, "exclusive while shared is held")
			return nil
		}, shared))

		require.NoError(t, door.RunExclusive(ctx, key, func(frontdoor.Tx) error {
			require.ErrorIs(t, door.RunExclusive(ctx, key, noop, shared), pgadvisory.ErrLocked, "shared while exclusive is held")
			require.ErrorIs(t, door.RunExclusive(ctx, key, noop), pgadvisory.ErrLocked, "exclusive while exclusive is held")
			return nil
		}))

		// Control: with nothing held both modes are granted.
		require.NoError(t, door.RunExclusive(ctx, key, noop))
		require.NoError(t, door.RunExclusive(ctx, key, noop, shared))
	})
}

// TestOptionLocksAllOrNothing: when one lock of a WithLocks set is held
// elsewhere the call returns ErrLocked and, once the loser's background
// ROLLBACK is done, holds none of the others. Whichever position the busy
// key takes in the ascending order, locks granted before it are not kept.
func TestOptionLocksAllOrNothing(t *testing.T) {
	frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
		ctx := testdb.Context(t)
		check := testdb.DB(t)
		keys := []int64{testdb.Key(t), testdb.Key(t), testdb.Key(t)} // ascending
		for busy := range keys {
			release := door.Hold(t, keys[busy], nil)
			require.Equal(t, 1, witness.Of(check).Locks(t, true, keys[busy]), "checker sees the held lock")

			called := false
			err := door.RunExclusive(ctx, keys[0], func(frontdoor.Tx) error { called = true; return nil }, pgadvisory.WithLocks(keys[1:]...))
			require.ErrorIs(t, err, pgadvisory.ErrLocked, "busy key #%d", busy)
			require.False(t, called)

			others := make([]int64, 0, 2)
			for i, k := range keys {
				if i != busy {
					others = append(others, k)
				}
			}
			require.Eventually(t, func() bool { return witness.Of(check).Locks(t, true, others...) == 0 },
				10*time.Second, 5*time.Millisecond, "busy key #%d: the other locks of the set must not stay held", busy)
			require.Equal(t, 1, witness.Of(check).Locks(t, true, keys...), "only the holder's lock remains")
			require.NoError(t, release())
		}

		// With nothing held, the whole set is granted together.
		require.NoError(t, door.RunExclusive(ctx, keys[2], func(frontdoor.Tx) error {
			require.Equal(t, 3, witness.Of(check).Locks(t, true, keys...))
			return nil
		}, pgadvisory.WithLocks(keys[1], keys[0])))
		require.Eventually(t, func() bool { return witness.Of(check).Locks(t, true, keys...) == 0 },
			10*time.Second, 5*time.Millisecond)
	})
}

// TestOptionLocksDuplicates: repeated IDs are taken once; the call's lock set
// (as observers and errors report it) is sorted and free of duplicates.
func TestOptionLocksDuplicates(t *testing.T) {
	frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
		ctx := testdb.Context(t)
		check := testdb.DB(t)
		a, b := testdb.Key(t), testdb.Key(t)
		var events []pgadvisory.Event
		observe := pgadvisory.WithObserver(func(e pgadvisory.Event) { events = append(events, e) })

		require.NoError(t, door.RunExclusive(ctx, b, func(frontdoor.Tx) error {
			require.Equal(t, 2, witness.Of(check).Locks(t, true, a, b))
			return nil
		}, pgadvisory.WithLocks(a, b, a, b, b), observe))
		require.NotEmpty(t, events)
		for _, e := range events {
			require.Equal(t, []int64{a, b}, e.LockIDs)
		}

		release := door.Hold(t, a, nil)
		err := door.RunExclusive(ctx, b, noop, pgadvisory.WithLocks(b, a, a), pgadvisory.WithWait(20*time.Millisecond))
		require.ErrorIs(t, err, pgadvisory.ErrLockTimeout)
		var pe *pgadvisory.Error
		require.ErrorAs(t, err, &pe)
		require.Equal(t, []int64{a, b}, pe.LockIDs)
		require.NoError(t, release())
	})
}

// TestOptionWaitZero: WithWait(0) waits (no time limit) until the holder
// commits, and then sees the holder's committed write.
func TestOptionWaitZero(t *testing.T) {
	frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
		ctx := testdb.Context(t)
		check := migrated.DB(t)
		table := newLedger(t, check)
		key := testdb.Key(t)

		release := door.Hold(t, key, func(tx frontdoor.Tx) error {
			return tx.Exec(ctx, "INSERT INTO "+table+" (seq) VALUES (1)")
		})
		done := make(chan error, 1)
		var seen int
		go func() {
			done <- door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
				return tx.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&seen)
			}, pgadvisory.WithWait(0))
		}()
		require.Eventually(t, func() bool { return queueRows(t, check, key) == 1 },
			10*time.Second, 5*time.Millisecond, "the second call waits in the lock's queue")
		select {
		case err := <-done:
			t.Fatalf("WithWait(0) returned while the lock was held: %v", err)
		default:
		}
		require.NoError(t, release())
		require.NoError(t, frontdoor.Await(t, done, "the waiter's return"))
		require.Equal(t, 1, seen, "the waiter sees the holder's committed row")
	})
}

// TestOptionWaitTimeout: WithWait(d) while the lock is held returns
// ErrLockTimeout in an *Error (Op "lock"): for one lock or a set, waiting
// in lockgen's queue, without SQLSTATE (no statement failed); on a Locker
// that waits in the server's queue (as on a database without migration
// 00011), with SQLSTATE 55P03 and the server's error. fn is not called;
// the holder is unaffected; and lock_timeout does not leak to the pooled
// connection (each waiter has a single one).
func TestOptionWaitTimeout(t *testing.T) {
	migrated.DB(t)
	frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
		ctx := testdb.Context(t)
		waiter := frontdoor.Open(t, door.Driver, frontdoor.MaxConns(1))
		server := serverQueue(frontdoor.Open(t, door.Driver, frontdoor.MaxConns(1)))
		key, other := testdb.Key(t), testdb.Key(t)
		release := door.Hold(t, key, nil)

		called := false
		fn := func(frontdoor.Tx) error { called = true; return nil }
		err := waiter.RunExclusive(ctx, key, fn, pgadvisory.WithWait(30*time.Millisecond))
		pe := sqlstate.RequireTyped(t, err, pgadvisory.ErrLockTimeout, "lock", "")
		require.Equal(t, []int64{key}, pe.LockIDs)
		err = waiter.RunExclusive(ctx, other, fn, pgadvisory.WithLocks(key), pgadvisory.WithWait(30*time.Millisecond))
		pe = sqlstate.RequireTyped(t, err, pgadvisory.ErrLockTimeout, "lock", "")
		require.ElementsMatch(t, []int64{key, other}, pe.LockIDs)
		err = server.RunExclusive(ctx, other, fn, pgadvisory.WithLocks(key), pgadvisory.WithWait(30*time.Millisecond))
		sqlstate.RequireTyped(t, err, pgadvisory.ErrLockTimeout, "lock", "55P03")
		require.False(t, called, "fn must not run after a timeout")

		require.NoError(t, release(), "the holder commits normally")

		// The same (only) connections: no lock_timeout left behind.
		for _, d := range []frontdoor.Door{waiter, server} {
			var setting string
			require.NoError(t, d.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
				return tx.QueryRow(ctx, "SHOW lock_timeout").Scan(&setting)
			}))
			require.Equal(t, "0", setting)
		}
	})
}

// TestOptionReadOnly: read-only transaction options reach the server; a write
// inside fn fails with 25006. The control without the option writes.
func TestOptionReadOnly(t *testing.T) {
	frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
		ctx := testdb.Context(t)
		check := testdb.DB(t)
		table := newLedger(t, check)
		key := testdb.Key(t)
		insert := func(tx frontdoor.Tx) error { return tx.Exec(ctx, "INSERT INTO "+table+" (seq) VALUES (1)") }

		readOnly := []pgadvisory.Option{
			pgadvisory.WithTxOptions(sql.TxOptions{ReadOnly: true}),
			pgadvisory.WithPgxTxOptions(pgx.TxOptions{AccessMode: pgx.ReadOnly}),
		}
		for _, opt := range readOnly {
			err := door.RunExclusive(ctx, key, insert, opt)
			sqlstate.Require(t, err, "25006")
		}
		require.Zero(t, readLedger(t, check, table).rows)

		require.NoError(t, door.RunExclusive(ctx, key, insert, pgadvisory.WithTxOptions(sql.TxOptions{})))
		require.EqualValues(t, 1, readLedger(t, check, table).rows)
	})
}

// TestOptionInvalidArguments: bad options and nil arguments return
// ErrInvalidArgument from every entry point, never a panic, and never call
// fn.
func TestOptionInvalidArguments(t *testing.T) {
	ctx := testdb.Context(t)
	db := testdb.DB(t)
	pool := testdb.Pool(t)
	key := testdb.Key(t)
	lock := pgadvisory.Lock{Name: "tests.invalid", ID: key}

	called := false
	txFn := func(*sql.Tx) error { called = true; return nil }
	pgxFn := func(pgx.Tx) error { called = true; return nil }
	sessionFn := func(context.Context) error { called = true; return nil }
	var (
		nilDB     *sql.DB
		nilPool   *pgxpool.Pool
		nilTxFn   func(*sql.Tx) error
		nilPgxFn  func(pgx.Tx) error
		nilSessFn func(context.Context) error
	)

	badOptions := map[string]pgadvisory.Option{
		"WithWait(-1s)":          pgadvisory.WithWait(-time.Second),
		"WithCheckInterval(-1s)": pgadvisory.WithCheckInterval(-time.Second),
		"WithCheckInterval(0)":   pgadvisory.WithCheckInterval(0),
		"WithCheckTimeout(-1s)":  pgadvisory.WithCheckTimeout(-time.Second),
		"WithCheckTimeout(0)":    pgadvisory.WithCheckTimeout(0),
	}
	calls := map[string]func() error{
		"RunExclusive nil db":       func() error { return pgadvisory.RunExclusive(ctx, nilDB, key, txFn) },
		"RunExclusive nil fn":       func() error { return pgadvisory.RunExclusive(ctx, db, key, nilTxFn) },
		"RunExclusivePgx nil pool":  func() error { return pgadvisory.RunExclusivePgx(ctx, nilPool, key, pgxFn) },
		"RunExclusivePgx nil fn":    func() error { return pgadvisory.RunExclusivePgx(ctx, pool, key, nilPgxFn) },
		"RunSession nil db":         func() error { return pgadvisory.RunSession(ctx, nilDB, key, sessionFn) },
		"RunSession nil fn":         func() error { return pgadvisory.RunSession(ctx, db, key, nilSessFn) },
		"RunSessionPgx nil pool":    func() error { return pgadvisory.RunSessionPgx(ctx, nilPool, key, sessionFn) },
		"RunSessionPgx nil fn":      func() error { return pgadvisory.RunSessionPgx(ctx, pool, key, nilSessFn) },
		"Lock.RunExclusive nil db":  func() error { return lock.RunExclusive(ctx, nilDB, txFn) },
		"Lock.RunExclusivePgx nil":  func() error { return lock.RunExclusivePgx(ctx, nilPool, nilPgxFn) },
		"Lock.RunSession nil fn":    func() error { return lock.RunSession(ctx, db, nilSessFn) },
		"Lock.RunSessionPgx nil db": func() error { return lock.RunSessionPgx(ctx, nilPool, sessionFn) },
	}
	for name, opt := range badOptions {
		calls["RunExclusive "+name] = func() error { return pgadvisory.RunExclusive(ctx, db, key, txFn, opt) }
		calls["RunExclusivePgx "+name] = func() error { return pgadvisory.RunExclusivePgx(ctx, pool, key, pgxFn, opt) }
		calls["RunSession "+name] = func() error { return pgadvisory.RunSession(ctx, db, key, sessionFn, opt) }
		calls["RunSessionPgx "+name] = func() error { return pgadvisory.RunSessionPgx(ctx, pool, key, sessionFn, opt) }
	}
	for name, call := range calls {
		var err error
		require.NotPanics(t, func() { err = call() }, name)
		require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument, name)
		var pe *pgadvisory.Error
		require.ErrorAs(t, err, &pe, name)
		require.False(t, called, "%s: fn must not run", name)
	}

	// Control: valid arguments on the same handles do run fn.
	require.NoError(t, pgadvisory.RunExclusive(ctx, db, key, txFn, pgadvisory.WithWait(time.Second)))
	require.True(t, called)
}

// TestLockNameInErrors: errors from Lock.RunExclusive and
// Lock.RunExclusivePgx carry the lock's declared name in *Error.Name and in
// the message.
func TestLockNameInErrors(t *testing.T) {
	frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
		ctx := testdb.Context(t)
		lock := pgadvisory.Lock{Name: "reports.daily_email", ID: testdb.Key(t)}
		release := door.Hold(t, lock.ID, nil)

		err := door.RunExclusiveLock(ctx, lock, noop, pgadvisory.WithWait(20*time.Millisecond))
		require.ErrorIs(t, err, pgadvisory.ErrLockTimeout)
		var pe *pgadvisory.Error
		require.ErrorAs(t, err, &pe)
		require.Equal(t, lock.Name, pe.Name)
		require.Contains(t, err.Error(), lock.Name)
		require.Contains(t, err.Error(), strconv.FormatInt(lock.ID, 10))

		// Control: the same call by ID alone carries no name.
		err = door.RunExclusive(ctx, lock.ID, noop, pgadvisory.WithWait(20*time.Millisecond))
		require.ErrorAs(t, err, &pe)
		require.Empty(t, pe.Name)
		require.False(t, strings.Contains(err.Error(), lock.Name))

		require.NoError(t, release())
		require.NoError(t, door.RunExclusiveLock(ctx, lock, noop))
	})
}

// TestOptionLocksDeadlockFree: two groups wait for the same two locks named
// in opposite orders. WithLocks sorts the set, so no call ever deadlocks.
func TestOptionLocksDeadlockFree(t *testing.T) {
	frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
		ctx := testdb.Context(t)
		a, b := testdb.Key(t), testdb.Key(t)
		const perGroup, iters = 2, 12
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			errs []error
		)
		start := make(chan struct{})
		for g := range 2 * perGroup {
			first, second := a, b
			if g%2 == 1 {
				first, second = b, a
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for range iters {
					err := door.RunExclusive(ctx, first, func(frontdoor.Tx) error { time.Sleep(time.Millisecond); return nil },
						pgadvisory.WithLocks(second), pgadvisory.WithWait(30*time.Second))
					if err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
				}
			}()
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			require.NotErrorIs(t, err, pgadvisory.ErrDeadlock)
		}
		require.Empty(t, errs)
	})
}

// TestOptionLocksDeadlockControl: hand-written transactions taking the same
// two locks in opposite orders do deadlock (40P01), which is what the sorted
// order above prevents. One attempt: detection takes deadlock_timeout (1s).
func TestOptionLocksDeadlockControl(t *testing.T) {
	ctx := testdb.Context(t)
	db := testdb.DB(t)
	a, b := testdb.Key(t), testdb.Key(t)
	var firstTaken, wg sync.WaitGroup
	firstTaken.Add(2)
	errs := make([]error, 2)
	for i, order := range [][2]int64{{a, b}, {b, a}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = func() error {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					firstTaken.Done()
					return err
				}
				defer func() { _ = tx.Rollback() }()
				_, err = tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", order[0])
				firstTaken.Done()
				if err != nil {
					return err
				}
				firstTaken.Wait() // both hold their first lock
				if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", order[1]); err != nil {
					return err
				}
				return tx.Commit()
			}()
		}()
	}
	wg.Wait()
	deadlocks := 0
	for _, err := range errs {
		if err != nil {
			sqlstate.Require(t, err, "40P01")
			deadlocks++
		}
	}
	require.Equal(t, 1, deadlocks, "opposite lock orders must deadlock: %v", errors.Join(errs...))
}

// noop is an fn that does nothing.
func noop(frontdoor.Tx) error { return nil }
