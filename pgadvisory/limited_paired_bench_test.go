package pgadvisory_test

import (
	"context"
	"database/sql"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
func BenchmarkLimitedPaired(b *testing.B) {
	ctx := context.Background()
	_, pl, sl, pIdle, sIdle := limitedBenchLockers(b)
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
	)
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
