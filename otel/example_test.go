package lockgenotel_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/keyspace"
	lockgenotel "github.com/lockgen/lockgen/otel"
	"github.com/lockgen/lockgen/pgadvisory"
)

func ExampleNew() {
	ctx := context.Background()
	// A service passes nothing to New: it records through the global
	// providers that its OpenTelemetry set-up configured. Here an in-memory
	// reader stands in for the exporter.
	reader := sdkmetric.NewManualReader()
	obs, err := lockgenotel.New(lockgenotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		log.Fatal(err)
	}
	pool := examplePool()
	defer pool.Close()
	// cmd/lockgen generates the locks and their Declared list.
	report := pgadvisory.Lock{Name: "reports.daily_email", ID: exampleLockID("new")}
	declared := []pgadvisory.Declared{{Name: report.Name, ID: report.ID}}

	// Once, at start-up: every call of the Locker on the declared locks is
	// recorded.
	locker, err := pgadvisory.New(pgadvisory.Pgx(pool), pgadvisory.WithLockSetObserver(declared, obs))
	if err != nil {
		log.Fatal(err)
	}
	_ = locker.RunExclusive(ctx, report, func(pgx.Tx) error {
		// The same lock, again, while it is held: locked.
		return locker.RunExclusive(ctx, report, func(pgx.Tx) error { return nil })
	})

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	var lines []string
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
			for _, dp := range sum.DataPoints {
				outcome, _ := dp.Attributes.Value(lockgenotel.OutcomeKey)
				name, _ := dp.Attributes.Value(lockgenotel.LockNameKey)
				lines = append(lines, fmt.Sprintf("%s %s %s: %d", m.Name, name.AsString(), outcome.AsString(), dp.Value))
			}
		}
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// lockgen.lock.attempts reports.daily_email acquired: 1
	// lockgen.lock.attempts reports.daily_email locked: 1
}

// examplePool opens a pool on this test binary's private database (package
// testdb, on the server named by LOCKGEN_DATABASE_URL).
func examplePool() *pgxpool.Pool {
	url, err := testdb.PackageURL()
	if err != nil {
		log.Fatal(err)
	}
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		log.Fatal(err)
	}
	return pool
}

// exampleLockID is an ID of the examples' own, per process, so that two
// test runs on one server do not contend. Real code uses the generated ID.
func exampleLockID(name string) int64 {
	return keyspace.ParamID("examples.otel."+name, keyspace.Int64Param(int64(os.Getpid())))
}
