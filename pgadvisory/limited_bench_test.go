package pgadvisory_test

// BenchmarkLimited compares an uncontended Locker.RunLimited (n = 3) with
// Locker.RunExclusive on the same pool, in the same run, on both front
// doors (internal/testkit/benchratio on interleaved passes). The target is
//
//	Limited/pgx_limited    <= 1.1 x Limited/pgx_exclusive     (same 2 round trips)
//	Limited/stdlib_limited <= 1.1 x Limited/stdlib_exclusive  (same 3 round trips)
//
// The round trips are the same; the server's extra work is the read of the
// lock's row of pgadvisory.slot_limit (the n-agreement check), as the slot
// statement calls no function when its first slot is free. On a loaded
// machine the passes of this benchmark are too far apart to pair well:
// BenchmarkLimitedPaired measures the same claim op by op.
//
// rt/op shows the round trips; the limit's registration (one more round
// trip, once per lock and database) happens in the warm-up.

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/wirecount"
	"github.com/lockgen/lockgen/pgadvisory"
)

func BenchmarkLimited(b *testing.B) {
	ctx := context.Background()
	c, pl, sl, pIdle, sIdle := limitedBenchLockers(b)
	runCases(b,
		benchCase{"pgx_exclusive", func(b *testing.B) {
			lock := pgadvisory.ID(testdb.Key(b))
			benchOp(b, c, backToBack, nil, pIdle, func() error {
				return pl.RunExclusive(ctx, lock, func(pgx.Tx) error { return nil })
			})
		}},
		benchCase{"pgx_limited", func(b *testing.B) {
			lock := pgadvisory.ID(testdb.Key(b))
			benchOp(b, c, backToBack, nil, pIdle, func() error {
				return pl.RunLimited(ctx, lock, 3, func(pgx.Tx) error { return nil })
			})
		}},
		benchCase{"stdlib_exclusive", func(b *testing.B) {
			lock := pgadvisory.ID(testdb.Key(b))
			benchOp(b, c, backToBack, nil, sIdle, func() error {
				return sl.RunExclusive(ctx, lock, func(*sql.Tx) error { return nil })
			})
		}},
		benchCase{"stdlib_limited", func(b *testing.B) {
			lock := pgadvisory.ID(testdb.Key(b))
			benchOp(b, c, backToBack, nil, sIdle, func() error {
				return sl.RunLimited(ctx, lock, 3, func(*sql.Tx) error { return nil })
			})
		}},
	)
}

// limitedBenchLockers is the limited benchmarks' setup: a migrated pool of
// each driver, counted by c, a Locker on each, and their idle checks.
func limitedBenchLockers(b *testing.B) (c *wirecount.Counter, pl *pgadvisory.Locker[pgx.Tx], sl *pgadvisory.Locker[*sql.Tx], pIdle, sIdle func() bool) {
	c = wirecount.New()
	pool := benchPool(b, c)
	db := benchDB(b, c)
	if err := pgadvisory.Migrate(context.Background(), db); err != nil {
		b.Fatal(err)
	}
	pl, err := pgadvisory.New(pgadvisory.Pgx(pool))
	if err != nil {
		b.Fatal(err)
	}
	sl, err = pgadvisory.New(pgadvisory.Stdlib(db))
	if err != nil {
		b.Fatal(err)
	}
	return c, pl, sl, frontdoor.OnPool(pool).Idle, frontdoor.OnDB(db).Idle
}
