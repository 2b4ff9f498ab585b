// Package anchors benchmarks lockgen against the anchor implementations of
// "run a critical section under a distributed lock", all in the same run:
// a bare transaction, the design source's RunExclusive (database/sql) and
// its Redis lock (SET NX with TTL plus a Lua release, go-redis v9 on the
// local Redis), lockgen over database/sql and over pgx, lockgen's fenced and
// run-once variants, and goose's session locker. It is a separate module so
// that go-redis never enters lockgen's own go.mod. run.sh runs it and prints
// the ratios to the bare transaction.
//
// Every critical section is empty. Pools have 16 connections (a fenced call
// needs one, like any other). Rows report rt/op (client/server round
// trips per op, counted on the wire; for the Redis rows Redis round trips),
// and the contended rows wins/op (share of ops that got the lock: 1 for
// distinct keys, well below 1 for one key, where time/op is per attempt).
package anchors

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pressly/goose/v3/lock"
	"github.com/redis/go-redis/v9"

	"github.com/lockgen/lockgen/internal/testkit/designsource/pglock"
	"github.com/lockgen/lockgen/pgadvisory"
)

// redisTTL is the TTL of the Redis lock.
const redisTTL = 10 * time.Second

// contendedGoroutines is how many goroutines the contended rows run.
const contendedGoroutines = 16

// parallelism is the b.SetParallelism factor that gives contendedGoroutines
// goroutines on this GOMAXPROCS (RunParallel starts factor × GOMAXPROCS),
// rounded up when GOMAXPROCS does not divide 16; the rows report the count
// they ran as the "goroutines" metric.
func parallelism() int {
	p := runtime.GOMAXPROCS(0)
	return (contendedGoroutines + p - 1) / p
}

// variant is one implementation under test.
type variant struct {
	name string
	// op returns a function that runs one empty critical section under key
	// (the bare transactions ignore key).
	op func(key int64) func() error
	// loser is the error an op returns when another caller holds key.
	loser error
	// noSame says why the variant has no key=same contended row.
	noSame string
	// skip says why the variant cannot run at all.
	skip string
	// keyless marks the bare transactions: contended as key=none.
	keyless bool
}

// fixtures holds the handles every variant runs on, with one round-trip
// counter over all of them (benchmarks run one at a time).
type fixtures struct {
	c        *rtCounter
	db       *sql.DB
	pool     *pgxpool.Pool
	rdb      *redis.Client
	redisErr error
}

func newFixtures(b *testing.B) *fixtures {
	b.Helper()
	f := &fixtures{c: &rtCounter{}}
	f.db = sqlDB(b, f.c, poolSize)
	f.pool = pgxPool(b, f.c, poolSize)
	f.rdb, f.redisErr = redisClient(b, f.c)
	if f.redisErr != nil {
		// Benchmarks print skip reasons only with -test.v: say it once here.
		redisSkipNote.Do(func() { fmt.Fprintf(os.Stderr, "%v: the redis rows are skipped\n", f.redisErr) })
	}
	return f
}

var redisSkipNote sync.Once

// windowSeq gives every run-once call a fresh window, so that every op does
// the full work (ledger check and ledger row).
var windowSeq atomic.Int64

func nextWindow() string { return "w" + strconv.FormatInt(windowSeq.Add(1), 10) }

func (f *fixtures) variants() []variant {
	ctx := context.Background()
	emptySQL := func(*sql.Tx) error { return nil }
	emptyPgx := func(pgx.Tx) error { return nil }
	vs := []variant{
		{name: "bare_tx", keyless: true, op: func(int64) func() error {
			return func() error { return bareTxStdlib(ctx, f.db) }
		}},
		{name: "bare_tx_pgx", keyless: true, op: func(int64) func() error {
			return func() error { return bareTxPgx(ctx, f.pool) }
		}},
		{name: "design_source", loser: pglock.ErrLocked, op: func(key int64) func() error {
			return func() error { return pglock.RunExclusive(ctx, f.db, key, emptySQL) }
		}},
		{name: "lockgen_stdlib", loser: pgadvisory.ErrLocked, op: func(key int64) func() error {
			return func() error { return pgadvisory.RunExclusive(ctx, f.db, key, emptySQL) }
		}},
		{name: "lockgen_pgx", loser: pgadvisory.ErrLocked, op: func(key int64) func() error {
			return func() error { return pgadvisory.RunExclusivePgx(ctx, f.pool, key, emptyPgx) }
		}},
		{name: "fenced_stdlib", loser: pgadvisory.ErrLocked, op: func(key int64) func() error {
			return func() error {
				return pgadvisory.RunExclusive(ctx, f.db, key, emptySQL, pgadvisory.WithFencing())
			}
		}},
		{name: "fenced_pgx", loser: pgadvisory.ErrLocked, op: func(key int64) func() error {
			return func() error {
				return pgadvisory.RunExclusivePgx(ctx, f.pool, key, emptyPgx, pgadvisory.WithFencing())
			}
		}},
		{name: "runonce_stdlib", loser: pgadvisory.ErrLocked, op: func(key int64) func() error {
			return func() error { return pgadvisory.RunOnce(ctx, f.db, key, nextWindow(), emptySQL) }
		}},
		{name: "runonce_pgx", loser: pgadvisory.ErrLocked, op: func(key int64) func() error {
			return func() error { return pgadvisory.RunOncePgx(ctx, f.pool, key, nextWindow(), emptyPgx) }
		}},
		{
			name: "goose_session",
			// goose's SessionLock has no try-once mode: on a held lock it
			// sleeps a whole period (at least 1s) per retry.
			noSame: "goose's SessionLock has no try mode; a held lock makes it sleep >= 1s per retry",
			op: func(key int64) func() error {
				locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(key))
				if err != nil {
					return func() error { return err }
				}
				return func() error { return gooseSession(ctx, f.db, locker) }
			},
		},
		{name: "redis", loser: redisLockErrNotAcquired, op: func(key int64) func() error {
			rkey := "lockgen:anchors:" + strconv.FormatInt(key, 10)
			return func() error {
				l, err := redisLockAcquire(ctx, f.rdb, rkey, redisTTL)
				if err != nil {
					return err
				}
				return l.Release(ctx)
			}
		}},
	}
	if f.redisErr != nil {
		vs[len(vs)-1].skip = f.redisErr.Error()
	}
	return vs
}

// bareTxStdlib is the cheapest transaction database/sql can run: BEGIN,
// SELECT 1, COMMIT (3 round trips).
func bareTxStdlib(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	var n int
	if err := tx.QueryRowContext(ctx, "SELECT 1").Scan(&n); err != nil {
		return err
	}
	return tx.Commit()
}

// bareTxPgx is the same on a pgx pool.
func bareTxPgx(ctx context.Context, pool *pgxpool.Pool) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var n int
	if err := tx.QueryRow(ctx, "SELECT 1").Scan(&n); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// gooseSession takes goose's session lock on a dedicated connection and
// releases it, the way goose brackets a migration run.
func gooseSession(ctx context.Context, db *sql.DB, locker lock.SessionLocker) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := locker.SessionLock(ctx, conn); err != nil {
		return err
	}
	return locker.SessionUnlock(ctx, conn)
}

// check accepts success and, when loser is set, the loser's error.
func check(err, loser error) (won bool, _ error) {
	switch {
	case err == nil:
		return true, nil
	case loser != nil && errors.Is(err, loser):
		return false, nil
	default:
		return false, err
	}
}

// BenchmarkAnchors runs every variant uncontended (one op after the other on
// one key), then from parallelism × GOMAXPROCS goroutines (16 on any GOMAXPROCS that divides 16)
// on one key (key=same: most attempts lose; time/op is per attempt and
// wins/op the share that won) and on one key per goroutine (key=distinct).
// The bare transactions run contended as key=none.
func BenchmarkAnchors(b *testing.B) {
	f := newFixtures(b)
	vs := f.variants()
	b.Run("uncontended", func(b *testing.B) {
		for _, v := range vs {
			b.Run(v.name, func(b *testing.B) {
				if v.skip != "" {
					b.Skip(v.skip)
				}
				benchSerial(b, f.c, v.loser, v.op(newKey()))
			})
		}
	})
	b.Run("contended", func(b *testing.B) {
		for _, v := range vs {
			keys := []string{"same", "distinct"}
			if v.keyless {
				keys = []string{"none"}
			}
			for _, k := range keys {
				b.Run(v.name+"/key="+k, func(b *testing.B) {
					switch {
					case v.skip != "":
						b.Skip(v.skip)
					case k == "same" && v.noSame != "":
						b.Skip(v.noSame)
					}
					newOp := func() func() error { return v.op(newKey()) }
					if k == "same" {
						key := newKey()
						newOp = func() func() error { return v.op(key) }
					}
					benchParallel(b, f.c, v.loser, newOp)
				})
			}
		}
	})
}

// BenchmarkKeysPerTx measures lockgen holding 1, 100 and 1,000 distinct keys
// per transaction (pgadvisory.WithLocks: one lock statement, keys in
// ascending order), against bare transactions on the same handles.
func BenchmarkKeysPerTx(b *testing.B) {
	ctx := context.Background()
	c := &rtCounter{}
	db := sqlDB(b, c, poolSize)
	pool := pgxPool(b, c, poolSize)
	b.Run("bare_tx", func(b *testing.B) {
		benchSerial(b, c, nil, func() error { return bareTxStdlib(ctx, db) })
	})
	b.Run("bare_tx_pgx", func(b *testing.B) {
		benchSerial(b, c, nil, func() error { return bareTxPgx(ctx, pool) })
	})
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("lockgen_stdlib/keys=%d", n), func(b *testing.B) {
			ks := newKeys(n)
			benchSerial(b, c, nil, func() error {
				return pgadvisory.RunExclusive(ctx, db, ks[0], func(*sql.Tx) error { return nil },
					pgadvisory.WithLocks(ks[1:]...))
			})
		})
		b.Run(fmt.Sprintf("lockgen_pgx/keys=%d", n), func(b *testing.B) {
			ks := newKeys(n)
			benchSerial(b, c, nil, func() error {
				return pgadvisory.RunExclusivePgx(ctx, pool, ks[0], func(pgx.Tx) error { return nil },
					pgadvisory.WithLocks(ks[1:]...))
			})
		})
	}
}

// benchSerial runs op back to back: warm-up calls first (statement caches),
// then b.Loop. Every op must succeed (nobody else uses its key).
func benchSerial(b *testing.B, c *rtCounter, loser error, op func() error) {
	b.Helper()
	for range 20 {
		if err := op(); err != nil {
			b.Fatalf("warm-up: %v", err)
		}
	}
	b.ReportAllocs()
	before, n := c.trips.Load(), 0
	for b.Loop() {
		if won, err := check(op(), loser); err != nil || !won {
			b.Fatalf("uncontended op: won=%v err=%v", won, err)
		}
		n++
	}
	b.ReportMetric(float64(c.trips.Load()-before)/float64(n), "rt/op")
}

// benchParallel runs ops from parallelism × GOMAXPROCS goroutines, each with
// its own op from newOp, and reports wins/op (ops that got the lock, per
// op) and rt/op.
func benchParallel(b *testing.B, c *rtCounter, loser error, newOp func() func() error) {
	b.Helper()
	// Warm-up: every pool connection prepares its statements.
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		op := newOp()
		wg.Go(func() {
			for range 4 {
				if _, err := check(op(), loser); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatalf("warm-up: %v", err)
	}
	var wins, failed atomic.Int64
	b.SetParallelism(parallelism())
	b.ReportAllocs()
	before := c.trips.Load()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		op := newOp()
		for pb.Next() {
			won, err := check(op(), loser)
			if err != nil {
				if failed.Add(1) == 1 {
					b.Error(err)
				}
				return
			}
			if won {
				wins.Add(1)
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(wins.Load())/float64(b.N), "wins/op")
	b.ReportMetric(float64(c.trips.Load()-before)/float64(b.N), "rt/op")
	b.ReportMetric(float64(parallelism()*runtime.GOMAXPROCS(0)), "goroutines")
}
