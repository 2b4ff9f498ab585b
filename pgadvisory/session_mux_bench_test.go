package pgadvisory_test

// Benchmarks of session locks on shared connections against their
// baselines, in the same run (SUITE=session .ci/bench):
//
//	Session/<door>/multiplexed      <= 1.2 x Session/<door>/dedicated
//	SessionHandoff/pgx/lockgen      <= 1.5 x SessionHandoff/pgx/raw_retry
//	SessionHandoff/pgx/lockgen_set  <= 1.5 x SessionHandoff/pgx/raw_retry_set
//
// Session: one acquire+release of a session lock with an empty fn, on a
// pool whose session locks share connections (the default) and on one
// where every call has its own (SetSessionConns 0, the behaviour before
// sharing). multiplexed: the only lock of its pool, so each call takes the
// shared connection from the pool and gives it back; multiplexed_busy:
// two other locks of the pool are held throughout, so both shared
// connections stay open (the case of many locks).
//
// SessionHandoff: from the moment a holder's fn returns (a graceful
// release) until the fn of a call waiting for the lock (WithWait; _set: a
// set of 3, WithLocks) starts. Its waiter holds no connection (lockgen's
// queue): after the release it needs a round trip of its own to take the
// lock, so its floor is raw_retry, a bare pg_advisory_unlock on one raw
// connection and then a pg_try_advisory_lock on another, in sequence. raw
// is the server's queue, whose waiter holds a connection: a
// pg_advisory_lock waiting on another connection returns (of each key of
// the set, in one statement); lockgen_busy is lockgen with both shared
// connections kept open by other locks; all timed with time.Now at
// those two points and reported as ns/op (the benchmark timer, which also
// runs while the goroutines hand over, only sizes b.N).
//
// SessionMemory: the heap and stack that 1,000 held session locks take,
// per lock (B/lock), measured as the difference from before they were
// taken (the fn goroutines are counted: every call has one).

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/wirecount"
	"github.com/lockgen/lockgen/pgadvisory"
)

func BenchmarkSession(b *testing.B) {
	ctx := context.Background()
	empty := func(context.Context) error { return nil }
	pgxCase := func(name string, conns int, busy bool) benchCase {
		return benchCase{name, func(b *testing.B) {
			c := wirecount.New()
			pool := benchPool(b, c)
			if err := pgadvisory.SetSessionConnsPgx(pool, conns); err != nil {
				b.Fatal(err)
			}
			if busy {
				for i := range int64(2) {
					benchHoldSession(b, func(fn func(context.Context) error) error {
						return pgadvisory.RunSessionPgx(ctx, pool, testdb.Key(b)+(i+1)<<40, fn)
					})
				}
			}
			key := testdb.Key(b)
			idle := func() bool { return pool.Stat().AcquiredConns() == map[bool]int32{true: 2, false: 0}[busy] }
			benchOp(b, c, backToBack, nil, idle, func() error { return pgadvisory.RunSessionPgx(ctx, pool, key, empty) })
		}}
	}
	sqlCase := func(name string, conns int, busy bool) benchCase {
		return benchCase{name, func(b *testing.B) {
			c := wirecount.New()
			db := benchDB(b, c)
			if err := pgadvisory.SetSessionConns(db, conns); err != nil {
				b.Fatal(err)
			}
			if busy {
				for i := range int64(2) {
					benchHoldSession(b, func(fn func(context.Context) error) error {
						return pgadvisory.RunSession(ctx, db, testdb.Key(b)+(i+1)<<40, fn)
					})
				}
			}
			key := testdb.Key(b)
			idle := func() bool { return db.Stats().InUse == map[bool]int{true: 2, false: 0}[busy] }
			benchOp(b, c, backToBack, nil, idle, func() error { return pgadvisory.RunSession(ctx, db, key, empty) })
		}}
	}
	b.Run("pgx", func(b *testing.B) {
		runCases(b, pgxCase("dedicated", 0, false), pgxCase("multiplexed", 2, false), pgxCase("multiplexed_busy", 2, true))
	})
	b.Run("stdlib", func(b *testing.B) {
		runCases(b, sqlCase("dedicated", 0, false), sqlCase("multiplexed", 2, false), sqlCase("multiplexed_busy", 2, true))
	})
}

// benchHoldSession runs a session call through run that holds its lock
// until b ends.
func benchHoldSession(b *testing.B, run func(fn func(context.Context) error) error) {
	b.Helper()
	in, out, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- run(func(context.Context) error { close(in); <-out; return nil })
	}()
	select {
	case <-in:
	case err := <-done:
		b.Fatal(err)
	}
	b.Cleanup(func() {
		close(out)
		if err := <-done; err != nil {
			b.Error(err)
		}
	})
}

func BenchmarkSessionHandoff(b *testing.B) {
	migrated.DB(b) // lockgen's queue, which the waiting calls use
	ctx := context.Background()
	// raw: the server's queue on two raw connections, for one key or a set
	// (locked and unlocked in one statement each). With retry, the floor
	// of a hand-off to a waiter that holds no connection (it is not in the
	// server's queue): the holder's unlock on one raw connection, then,
	// once it returned, the waiter's try on another, in sequence: two
	// round trips.
	raw := func(name string, n int, retry bool) benchCase {
		return benchCase{name, func(b *testing.B) {
			pool := benchPool(b, wirecount.New())
			holder, err := pool.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer holder.Release()
			waiter, err := pool.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer waiter.Release()
			keys := benchKeys(b, n)
			lock := "SELECT count(pg_advisory_lock(k)) FROM unnest($1::bigint[]) AS k"
			try := "SELECT bool_and(pg_try_advisory_lock(k)) FROM unnest($1::bigint[]) AS k"
			unlock := "SELECT count(pg_advisory_unlock(k)) FROM unnest($1::bigint[]) AS k"
			var total time.Duration
			b.StopTimer()
			for range b.N {
				if _, err := holder.Exec(ctx, lock, keys); err != nil {
					b.Fatal(err)
				}
				released, granted := make(chan struct{}), make(chan time.Time, 1)
				go func() {
					if retry {
						<-released
						var ok bool
						if err := waiter.QueryRow(ctx, try, keys).Scan(&ok); err != nil || !ok {
							b.Error("the retry was not granted", err)
						}
					} else if _, err := waiter.Exec(ctx, lock, keys); err != nil {
						b.Error(err)
					}
					granted <- time.Now()
				}()
				if !retry {
					awaitWaiting(b, pool, keys[0], 1)
				}
				b.StartTimer()
				start := time.Now()
				if _, err := holder.Exec(ctx, unlock, keys); err != nil {
					b.Fatal(err)
				}
				close(released)
				total += (<-granted).Sub(start)
				b.StopTimer()
				if _, err := waiter.Exec(ctx, unlock, keys); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/op")
		}}
	}
	// lockgen: a waiting RunSession in lockgen's queue, on one key or a
	// set (WithLocks); busy: two other locks hold both shared connections
	// open throughout, so the waiter's try does not take a connection from
	// the pool.
	lockgen := func(name string, n int, busy bool) benchCase {
		return benchCase{name, func(b *testing.B) {
			pool := benchPool(b, wirecount.New())
			if busy {
				for i := range int64(2) {
					benchHoldSession(b, func(fn func(context.Context) error) error {
						return pgadvisory.RunSessionPgx(ctx, pool, testdb.Key(b)+(i+1)<<40, fn)
					})
				}
			}
			keys := benchKeys(b, n)
			opts := []pgadvisory.Option{pgadvisory.WithLocks(keys[1:]...)}
			var total time.Duration
			b.StopTimer()
			for range b.N {
				in, out, held := make(chan struct{}), make(chan struct{}), make(chan error, 1)
				var resigned time.Time
				go func() {
					held <- pgadvisory.RunSessionPgx(ctx, pool, keys[0], func(context.Context) error {
						close(in)
						<-out
						resigned = time.Now() // fn returns: a graceful release
						return nil
					}, opts...)
				}()
				<-in
				started, waited := make(chan time.Time, 1), make(chan error, 1)
				go func() {
					waited <- pgadvisory.RunSessionPgx(ctx, pool, keys[0], func(context.Context) error {
						started <- time.Now()
						return nil
					}, append(opts, pgadvisory.WithWait(0))...)
				}()
				awaitWaiting(b, pool, keys[0], 1)
				b.StartTimer()
				close(out)
				t := <-started
				b.StopTimer()
				if err := <-held; err != nil {
					b.Fatal(err)
				}
				total += t.Sub(resigned)
				if err := <-waited; err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/op")
		}}
	}
	b.Run("pgx", func(b *testing.B) {
		runCases(b, raw("raw", 1, false), raw("raw_retry", 1, true), lockgen("lockgen", 1, false), lockgen("lockgen_busy", 1, true),
			raw("raw_set", 3, false), raw("raw_retry_set", 3, true), lockgen("lockgen_set", 3, false))
	})
}

// benchKeys is n fresh lock keys.
func benchKeys(b *testing.B, n int) []int64 {
	keys := make([]int64, n)
	for i := range keys {
		keys[i] = testdb.Key(b)
	}
	return keys
}

// awaitWaiting polls until n calls wait for key: backends in the server's
// queue (raw) or rows of lockgen's queue (a waiting RunSession).
func awaitWaiting(b *testing.B, pool *pgxpool.Pool, key int64, n int) {
	b.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Microsecond) {
		var waiting int
		err := pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM pg_catalog.pg_locks WHERE locktype = 'advisory'
  AND NOT granted AND ((classid::bigint << 32) | objid::bigint) = $1)
  + (SELECT count(*) FROM pgadvisory.waiter WHERE lock_id = $1 AND expires > clock_timestamp())`, key).Scan(&waiting)
		if err != nil {
			b.Fatal(err)
		}
		if waiting >= n {
			return
		}
		if time.Now().After(deadline) {
			b.Fatal("the waiter never waited")
		}
	}
}

func BenchmarkSessionMemory(b *testing.B) {
	const locks = 1000
	ctx := context.Background()
	run := func(b *testing.B, hold func(key int64, fn func(context.Context) error) error) {
		base := testdb.Key(b) << 12
		var heap, stack float64
		for b.Loop() {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			var inside sync.WaitGroup
			inside.Add(locks)
			release := make(chan struct{})
			errs := make(chan error, locks)
			for i := range locks {
				go func() {
					errs <- hold(base+int64(i), func(context.Context) error { inside.Done(); <-release; return nil })
				}()
			}
			inside.Wait()
			runtime.GC()
			runtime.ReadMemStats(&after)
			heap = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / locks
			stack = float64(int64(after.StackInuse)-int64(before.StackInuse)) / locks
			close(release)
			for range locks {
				if err := <-errs; err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(heap, "heap-B/lock")
		b.ReportMetric(stack, "stack-B/lock")
	}
	b.Run("pgx", func(b *testing.B) {
		pool := testdb.PoolConfig(b, func(cfg *pgxpool.Config) { cfg.MaxConns = 4 })
		run(b, func(key int64, fn func(context.Context) error) error {
			return pgadvisory.RunSessionPgx(ctx, pool, key, fn)
		})
	})
	b.Run("stdlib", func(b *testing.B) {
		db := testdb.DB(b)
		run(b, func(key int64, fn func(context.Context) error) error {
			return pgadvisory.RunSession(ctx, db, key, fn)
		})
	}) // Leaderships: a session lock each, plus its term.
	b.Run("pgx_lead", func(b *testing.B) {
		migrated.DB(b)
		pool := testdb.PoolConfig(b, func(cfg *pgxpool.Config) { cfg.MaxConns = 4 })
		run(b, func(key int64, fn func(context.Context) error) error {
			return pgadvisory.LeadPgx(ctx, pool, key, func(ctx context.Context, _ int64) error { return fn(ctx) })
		})
	})
	b.Run("stdlib_lead", func(b *testing.B) {
		db := migrated.DB(b)
		run(b, func(key int64, fn func(context.Context) error) error {
			return pgadvisory.Lead(ctx, db, key, func(ctx context.Context, _ int64) error { return fn(ctx) })
		})
	})
}
