package lockgentest_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/lockgen/lockgen/lockgentest"
	"github.com/lockgen/lockgen/pgadvisory"
)

// cleanupTB collects the cleanups of one NewDB, so that the benchmark runs
// them (the drop) outside the timed part.
type cleanupTB struct {
	testing.TB
	cleanups []func()
}

func (c *cleanupTB) Cleanup(f func()) { c.cleanups = append(c.cleanups, f) }

func (c *cleanupTB) run() {
	for i := len(c.cleanups) - 1; i >= 0; i-- {
		c.cleanups[i]()
	}
	c.cleanups = nil
}

// BenchmarkNewDB times, in each iteration and in turn on the same server,
// NewDB (a database from lockgen's template, connected and pinged) and
// its baselines: createdb (connect to the server, CREATE DATABASE from
// template1, as the createdb command does) and from-scratch (createdb,
// then pgadvisory.Migrate, what NewDB would cost without the template).
// Drops are outside the timings. It reports each one's median in
// milliseconds and NewDB's median over createdb's (ratio-createdb); ns/op
// is the three together.
func BenchmarkNewDB(b *testing.B) {
	url := os.Getenv(lockgentest.EnvDatabaseURL)
	ctx := context.Background()
	lockgentest.NewDB(b) // the template, built once before timing
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close(ctx)
	var newDB, createdb, scratch []time.Duration
	tb := &cleanupTB{TB: b}
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		lockgentest.NewDB(tb)
		newDB = append(newDB, time.Since(start))
		b.StopTimer()
		tb.run()
		b.StartTimer()

		name := fmt.Sprintf("lockgentest_bench_%d_%d", os.Getpid(), i)
		start = time.Now()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			b.Fatal(err)
		}
		_ = conn.Close(ctx)
		createdb = append(createdb, time.Since(start))
		b.StopTimer()
		drop(b, admin, name)
		b.StartTimer()

		start = time.Now()
		conn, err = pgx.Connect(ctx, url)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			b.Fatal(err)
		}
		_ = conn.Close(ctx)
		cfg := conn.Config().Copy()
		cfg.Database = name
		db := stdlib.OpenDB(*cfg)
		if err := pgadvisory.Migrate(ctx, db); err != nil {
			b.Fatal(err)
		}
		_ = db.Close()
		scratch = append(scratch, time.Since(start))
		b.StopTimer()
		drop(b, admin, name)
		b.StartTimer()
	}
	b.StopTimer()
	m := median(newDB)
	b.ReportMetric(ms(m), "NewDB-ms-median")
	b.ReportMetric(ms(median(createdb)), "createdb-ms-median")
	b.ReportMetric(ms(median(scratch)), "from-scratch-ms-median")
	b.ReportMetric(float64(m)/float64(median(createdb)), "ratio-createdb")
}

func drop(b *testing.B, admin *pgx.Conn, name string) {
	if _, err := admin.Exec(context.Background(), "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		b.Fatal(err)
	}
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
