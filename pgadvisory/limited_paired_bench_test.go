package pgadvisory_test

import (
	"context"
	"database/sql"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// BenchmarkLimitedPaired is BenchmarkLimited's claim measured op by op: each
// iteration runs one uncontended Locker.RunExclusive and one uncontended
// Locker.RunLimited (n = 3) on the same pool, in alternating order, and
// the metric limited/exclusive is the median over blocks of 25 pairs of
// (time of the block's RunLimited calls) ÷ (time of its RunExclusive
// calls). On a shared, loaded machine, whose load changes from one second
// to the next, this pairs the two far closer in time than interleaved
// passes of BenchmarkLimited do. The claim: limited/exclusive <= 1.1 on
// both front doors (the same round trips: 2 on pgx, 3 on database/sql).
//
// pgx_floor is the floor of that ratio in the same run: the same pairing
// of two bare pgx transactions in RunExclusive's round trips (BEGIN and
// the statement in one batch, then COMMIT), one whose statement is the
// lock alone and one that also reads the lock's registered limit by its
// primary key (pgadvisory.slot_limit), the least a limited call must do
// more to refuse a caller whose n disagrees.
func BenchmarkLimitedPaired(b *testing.B) {
	ctx := context.Background()
	_, pl, sl, pIdle, sIdle := limitedBenchLockers(b)
	floorPool := testdb.Pool(b)
	runCases(b,
		benchCase{"pgx", func(b *testing.B) {
			lock, limited := pgadvisory.ID(testdb.Key(b)), pgadvisory.ID(testdb.Key(b))
			benchPaired(b, pIdle,
				func() error { return pl.RunExclusive(ctx, lock, func(pgx.Tx) error { return nil }) },
				func() error { return pl.RunLimited(ctx, limited, 3, func(pgx.Tx) error { return nil }) })
		}},
		benchCase{"stdlib", func(b *testing.B) {
			lock, limited := pgadvisory.ID(testdb.Key(b)), pgadvisory.ID(testdb.Key(b))
			benchPaired(b, sIdle,
				func() error { return sl.RunExclusive(ctx, lock, func(*sql.Tx) error { return nil }) },
				func() error { return sl.RunLimited(ctx, limited, 3, func(*sql.Tx) error { return nil }) })
		}},
		benchCase{"pgx_floor", func(b *testing.B) {
			key, limited := testdb.Key(b), pgadvisory.ID(testdb.Key(b))
			if err := pl.RunLimited(ctx, limited, 3, func(pgx.Tx) error { return nil }); err != nil {
				b.Fatal(err) // registers the limit the read finds
			}
			benchPaired(b, frontdoor.OnPool(floorPool).Idle,
				func() error { return floorCall(ctx, floorPool, `SELECT pg_try_advisory_xact_lock($1)`, key) },
				func() error {
					return floorCall(ctx, floorPool, `SELECT pg_try_advisory_xact_lock($1),
						(SELECT l.n FROM pgadvisory.slot_limit AS l WHERE l.lock_id = $2)`, key, limited.ID)
				})
		}},
	)
}

// floorCall runs BEGIN and query in one batch on a connection of pool,
// then COMMIT: the round trips of an uncontended RunExclusive on pgx, with
// only query's server work.
func floorCall(ctx context.Context, pool *pgxpool.Pool, query string, args ...any) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	var batch pgx.Batch
	batch.Queue("BEGIN ISOLATION LEVEL READ COMMITTED")
	batch.Queue(query, args...)
	if err := conn.SendBatch(ctx, &batch).Close(); err != nil {
		return err
	}
	_, err = conn.Exec(ctx, "COMMIT")
	return err
}

// benchPaired runs base and op alternately (one pair per iteration, the
// order swapped every iteration) and reports op's time ÷ base's as the
// median over blocks of 25 pairs ("limited/exclusive"), and each one's
// median time per call.
func benchPaired(b *testing.B, idle func() bool, base, op func() error) {
	b.Helper()
	const block = 25
	for range 100 {
		if err := base(); err != nil {
			b.Fatal(err)
		}
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
	waitIdle(b, idle)
	timed := func(f func() error) time.Duration {
		start := time.Now()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	var ratios, baseNs, opNs []float64
	var tb, to time.Duration
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			tb += timed(base)
			to += timed(op)
		} else {
			to += timed(op)
			tb += timed(base)
		}
		i++
		if i%block == 0 {
			ratios = append(ratios, float64(to)/float64(tb))
			baseNs = append(baseNs, float64(tb.Nanoseconds())/block)
			opNs = append(opNs, float64(to.Nanoseconds())/block)
			tb, to = 0, 0
		}
	}
	if len(ratios) == 0 {
		return
	}
	b.ReportMetric(median(ratios), "limited/exclusive")
	b.ReportMetric(median(baseNs), "exclusive-ns")
	b.ReportMetric(median(opNs), "limited-ns")
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}
