package pgadvisory_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/migrations"
)

// BenchmarkTriggerOwnTime: the statement trigger's own time (EXPLAIN
// ANALYZE's trigger time: pgadvisory.fence_check_statement, its transition
// table read) on a one-row UPDATE (single_row) and on a 10,000-row INSERT
// (bulk_10k) that carry the current token, for the current function and,
// as the baseline, the function as migration 00006 defined it (before
// 00008 added the check of pgadvisory.fenced_table's listing and of
// fencing_token's type), on two tables of the same layout and lock. Each
// op runs the statement on each table, in alternating order, so that both
// samples of an op share the machine's load. It reports the medians and
// 10th percentiles of both, and current_p50/before_p50.
func BenchmarkTriggerOwnTime(b *testing.B) {
	ctx := context.Background()
	admin := migrated.DB(b)
	pool := testdb.PoolConfig(b, func(cfg *pgxpool.Config) { cfg.MaxConns = 1 })
	key := testdb.Key(b)
	schema := testdb.Schema(b)
	current := fencing.Table(b, admin, schema, "current", key, "strict")
	before := fencing.Table(b, admin, schema, "before", key, "strict")

	// The baseline function: 00006's text, in the benchmark's schema.
	src, err := fs.ReadFile(migrations.FS, "00006_fencing_statement_check.sql")
	if err != nil {
		b.Fatal(err)
	}
	def := string(src)
	start := strings.Index(def, "CREATE FUNCTION pgadvisory.fence_check_statement()")
	end := strings.Index(def[start:], "\n$$;") + len("\n$$;")
	if start < 0 || end < len("\n$$;") {
		b.Fatal("00006's fence_check_statement not found")
	}
	fn := schema + ".fence_check_statement_00006"
	def = strings.Replace(def[start:start+end], "pgadvisory.fence_check_statement()", fn+"()", 1)
	args := fmt.Sprintf("'%d', 'strict'", key)
	for _, q := range []string{
		def,
		`DROP TRIGGER zz_pgadvisory_fence_update ON ` + before,
		`CREATE TRIGGER zz_pgadvisory_fence_update AFTER UPDATE ON ` + before + `
			REFERENCING OLD TABLE AS fence_old NEW TABLE AS fence_new
			FOR EACH STATEMENT EXECUTE FUNCTION ` + fn + `(` + args + `)`,
		`DROP TRIGGER zz_pgadvisory_fence_insert ON ` + before,
		`CREATE TRIGGER zz_pgadvisory_fence_insert AFTER INSERT ON ` + before + `
			REFERENCING NEW TABLE AS fence_new
			FOR EACH STATEMENT EXECUTE FUNCTION ` + fn + `(` + args + `)`,
		`DROP TRIGGER zz_pgadvisory_fence_delete ON ` + before,
		`CREATE TRIGGER zz_pgadvisory_fence_delete AFTER DELETE ON ` + before + `
			REFERENCING OLD TABLE AS fence_old
			FOR EACH STATEMENT EXECUTE FUNCTION ` + fn + `(` + args + `)`,
	} {
		if _, err := admin.Exec(q); err != nil {
			b.Fatalf("%v: %s", err, q)
		}
	}
	tok := fencing.Publish(b, admin, key)
	for _, tbl := range []string{current, before} {
		if err := fencing.Write(admin, tok, `INSERT INTO `+tbl+` (id, balance) VALUES (1, 0)`); err != nil {
			b.Fatal(err)
		}
	}

	conn, err := pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(conn.Release)
	// triggerTime is the time, in ns, of trigger in the statement q (tbl
	// in it is the table), run after prep in one transaction that carries
	// the token.
	triggerTime := func(prep, q, tbl, trigger string) float64 {
		var plan string
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT set_config('pgadvisory.fencing_token', $1, true)`, fmt.Sprint(tok)); err != nil {
				return err
			}
			if prep != "" {
				if _, err := tx.Exec(ctx, strings.ReplaceAll(prep, "TABLE", tbl)); err != nil {
					return err
				}
			}
			return tx.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+strings.ReplaceAll(q, "TABLE", tbl)).Scan(&plan)
		})
		if err != nil {
			b.Fatal(err)
		}
		var out []struct {
			Triggers []struct {
				Name string  `json:"Trigger Name"`
				Time float64 `json:"Time"` // ms
			}
		}
		if err := json.Unmarshal([]byte(plan), &out); err != nil {
			b.Fatal(err)
		}
		for _, t := range out[0].Triggers {
			if t.Name == trigger {
				return t.Time * 1e6
			}
		}
		b.Fatalf("no trigger %s in %s", trigger, plan)
		return 0
	}
	paired := func(prep, q, trigger string) func(b *testing.B) {
		return func(b *testing.B) {
			var cur, old []float64
			i := 0
			for b.Loop() {
				if i%2 == 0 {
					cur = append(cur, triggerTime(prep, q, current, trigger))
					old = append(old, triggerTime(prep, q, before, trigger))
				} else {
					old = append(old, triggerTime(prep, q, before, trigger))
					cur = append(cur, triggerTime(prep, q, current, trigger))
				}
				i++
			}
			p := func(xs []float64, q float64) float64 {
				s := slices.Clone(xs)
				slices.Sort(s)
				return s[int(q*float64(len(s)-1))]
			}
			b.ReportMetric(p(cur, 0.5), "current_p50_ns")
			b.ReportMetric(p(old, 0.5), "before_p50_ns")
			b.ReportMetric(p(cur, 0.1), "current_p10_ns")
			b.ReportMetric(p(old, 0.1), "before_p10_ns")
			b.ReportMetric(p(cur, 0.5)/p(old, 0.5), "current/before")
		}
	}
	runCases(b,
		benchCase{"single_row", paired("", `UPDATE TABLE SET balance = balance + 1 WHERE id = 1`, "zz_pgadvisory_fence_update")},
		// The DELETE before each INSERT runs in the same transaction and
		// carries the token too.
		benchCase{"bulk_10k", paired(`DELETE FROM TABLE WHERE id > 1`,
			`INSERT INTO TABLE (id, balance) SELECT g, g FROM generate_series(2, 10001) AS g`, "zz_pgadvisory_fence_insert")},
	)
}
