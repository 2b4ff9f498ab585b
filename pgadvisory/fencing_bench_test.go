package pgadvisory_test

// Benchmarks of fencing, always with their baselines in the same run
// (SUITE=fencing .ci/bench runs them in interleaved passes and prints the
// claimed ratios).
//
// BenchmarkFencing: a fenced call against an unfenced one on the same pool
// (16 connections), for each front door, beside the floor: one durable
// autocommit single-row UPDATE on that pool (one round trip and one WAL
// flush). The fenced acquisition adds no round trip, but its publish must
// be durable before fn runs, which costs one WAL flush; the claim is
//
//	fenced_empty - unfenced_empty <= 1.1 x floor_update   (both front doors)
//
// The _update rows run fn with one single-row UPDATE (of a fenced table for
// the fenced call, of a plain one for the unfenced call), and the
// pool_of_one groups show that a fenced call needs one connection only.
//
// BenchmarkTrigger: the fence triggers' own cost on writes that carry the
// current token, against the same table without them: a one-row UPDATE in
// its own (implicit) transaction (claim: <= 1.3x), and a 10,000-row
// INSERT … SELECT generate_series in one transaction (claim: <= 2x).

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/wirecount"
	"github.com/lockgen/lockgen/pgadvisory"
)

func BenchmarkFencing(b *testing.B) {
	ctx := context.Background()
	admin := migrated.DB(b)
	for _, size := range []int{benchPoolSize, 1} {
		group := ""
		if size == 1 {
			group = "_pool_of_one"
		}
		b.Run("pgx"+group, func(b *testing.B) {
			c := wirecount.New()
			pool := testdb.PoolConfig(b, func(cfg *pgxpool.Config) {
				cfg.MaxConns = int32(size)
				cfg.ConnConfig.DialFunc = c.Dial(cfg.ConnConfig.DialFunc)
			})
			idle := frontdoor.OnPool(pool).Idle
			key := testdb.Key(b)
			plain, fenced := fencedBenchTables(b, admin, key)
			update := func(tbl string) func(pgx.Tx) error {
				return func(tx pgx.Tx) error {
					_, err := tx.Exec(ctx, `UPDATE `+tbl+` SET balance = balance + 1 WHERE id = 1`)
					return err
				}
			}
			empty := func(pgx.Tx) error { return nil }
			op := func(name string, fn func() error) benchCase {
				return benchCase{name, func(b *testing.B) { benchOp(b, c, backToBack, nil, idle, fn) }}
			}
			runCases(b,
				op("floor_update", func() error {
					_, err := pool.Exec(ctx, `UPDATE `+plain+` SET balance = balance + 1 WHERE id = 1`)
					return err
				}),
				op("unfenced_empty", func() error { return pgadvisory.RunExclusivePgx(ctx, pool, key, empty) }),
				op("fenced_empty", func() error { return pgadvisory.RunExclusivePgx(ctx, pool, key, empty, pgadvisory.WithFencing()) }),
				op("unfenced_update", func() error { return pgadvisory.RunExclusivePgx(ctx, pool, key, update(plain)) }),
				op("fenced_update", func() error {
					return pgadvisory.RunExclusivePgx(ctx, pool, key, update(fenced), pgadvisory.WithFencing())
				}),
			)
		})
		b.Run("stdlib"+group, func(b *testing.B) {
			c := wirecount.New()
			db := benchDB(b, c)
			db.SetMaxOpenConns(size)
			db.SetMaxIdleConns(size)
			idle := frontdoor.OnDB(db).Idle
			key := testdb.Key(b)
			plain, fenced := fencedBenchTables(b, admin, key)
			update := func(tbl string) func(*sql.Tx) error {
				return func(tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, `UPDATE `+tbl+` SET balance = balance + 1 WHERE id = 1`)
					return err
				}
			}
			empty := func(*sql.Tx) error { return nil }
			op := func(name string, fn func() error) benchCase {
				return benchCase{name, func(b *testing.B) { benchOp(b, c, backToBack, nil, idle, fn) }}
			}
			runCases(b,
				op("floor_update", func() error {
					_, err := db.ExecContext(ctx, `UPDATE `+plain+` SET balance = balance + 1 WHERE id = 1`)
					return err
				}),
				op("unfenced_empty", func() error { return pgadvisory.RunExclusive(ctx, db, key, empty) }),
				op("fenced_empty", func() error { return pgadvisory.RunExclusive(ctx, db, key, empty, pgadvisory.WithFencing()) }),
				op("unfenced_update", func() error { return pgadvisory.RunExclusive(ctx, db, key, update(plain)) }),
				op("fenced_update", func() error {
					return pgadvisory.RunExclusive(ctx, db, key, update(fenced), pgadvisory.WithFencing())
				}),
			)
		})
	}
}

func BenchmarkTrigger(b *testing.B) {
	ctx := context.Background()
	admin := migrated.DB(b)
	pool := testdb.PoolConfig(b, func(cfg *pgxpool.Config) { cfg.MaxConns = 2 })
	key := testdb.Key(b)
	plain, fenced := fencedBenchTables(b, admin, key)
	tok := fencing.Published(b, admin, key)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(conn.Release)
	setToken := fmt.Sprintf(`SELECT set_config('pgadvisory.fencing_token', '%d', true)`, tok)

	// One round trip, simple protocol: the statements share one implicit
	// transaction, so the token set by set_config applies to the UPDATE.
	single := func(tbl string) func(b *testing.B) {
		return func(b *testing.B) {
			q := setToken + `; UPDATE ` + tbl + ` SET balance = balance + 1 WHERE id = 1`
			for b.Loop() {
				if _, err := conn.Exec(ctx, q); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	bulk := func(tbl string) func(b *testing.B) {
		return func(b *testing.B) {
			q := `BEGIN; ` + setToken + `; INSERT INTO ` + tbl + ` (id, balance) SELECT g, g FROM generate_series(2, 10001) AS g; COMMIT`
			// The TRUNCATE between runs carries the token too: the fenced
			// table's TRUNCATE guard needs it.
			truncate := `BEGIN; ` + setToken + `; TRUNCATE ` + tbl + `; INSERT INTO ` + tbl + ` (id, balance) VALUES (1, 0); COMMIT`
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				if _, err := conn.Exec(ctx, truncate); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if _, err := conn.Exec(ctx, q); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10000, "ns/row")
		}
	}
	runCases(b,
		benchCase{"single_row_no_trigger", single(plain)},
		benchCase{"single_row_trigger", single(fenced)},
		benchCase{"bulk_10k_no_trigger", bulk(plain)},
		benchCase{"bulk_10k_trigger", bulk(fenced)},
	)
}

// fencedBenchTables creates a plain and a fenced (strict, lock key; the
// layout lockgen fence writes) accounts table with row 1 in each, publishes
// a token for key, and returns the tables' names.
func fencedBenchTables(b *testing.B, admin *sql.DB, key int64) (plain, fenced string) {
	b.Helper()
	schema := testdb.Schema(b)
	plain = fencing.Table(b, admin, schema, "plain", key, "")
	fenced = fencing.Table(b, admin, schema, "fenced", key, "strict")
	if _, err := admin.Exec(`INSERT INTO ` + plain + ` (id, balance) VALUES (1, 0)`); err != nil {
		b.Fatal(err)
	}
	tok := fencing.Publish(b, admin, key)
	if err := fencing.Write(admin, tok, `INSERT INTO `+fenced+` (id, balance) VALUES (1, 0)`); err != nil {
		b.Fatal(err)
	}
	return plain, fenced
}
