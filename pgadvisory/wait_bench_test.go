package pgadvisory_test

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// waitBenchHold is how long fn holds the lock in BenchmarkWaitHandoff:
// long enough that every call finds the lock held and waits.
const waitBenchHold = time.Millisecond

// BenchmarkWaitHandoff: the hand-off between waiting calls. 4 goroutines
// of one Locker call RunExclusive with WithWait(0) on one lock, back to
// back, fn holding it for waitBenchHold: time/op less that is the time
// from one holder's release to the next one's grant, a hand-off
// (handoff-ns/op). lockgen_queue waits in lockgen's queue (woken by
// NOTIFY, holding no connection); server_queue is the same Locker made to
// wait in the server's lock queue (one connection per waiter, granted by
// the server as the holder commits). Compare the two in the same run. The
// fenced_ rows are the same calls with WithFencing: each hand-off then
// includes the publish of a token and its durable commit.
func BenchmarkWaitHandoff(b *testing.B) {
	migrated.DB(b)
	const waiters = 4
	run := func(b *testing.B, op func(ctx context.Context, lock pgadvisory.Lock) error) {
		ctx := context.Background()
		lock := pgadvisory.ID(testdb.Key(b))
		var n atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, waiters)
		b.ResetTimer()
		for range waiters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n.Add(1) <= int64(b.N) {
					if err := op(ctx, lock); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		b.StopTimer()
		b.ReportMetric(float64(b.Elapsed()-time.Duration(b.N)*waitBenchHold)/float64(b.N), "handoff-ns/op")
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
	}
	for _, queue := range []string{"server_queue", "lockgen_queue", "fenced_server_queue", "fenced_lockgen_queue"} {
		opts := []pgadvisory.Option{pgadvisory.WithWait(0)}
		if strings.HasPrefix(queue, "fenced_") {
			opts = append(opts, pgadvisory.WithFencing())
		}
		b.Run("pgx/"+queue, func(b *testing.B) {
			l, err := pgadvisory.New(pgadvisory.Pgx(testdb.Pool(b)))
			if err != nil {
				b.Fatal(err)
			}
			if strings.HasSuffix(queue, "server_queue") {
				pgadvisory.ServerQueueForTest(l)
			}
			run(b, func(ctx context.Context, lock pgadvisory.Lock) error {
				return l.RunExclusive(ctx, lock, func(pgx.Tx) error { time.Sleep(waitBenchHold); return nil }, opts...)
			})
		})
		b.Run("stdlib/"+queue, func(b *testing.B) {
			l, err := pgadvisory.New(pgadvisory.Stdlib(testdb.DB(b)))
			if err != nil {
				b.Fatal(err)
			}
			if strings.HasSuffix(queue, "server_queue") {
				pgadvisory.ServerQueueForTest(l)
			}
			run(b, func(ctx context.Context, lock pgadvisory.Lock) error {
				return l.RunExclusive(ctx, lock, func(*sql.Tx) error { time.Sleep(waitBenchHold); return nil }, opts...)
			})
		})
	}
}

// BenchmarkWaitUncontended: a lone RunExclusive with WithWait(0) (its first
// try is pgadvisory.wait_try, which reads the lock's queue) against the
// same call without WithWait (pg_try_advisory_xact_lock), on a free lock:
// the same round trips (TestRoundTripsRunExclusive*), more server work.
// wait_server_queue is the waiting call of a Locker that waits in the
// server's queue (its statement sets lock_timeout). Compare in the same
// run.
func BenchmarkWaitUncontended(b *testing.B) {
	migrated.DB(b)
	ctx := context.Background()
	for _, name := range []string{"plain", "wait", "wait_server_queue"} {
		var opts []pgadvisory.Option
		if name != "plain" {
			opts = append(opts, pgadvisory.WithWait(0))
		}
		b.Run("pgx/"+name, func(b *testing.B) {
			l, err := pgadvisory.New(pgadvisory.Pgx(testdb.Pool(b)))
			if err != nil {
				b.Fatal(err)
			}
			if name == "wait_server_queue" {
				pgadvisory.ServerQueueForTest(l)
			}
			lock := pgadvisory.ID(testdb.Key(b))
			for b.Loop() {
				if err := l.RunExclusive(ctx, lock, func(pgx.Tx) error { return nil }, opts...); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("stdlib/"+name, func(b *testing.B) {
			l, err := pgadvisory.New(pgadvisory.Stdlib(testdb.DB(b)))
			if err != nil {
				b.Fatal(err)
			}
			if name == "wait_server_queue" {
				pgadvisory.ServerQueueForTest(l)
			}
			lock := pgadvisory.ID(testdb.Key(b))
			for b.Loop() {
				if err := l.RunExclusive(ctx, lock, func(*sql.Tx) error { return nil }, opts...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// fastPathHold is how long the holder of BenchmarkWaitFastPathHandoff
// keeps the lock once the waiter waits.
const fastPathHold = 30 * time.Millisecond

// BenchmarkWaitFastPathHandoff: the hand-off from a holder that took the
// lock without queueing (a RunExclusive without WithWait, in one Locker)
// to a waiting RunExclusive of another Locker, which waits until the
// holder, fastPathHold after the waiter waits, returns from fn:
// handoff-ns/op is the time from fn's return (the holder's COMMIT follows)
// to the waiter's fn. lockgen_queue waits in lockgen's queue (its head
// waits for such a holder on the server); server_queue, the baseline, is
// the waiting Locker made to wait in the server's lock queue. Compare the
// two in the same run.
func BenchmarkWaitFastPathHandoff(b *testing.B) {
	admin := migrated.DB(b)
	ctx := context.Background()
	type locker interface {
		run(lock pgadvisory.Lock, fn func(), opts ...pgadvisory.Option) error
	}
	for _, drv := range []string{"pgx", "stdlib"} {
		for _, queue := range []string{"server_queue", "lockgen_queue"} {
			b.Run(drv+"/"+queue, func(b *testing.B) {
				open := func() (locker, func()) {
					if drv == "pgx" {
						l, err := pgadvisory.New(pgadvisory.Pgx(testdb.Pool(b)))
						if err != nil {
							b.Fatal(err)
						}
						return pgxBenchLocker{l}, func() { pgadvisory.ServerQueueForTest(l) }
					}
					l, err := pgadvisory.New(pgadvisory.Stdlib(testdb.DB(b)))
					if err != nil {
						b.Fatal(err)
					}
					return sqlBenchLocker{l}, func() { pgadvisory.ServerQueueForTest(l) }
				}
				holder, _ := open()
				waiter, serverQueue := open()
				if queue == "server_queue" {
					serverQueue()
				}
				key := testdb.Key(b)
				lock := pgadvisory.ID(key)
				waiting := func() bool {
					var n int
					q := `SELECT count(*) FROM pgadvisory.waiter WHERE lock_id = $1`
					if queue == "server_queue" {
						q = `SELECT count(*) FROM pg_catalog.pg_locks WHERE locktype = 'advisory' AND NOT granted
							AND ((classid::bigint << 32) | objid::bigint) = $1`
					}
					if err := admin.QueryRowContext(ctx, q, key).Scan(&n); err != nil {
						b.Fatal(err)
					}
					return n == 1
				}
				var total time.Duration
				for b.Loop() {
					held, release := make(chan struct{}), make(chan struct{})
					var releasedAt, grantedAt time.Time
					holderDone, waiterDone := make(chan error, 1), make(chan error, 1)
					go func() {
						holderDone <- holder.run(lock, func() { close(held); <-release; releasedAt = time.Now() })
					}()
					<-held
					go func() {
						waiterDone <- waiter.run(lock, func() { grantedAt = time.Now() }, pgadvisory.WithWait(0))
					}()
					for !waiting() {
						time.Sleep(time.Millisecond)
					}
					time.Sleep(fastPathHold)
					close(release)
					if err := <-holderDone; err != nil {
						b.Fatal(err)
					}
					if err := <-waiterDone; err != nil {
						b.Fatal(err)
					}
					total += grantedAt.Sub(releasedAt)
				}
				b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "handoff-ns/op")
			})
		}
	}
}

type pgxBenchLocker struct{ l *pgadvisory.Locker[pgx.Tx] }

func (p pgxBenchLocker) run(lock pgadvisory.Lock, fn func(), opts ...pgadvisory.Option) error {
	return p.l.RunExclusive(context.Background(), lock, func(pgx.Tx) error { fn(); return nil }, opts...)
}

type sqlBenchLocker struct{ l *pgadvisory.Locker[*sql.Tx] }

func (s sqlBenchLocker) run(lock pgadvisory.Lock, fn func(), opts ...pgadvisory.Option) error {
	return s.l.RunExclusive(context.Background(), lock, func(*sql.Tx) error { fn(); return nil }, opts...)
}
