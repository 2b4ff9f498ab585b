package pgadvisory_test

// Benchmarks of the transaction-lock front doors against their baselines,
// always in the same run. Every critical section is empty, so the numbers
// are the lock mechanism's own cost. Pools have 16 connections. Each
// benchmark also reports rt/op: round trips per op counted on the wire
// (internal/testkit/wirecount; for losers this includes the background
// ROLLBACK).
//
// Claims, checked from interleaved runs by .ci/bench:
//
//	Stdlib/lockgen       <= 1.05 x Stdlib/design_source   (same 3 round trips)
//	Pgx/lockgen          <= 0.75 x Pgx/bare_tx            (2 round trips vs 3)
//
// Reported beside them: Contended/pgx_loser against Contended/pgx_pipelined_loser
// (the same single round trip written by hand, without the standby check and
// the explicit READ COMMITTED) and against Contended/pgx_select1 (that round
// trip carries BEGIN and the lock statement, so it costs more than SELECT 1).
// TestRoundTrips asserts the single round trip exactly.
//
// The design source's baseline is pglock.RunExclusive
// (internal/testkit/designsource/pglock), its RunExclusive copied verbatim;
// the other baselines and the fixtures follow the benchmarks.

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/lockgen/lockgen/internal/testkit/designsource/pglock"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/wirecount"
	"github.com/lockgen/lockgen/pgadvisory"
)

// BenchmarkStdlib compares pgadvisory.RunExclusive (the deprecated
// package-level function, "lockgen") and Locker.RunExclusive ("locker")
// with the design source's RunExclusive and with a bare
// transaction, all on database/sql + pgx stdlib.
func BenchmarkStdlib(b *testing.B) {
	ctx := context.Background()
	c := wirecount.New()
	db := benchDB(b, c)
	idle := frontdoor.OnDB(db).Idle
	runCases(b,
		benchCase{"bare_tx", func(b *testing.B) {
			benchOp(b, c, backToBack, nil, idle, func() error { return bareTxStdlib(ctx, db) })
		}},
		benchCase{"design_source", func(b *testing.B) {
			key := testdb.Key(b)
			benchOp(b, c, backToBack, nil, idle, func() error {
				return pglock.RunExclusive(ctx, db, key, func(*sql.Tx) error { return nil })
			})
		}},
		benchCase{"lockgen", func(b *testing.B) {
			key := testdb.Key(b)
			benchOp(b, c, backToBack, nil, idle, func() error {
				return pgadvisory.RunExclusive(ctx, db, key, func(*sql.Tx) error { return nil })
			})
		}},
		benchCase{"locker", func(b *testing.B) {
			locker, err := pgadvisory.New(pgadvisory.Stdlib(db))
			if err != nil {
				b.Fatal(err)
			}
			lock := pgadvisory.ID(testdb.Key(b))
			benchOp(b, c, backToBack, nil, idle, func() error {
				return locker.RunExclusive(ctx, lock, func(*sql.Tx) error { return nil })
			})
		}},
	)
}

// BenchmarkPgx compares pgadvisory.RunExclusivePgx ("lockgen") and
// Locker.RunExclusive on a pgx Locker ("locker") with a bare pgx
// transaction on the same pool.
func BenchmarkPgx(b *testing.B) {
	ctx := context.Background()
	c := wirecount.New()
	pool := benchPool(b, c)
	idle := frontdoor.OnPool(pool).Idle
	runCases(b,
		benchCase{"bare_tx", func(b *testing.B) {
			benchOp(b, c, backToBack, nil, idle, func() error { return bareTxPgx(ctx, pool) })
		}},
		benchCase{"lockgen", func(b *testing.B) {
			key := testdb.Key(b)
			benchOp(b, c, backToBack, nil, idle, func() error {
				return pgadvisory.RunExclusivePgx(ctx, pool, key, func(pgx.Tx) error { return nil })
			})
		}},
		benchCase{"locker", func(b *testing.B) {
			locker, err := pgadvisory.New(pgadvisory.Pgx(pool))
			if err != nil {
				b.Fatal(err)
			}
			lock := pgadvisory.ID(testdb.Key(b))
			benchOp(b, c, backToBack, nil, idle, func() error {
				return locker.RunExclusive(ctx, lock, func(pgx.Tx) error { return nil })
			})
		}},
	)
}

// BenchmarkContended measures a caller that loses the lock (another session
// holds it). The plain rows are "settled" (see [settled]): time/op is what the
// caller waits for, against one round trip (SELECT 1) on the same handle and,
// for database/sql, the design source's loser, which rolls back before it
// returns. The _back_to_back rows run losers one after the other, so the
// background ROLLBACK of one loser competes with the next.
func BenchmarkContended(b *testing.B) {
	ctx := context.Background()
	c := wirecount.New()
	pool := benchPool(b, c)
	db := benchDB(b, c)
	key := testdb.Key(b)
	benchHold(b, key)
	pIdle, sIdle := frontdoor.OnPool(pool).Idle, frontdoor.OnDB(db).Idle
	runCases(b,
		benchCase{"pgx_select1", func(b *testing.B) {
			benchOp(b, c, settled, nil, pIdle, func() error {
				var n int
				return pool.QueryRow(ctx, "SELECT 1").Scan(&n)
			})
		}},
		benchCase{"pgx_pipelined_loser", func(b *testing.B) {
			benchOp(b, c, settled, errBenchLocked, pIdle, func() error { return pipelinedLoserPgx(ctx, pool, key) })
		}},
		benchCase{"pgx_loser", func(b *testing.B) {
			benchOp(b, c, settled, pgadvisory.ErrLocked, pIdle, func() error {
				return pgadvisory.RunExclusivePgx(ctx, pool, key, func(pgx.Tx) error { return nil })
			})
		}},
		benchCase{"pgx_loser_back_to_back", func(b *testing.B) {
			benchOp(b, c, backToBack, pgadvisory.ErrLocked, pIdle, func() error {
				return pgadvisory.RunExclusivePgx(ctx, pool, key, func(pgx.Tx) error { return nil })
			})
		}},
		benchCase{"stdlib_select1", func(b *testing.B) {
			benchOp(b, c, settled, nil, sIdle, func() error {
				var n int
				return db.QueryRowContext(ctx, "SELECT 1").Scan(&n)
			})
		}},
		benchCase{"stdlib_design_source_loser", func(b *testing.B) {
			benchOp(b, c, settled, pglock.ErrLocked, sIdle, func() error {
				return pglock.RunExclusive(ctx, db, key, func(*sql.Tx) error { return nil })
			})
		}},
		benchCase{"stdlib_loser", func(b *testing.B) {
			benchOp(b, c, settled, pgadvisory.ErrLocked, sIdle, func() error {
				return pgadvisory.RunExclusive(ctx, db, key, func(*sql.Tx) error { return nil })
			})
		}},
		benchCase{"stdlib_loser_back_to_back", func(b *testing.B) {
			benchOp(b, c, backToBack, pgadvisory.ErrLocked, sIdle, func() error {
				return pgadvisory.RunExclusive(ctx, db, key, func(*sql.Tx) error { return nil })
			})
		}},
	)
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

// bareTxPgx is the same on a pgx pool: Begin, SELECT 1, Commit (3 round trips).
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

// pipelinedLoserPgx is the least a pgx caller can do to learn it lost: BEGIN
// and pg_try_advisory_xact_lock pipelined in one round trip (pgx's
// Batch.BeginTx, the research anchor's PgxPipelined_xact), then the ROLLBACK
// in the background. It returns errBenchLocked when the lock was not granted.
func pipelinedLoserPgx(ctx context.Context, pool *pgxpool.Pool, key int64) error {
	var b pgx.Batch
	b.BeginTx(pgx.TxOptions{})
	var granted bool
	b.Queue("SELECT pg_try_advisory_xact_lock($1)", key).QueryRow(func(row pgx.Row) error { return row.Scan(&granted) })
	br := pool.SendBatch(ctx, &b)
	tx := br.Tx()
	if err := br.Close(); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	if !granted {
		go func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		return errBenchLocked
	}
	return tx.Commit(ctx)
}

var errBenchLocked = errors.New("bench: lock held elsewhere")

// benchPoolSize is the size of every measured pool.
const benchPoolSize = 16

// benchDB is a database/sql handle (pgx stdlib, default settings) with 16
// connections whose round trips c counts.
func benchDB(b *testing.B, c *wirecount.Counter) *sql.DB {
	b.Helper()
	cfg, err := pgx.ParseConfig(testdb.URL(b))
	if err != nil {
		b.Fatal(err)
	}
	cfg.DialFunc = c.Dial(cfg.DialFunc)
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(benchPoolSize)
	db.SetMaxIdleConns(benchPoolSize)
	b.Cleanup(func() { _ = db.Close() })
	if err := db.PingContext(context.Background()); err != nil {
		b.Fatal(err)
	}
	return db
}

// benchPool is a pgx pool (default settings) with 16 connections whose round
// trips c counts.
func benchPool(b *testing.B, c *wirecount.Counter) *pgxpool.Pool {
	b.Helper()
	return testdb.PoolConfig(b, func(cfg *pgxpool.Config) {
		cfg.MaxConns = benchPoolSize
		cfg.ConnConfig.DialFunc = c.Dial(cfg.ConnConfig.DialFunc)
	})
}

// benchHold holds key on a separate, uncounted connection until b ends.
func benchHold(b *testing.B, key int64) {
	b.Helper()
	conn, err := testdb.Pool(b).Acquire(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(conn.Release)
	if _, err := conn.Exec(context.Background(), "SELECT pg_advisory_lock($1)", key); err != nil {
		b.Fatal(err)
	}
}

// mode says what a benchmark's time per op includes.
type mode int

const (
	// backToBack runs the ops one after the other: time/op includes any
	// background work an op leaves behind (a loser's ROLLBACK), which
	// overlaps the next op.
	backToBack mode = iota
	// settled waits, with the timer stopped, until the previous op's
	// background work is done: time/op is what the caller waits for.
	// allocs/op then leave out the background work's allocations.
	settled
)

// benchOp runs op as a benchmark: warm-up calls (statement caches of every
// connection the op uses, pool grown to its working size), then b.Loop.
// want is op's expected error (nil for success). idle reports that no
// connection is in use (background work done). It reports the round trips
// per op (wire-counted, background work included).
func benchOp(b *testing.B, c *wirecount.Counter, m mode, want error, idle func() bool, op func() error) {
	b.Helper()
	check := func(err error) {
		if !errors.Is(err, want) || (want == nil && err != nil) {
			b.Fatalf("got %v, want %v", err, want)
		}
	}
	for range 100 {
		check(op())
	}
	waitIdle(b, idle)
	b.ReportAllocs()
	before := c.RoundTrips()
	n := 0
	for b.Loop() {
		check(op())
		n++
		if m == settled {
			b.StopTimer()
			waitIdle(b, idle)
			b.StartTimer()
		}
	}
	waitIdle(b, idle)
	b.ReportMetric(float64(c.RoundTrips()-before)/float64(n), "rt/op")
}

// waitIdle polls idle until it holds (bounded, so a leak fails the run). It
// sleeps between polls: spinning with runtime.Gosched on 2 cores starves the
// goroutine that finishes the background work and its network poll.
func waitIdle(b *testing.B, idle func() bool) {
	b.Helper()
	for deadline := time.Now().Add(time.Minute); !idle(); time.Sleep(20 * time.Microsecond) {
		if time.Now().After(deadline) {
			b.Fatal("connections still in use a minute after the op")
		}
	}
}

// benchCase is one sub-benchmark of a group that shares a pool.
type benchCase struct {
	name string
	fn   func(b *testing.B)
}

// runCases runs a group's sub-benchmarks in order, or in reverse order when
// LOCKGEN_BENCH_ORDER=reverse. Later rows of a group tend to run a little
// slower (the same pool and server backends, a few seconds further on), so
// .ci/bench reverses every other pass: each pair's paired ratio then sees
// both orders (ABBA counterbalancing) instead of a constant position bias.
func runCases(b *testing.B, cases ...benchCase) {
	b.Helper()
	if os.Getenv("LOCKGEN_BENCH_ORDER") == "reverse" {
		slices.Reverse(cases)
	}
	for _, c := range cases {
		b.Run(c.name, c.fn)
	}
}
