package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	lockgenotel "github.com/lockgen/lockgen/otel"
	"github.com/lockgen/lockgen/pgadvisory"
)

func main() {
	url := os.Getenv("LOCKGEN_DATABASE_URL")
	if url == "" {
		url = "postgres://localhost:5432/test"
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, url, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// telemetry is where the example's metrics and spans go: an in-memory
// reader and span recorder stand in for a service's exporters.
type telemetry struct {
	metrics *sdkmetric.ManualReader
	spans   *tracetest.SpanRecorder
	mp      *sdkmetric.MeterProvider
	tp      *sdktrace.TracerProvider
}

func newTelemetry() *telemetry {
	t := &telemetry{metrics: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	t.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(t.metrics))
	t.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(t.spans))
	return t
}

func (t *telemetry) shutdown(ctx context.Context) {
	_ = t.mp.Shutdown(ctx)
	_ = t.tp.Shutdown(ctx)
}

// run plays the four acts against the database at url and prints the
// telemetry to out. It returns an error when the database is unreachable
// or an act's outcome is not the expected one.
func run(ctx context.Context, url string, out io.Writer) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return fmt.Errorf("telemetry: database URL: %w", err)
	}
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	if err := pgadvisory.Migrate(ctx, db); err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}

	tel := newTelemetry()
	defer tel.shutdown(context.WithoutCancel(ctx))
	// A service passes nothing: New uses the global providers, which its
	// OpenTelemetry set-up configured.
	obs, err := lockgenotel.New(lockgenotel.WithMeterProvider(tel.mp), lockgenotel.WithTracerProvider(tel.tp))
	if err != nil {
		return err
	}
	// Once, at start-up: every call of the pool's Locker is observed.
	locker, err := pgadvisory.New(pgadvisory.Pgx(pool), pgadvisory.WithLockerObserver(obs))
	if err != nil {
		return err
	}
	defer locker.Close()

	s := &stage{pool: pool, locker: locker, tracer: tel.tp.Tracer("example/telemetry"), window: "telemetry-" + randomSuffix()}
	defer s.clearLedger(context.WithoutCancel(ctx))
	results := []actResult{
		s.dailyReport(ctx),
		s.cleanupTimeout(ctx),
		s.relayLost(ctx),
		s.shuttingDown(ctx),
	}
	for _, r := range results {
		fmt.Fprintln(out, r.line)
	}

	fmt.Fprintln(out, "\nmetrics:")
	lines, err := metricLines(ctx, tel.metrics)
	if err != nil {
		return err
	}
	for _, l := range lines {
		fmt.Fprintln(out, "  "+l)
	}
	fmt.Fprintln(out, "\nspans:")
	for _, l := range spanTree(tel.spans.Ended()) {
		fmt.Fprintln(out, "  "+l)
	}
	for _, r := range results {
		if r.err != nil {
			fmt.Fprintf(out, "UNEXPECTED: %v\n", r.err)
			return r.err
		}
	}
	fmt.Fprintln(out, "ok: every outcome recorded")
	return nil
}

// randomSuffix returns 6 random hex digits, so that each run has its own
// run-once window.
func randomSuffix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
