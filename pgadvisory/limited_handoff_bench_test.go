package pgadvisory_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// BenchmarkLimitedHandoff: every slot busy and 16 callers waiting
// (WithWait), how long a freed slot stays unused. Each caller holds its
// slot for 1ms inside fn and calls again at once; the hand-off of a slot is
// the time from a holder's fn returning (its COMMIT follows) to the next
// waiter's fn starting. The metric handoff-µs is the median hand-off; a
// sub-benchmark's ns/op is the wall time per hand-off.
//
//	limited_n3:         RunLimited, n = 3, 3 holders + 16 waiters (pgx),
//	                    one Locker: a release wakes its first waiter
//	                    directly or by NOTIFY
//	limited_n3_lockers: the same callers alternately on two Lockers on
//	                    two pools: a release's NOTIFY wakes the other
//	                    Locker's first waiter
//	exclusive:          RunExclusive WithWait on one lock, 1 holder + 16
//	                    waiters in lockgen's queue (woken by NOTIFY): a
//	                    single lock's hand-off, the baseline
//	bare_server:        pgx transactions of BEGIN, pg_advisory_xact_lock,
//	                    fn, COMMIT on one lock, 1 holder + 16 waiters
//	                    blocking in the server's queue (no lockgen)
//
// The claim: a slot is handed on within 2 round trips of a release where
// NOTIFY reaches the waiter, measured as handoff-µs ÷ exclusive's.
func BenchmarkLimitedHandoff(b *testing.B) {
	const waiters = 16
	pool, l, l2 := handoffLockers(b)
	runCases(b,
		benchCase{"limited_n3", func(b *testing.B) {
			benchRelay(b, 3+waiters, limitedCaller(l, l, testdb.Key(b)))
		}},
		benchCase{"limited_n3_lockers", func(b *testing.B) {
			benchRelay(b, 3+waiters, limitedCaller(l, l2, testdb.Key(b)))
		}},
		benchCase{"exclusive", func(b *testing.B) {
			benchRelay(b, 1+waiters, queuedCaller(l, testdb.Key(b)))
		}},
		benchCase{"bare_server", func(b *testing.B) {
			benchRelay(b, 1+waiters, bareServerCall(pool, testdb.Key(b)))
		}},
	)
}

// handoffLockers are the hand-off benchmarks' Lockers: one on a migrated
// pool of 24 connections, which it returns too, and one on another pool of
// 12.
func handoffLockers(b *testing.B) (*pgxpool.Pool, *pgadvisory.Locker[pgx.Tx], *pgadvisory.Locker[pgx.Tx]) {
	b.Helper()
	pool := testdb.PoolConfig(b, func(cfg *pgxpool.Config) { cfg.MaxConns = 24 })
	db := stdlib.OpenDBFromPool(pool)
	b.Cleanup(func() { _ = db.Close() })
	if err := pgadvisory.Migrate(context.Background(), db); err != nil {
		b.Fatal(err)
	}
	l, err := pgadvisory.New(pgadvisory.Pgx(pool))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	l2, err := pgadvisory.New(pgadvisory.Pgx(testdb.PoolConfig(b, func(cfg *pgxpool.Config) { cfg.MaxConns = 12 })))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l2.Close() })
	return pool, l, l2
}

// limitedCaller is a caller of the relays that runs fn with RunLimited,
// n = 3 and WithWait(0), on l, or on l2 when the caller's number is odd.
func limitedCaller(l, l2 *pgadvisory.Locker[pgx.Tx], key int64) func(ctx context.Context, caller int, fn func() error) error {
	return func(ctx context.Context, caller int, fn func() error) error {
		lk := l
		if caller%2 == 1 {
			lk = l2
		}
		return lk.RunLimited(ctx, pgadvisory.ID(key), 3, func(pgx.Tx) error { return fn() }, pgadvisory.WithWait(0))
	}
}

// queuedCaller is a caller of the relays that runs fn with RunExclusive
// and WithWait(0) on l: it waits in lockgen's queue.
func queuedCaller(l *pgadvisory.Locker[pgx.Tx], key int64) func(ctx context.Context, caller int, fn func() error) error {
	return func(ctx context.Context, _ int, fn func() error) error {
		return l.RunExclusive(ctx, pgadvisory.ID(key), func(pgx.Tx) error { return fn() }, pgadvisory.WithWait(0))
	}
}

// bareServerCall is a caller of the relays that runs fn in a pgx
// transaction on pool after waiting for key in the server's queue
// (pg_advisory_xact_lock): a single lock's hand-off without lockgen.
func bareServerCall(pool *pgxpool.Pool, key int64) func(ctx context.Context, _ int, fn func() error) error {
	return func(ctx context.Context, _ int, fn func() error) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", key); err != nil {
				return err
			}
			return fn()
		})
	}
}

// benchRelay runs callers goroutines that call run again and again (caller
// is the goroutine's number), each
// holding for 1ms inside fn, until b.N hand-offs were seen: a fn that
// starts takes the earliest exit not yet taken, and the time between them
// is its hand-off.
func benchRelay(b *testing.B, callers int, run func(ctx context.Context, caller int, fn func() error) error) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var exits []time.Time // slots freed, not yet taken again
	var handoffs []time.Duration
	done := make(chan struct{})
	warm := 2 * callers // hand-offs before measuring
	fn := func() error {
		start := time.Now()
		mu.Lock()
		if len(exits) > 0 {
			if warm > 0 {
				warm--
			} else if len(handoffs) < b.N {
				handoffs = append(handoffs, start.Sub(exits[0]))
				if len(handoffs) == b.N {
					close(done)
				}
			}
			exits = exits[1:]
		}
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		exits = append(exits, time.Now())
		mu.Unlock()
		return nil
	}
	var wg sync.WaitGroup
	b.ResetTimer()
	for caller := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := run(ctx, caller, fn); err != nil && ctx.Err() == nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Error("too few hand-offs")
	}
	b.StopTimer()
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(handoffs) == 0 {
		return
	}
	slices.Sort(handoffs)
	b.ReportMetric(float64(handoffs[len(handoffs)/2].Microseconds()), "handoff-µs")
	b.ReportMetric(float64(handoffs[len(handoffs)*9/10].Microseconds()), "p90-handoff-µs")
}
