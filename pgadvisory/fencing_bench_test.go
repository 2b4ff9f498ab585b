package pgadvisory_test

// Benchmarks of fencing, always with their baselines in the same run.
//
// BenchmarkFencing: RunExclusivePgx with and without WithFencing. The
// fenced call adds one statement on another pool connection (the publish),
// whose commit waits for a WAL flush; that flush, not the trigger, is most
// of the difference. publish_only_pgx runs the publish statement alone, and
// the _async rows repeat the update pair with synchronous_commit=off to show
// what is left without flushes.
//
// BenchmarkTrigger: the fence trigger's own cost on a write that carries the
// current token: a one-row UPDATE in its own (implicit) transaction, and a
// 10,000-row INSERT … SELECT generate_series in one transaction, each against
// the same table without the trigger.

import (
	"context"
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
	for _, commit := range []string{"", "_async"} {
		c := wirecount.New()
		pool := testdb.PoolConfig(b, func(cfg *pgxpool.Config) {
			cfg.MaxConns = 4
			cfg.ConnConfig.DialFunc = c.Dial(cfg.ConnConfig.DialFunc)
			if commit == "_async" {
				cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
			}
		})
		idle := frontdoor.OnPool(pool).Idle
		key := testdb.Key(b)
		plain, fenced := fencedBenchTables(b, pool, key)
		update := func(tbl string) func(pgx.Tx) error {
			return func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `UPDATE `+tbl+` SET balance = balance + 1 WHERE id = 1`)
				return err
			}
		}
		empty := func(pgx.Tx) error { return nil }
		run := func(name string, op func() error) {
			b.Run(name, func(b *testing.B) { benchOp(b, c, backToBack, nil, idle, op) })
		}
		if commit == "" {
			run("unfenced_pgx/empty", func() error { return pgadvisory.RunExclusivePgx(ctx, pool, key, empty) })
			run("fenced_pgx/empty", func() error {
				return pgadvisory.RunExclusivePgx(ctx, pool, key, empty, pgadvisory.WithFencing())
			})
		}
		run("unfenced_pgx"+commit+"/update", func() error { return pgadvisory.RunExclusivePgx(ctx, pool, key, update(plain)) })
		run("fenced_pgx"+commit+"/update", func() error {
			return pgadvisory.RunExclusivePgx(ctx, pool, key, update(fenced), pgadvisory.WithFencing())
		})
		// The publish statement alone (autocommit, one round trip), for a
		// lock of its own, with ever newer tokens.
		pubKey := testdb.Key(b)
		var tok int64
		run("publish_only_pgx"+commit, func() error {
			tok++
			tag, err := pool.Exec(ctx, fencing.PublishSQL, pubKey, tok)
			if err == nil && tag.RowsAffected() != 1 {
				err = fmt.Errorf("publish of token %d affected %d rows", tok, tag.RowsAffected())
			}
			return err
		})
	}
}

func BenchmarkTrigger(b *testing.B) {
	ctx := context.Background()
	pool := testdb.PoolConfig(b, func(cfg *pgxpool.Config) { cfg.MaxConns = 2 })
	key := testdb.Key(b)
	plain, fenced := fencedBenchTables(b, pool, key)
	admin := testdb.DB(b)
	var tok int64
	if err := admin.QueryRow(`SELECT token FROM pgadvisory.fence WHERE lock_id = $1`, key).Scan(&tok); err != nil {
		b.Fatal(err)
	}
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
	b.Run("single_row_no_trigger", single(plain))
	b.Run("single_row_trigger", single(fenced))

	bulk := func(tbl string) func(b *testing.B) {
		return func(b *testing.B) {
			q := `BEGIN; ` + setToken + `; INSERT INTO ` + tbl + ` (id, balance) SELECT g, g FROM generate_series(1, 10000) AS g; COMMIT`
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				if _, err := conn.Exec(ctx, `TRUNCATE `+tbl); err != nil { // no row trigger fires
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
	b.Run("bulk_10k_no_trigger", bulk(plain))
	b.Run("bulk_10k_trigger", bulk(fenced))
}

// fencedBenchTables creates a plain and a fenced (strict, lock key) accounts table
// with row 1 in each, and returns their names.
func fencedBenchTables(b *testing.B, pool *pgxpool.Pool, key int64) (plain, fenced string) {
	b.Helper()
	ctx := context.Background()
	admin := migrated.DB(b)
	schema := testdb.Schema(b)
	plain = fencing.Table(b, admin, schema, "plain", key, "")
	fenced = fencing.Table(b, admin, schema, "fenced", key, "strict")
	if _, err := admin.Exec(`INSERT INTO ` + plain + ` (id, balance) VALUES (1, 0)`); err != nil {
		b.Fatal(err)
	}
	err := pgadvisory.RunExclusivePgx(ctx, pool, key, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+fenced+` (id, balance) VALUES (1, 0)`)
		return err
	}, pgadvisory.WithFencing())
	if err != nil {
		b.Fatal(err)
	}
	return plain, fenced
}
