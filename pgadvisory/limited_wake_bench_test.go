package pgadvisory_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// BenchmarkLimitedWakeHandoff: every slot busy and 16 callers waiting
// (WithWait) and asleep, how long a released slot stays unused. Unlike
// BenchmarkLimitedHandoff, a holder does not call again until its slot has
// gone to a waiter, and releases are 30ms apart, so each hand-off is a
// sleeping waiter woken (or its poll) and nothing else: the path the claim
// is about. A hand-off is the time from a holder's fn returning (its
// COMMIT follows) to the next fn starting; median-µs is their median.
//
//	limited_n3:         RunLimited, n = 3: 3 holders + 16 waiters on one
//	                    Locker (pgx); a release wakes the Locker's first
//	                    waiter after its COMMIT
//	limited_n3_lockers: the same callers alternately on two Lockers on two
//	                    pools: the other Locker's waiters are woken by the
//	                    release's NOTIFY
//	exclusive_queue:    RunExclusive WithWait on one lock, 1 holder + 16
//	                    waiters in lockgen's queue (woken by NOTIFY)
//	bare_server:        pgx transactions of BEGIN, pg_advisory_xact_lock,
//	                    fn, COMMIT, 1 holder + 16 waiters: a single lock's
//	                    hand-off in the server's queue, no lockgen
//	round_trip:         SELECT 1 on the pool: one round trip (the floor)
//
// The claim (.ci/bench SUITE=limited): a slot is handed on within 2 round
// trips of a release, measured as limited_n3 ÷ bare_server <= 2 (the
// server grants the single lock inside a statement already sent, so its
// hand-off is the release's COMMIT; a slot needs that COMMIT and one new
// statement).
func BenchmarkLimitedWakeHandoff(b *testing.B) {
	const waiters = 16
	pool, l, l2 := handoffLockers(b)
	ctx := context.Background()
	runCases(b,
		benchCase{"limited_n3", func(b *testing.B) {
			wakeRelay(b, 3, waiters, limitedCaller(l, l, testdb.Key(b)))
		}},
		benchCase{"limited_n3_lockers", func(b *testing.B) {
			wakeRelay(b, 3, waiters, limitedCaller(l, l2, testdb.Key(b)))
		}},
		benchCase{"exclusive_queue", func(b *testing.B) {
			wakeRelay(b, 1, waiters, queuedCaller(l, testdb.Key(b)))
		}},
		benchCase{"bare_server", func(b *testing.B) {
			wakeRelay(b, 1, waiters, bareServerCall(pool, testdb.Key(b)))
		}},
		benchCase{"round_trip", func(b *testing.B) {
			rts := make([]time.Duration, 0, b.N)
			var one int
			for range b.N {
				start := time.Now()
				if err := pool.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
					b.Fatal(err)
				}
				rts = append(rts, time.Since(start))
			}
			reportMedians(b, rts)
		}},
	)
}

// wakeRelay runs holders+waiters goroutines that call run again and again
// (caller is the goroutine's number), each holding inside fn until it is
// released. Once holders of them hold and the others wait, it releases the
// longest holder every 30ms, b.N times after a warm-up, and records the
// time from that fn's return to the next fn's start. A released caller
// calls again only after its release was handed on.
func wakeRelay(b *testing.B, holders, waiters int, run func(ctx context.Context, caller int, fn func() error) error) {
	b.Helper()
	const settle = 30 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type hold struct {
		release chan struct{}
		handed  chan struct{} // set before release is closed
	}
	var (
		mu         sync.Mutex
		held       []*hold
		releasedAt time.Time // zero: no release pending
		handed     chan struct{}
		handoffs   []time.Duration
	)
	entered := make(chan struct{}, holders+waiters)
	var wg sync.WaitGroup
	for caller := range holders + waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var after chan struct{}
			fn := func() error {
				start := time.Now()
				h := &hold{release: make(chan struct{})}
				mu.Lock()
				if !releasedAt.IsZero() {
					handoffs = append(handoffs, start.Sub(releasedAt))
					releasedAt = time.Time{}
					close(handed)
				}
				held = append(held, h)
				mu.Unlock()
				entered <- struct{}{}
				select {
				case <-h.release:
				case <-ctx.Done():
					return ctx.Err()
				}
				after = h.handed
				mu.Lock()
				releasedAt = time.Now()
				mu.Unlock()
				return nil
			}
			for ctx.Err() == nil {
				after = nil
				if err := run(ctx, caller, fn); err != nil && ctx.Err() == nil {
					b.Error(err)
					return
				}
				if after != nil {
					select {
					case <-after:
					case <-ctx.Done():
					}
				}
			}
		}()
	}
	for range holders {
		<-entered
	}
	warm := 2 * (holders + waiters)
	b.ResetTimer()
	for i := 0; i < warm+b.N && !b.Failed(); i++ {
		time.Sleep(settle)
		mu.Lock()
		h := held[0]
		held = held[1:]
		h.handed = make(chan struct{})
		handed = h.handed
		mu.Unlock()
		close(h.release)
		select {
		case <-h.handed:
		case <-time.After(10 * time.Second):
			b.Error("a released slot was not taken within 10s")
		}
		for len(entered) > 0 {
			<-entered
		}
	}
	b.StopTimer()
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(handoffs) > warm {
		reportMedians(b, handoffs[warm:])
	}
}

// reportMedians reports the median and the 90th percentile of ds in µs.
func reportMedians(b *testing.B, ds []time.Duration) {
	b.Helper()
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Nanoseconds())/1e3, "median-µs")
	b.ReportMetric(float64(ds[len(ds)*9/10].Nanoseconds())/1e3, "p90-µs")
}
