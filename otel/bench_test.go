package lockgenotel_test

// The observer's cost, measured beside a call without an observer in the
// same run (bench.sh runs interleaved passes and prints paired ratios):
//
//	Observer/otel : Observer/none <= 1.03
//
// Rows, all pgadvisory.RunExclusivePgx with an empty fn on one pool of 16
// connections:
//
//   - none: no observer (the baseline);
//   - noop: an event function that does nothing (pgadvisory's own
//     plumbing);
//   - otel: this package's observer on the OpenTelemetry SDK, every span
//     sampled and handed to a batch span processor (with an exporter that
//     drops them), metrics aggregated for a reader;
//   - otel_unsampled: the same with a sampler that records no span (metrics
//     only), as services that sample a small share of traces mostly run.
//
// BenchmarkObserverAlone is the observer's own work for one call, without
// the database, for the same two samplers.

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
	lockgenotel "github.com/lockgen/lockgen/otel"
	"github.com/lockgen/lockgen/pgadvisory"
)

// BenchmarkObserverAlone is the observer's own work for one successful
// call (start, acquired, released, end) without a database: the absolute
// cost that BenchmarkObserver compares with a call's.
func BenchmarkObserverAlone(b *testing.B) {
	call := pgadvisory.Call{Kind: pgadvisory.CallExclusive, Name: "bench.observer", LockIDs: []int64{42}}
	for _, row := range []struct {
		name    string
		sampler sdktrace.Sampler
	}{{"sampled", sdktrace.AlwaysSample()}, {"unsampled", sdktrace.NeverSample()}} {
		b.Run(row.name, func(b *testing.B) {
			obs := benchObserver(b, row.sampler)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_, co := obs.StartCall(ctx, call)
				co.Event(pgadvisory.Event{Kind: pgadvisory.EventAcquired, Wait: time.Millisecond})
				co.Event(pgadvisory.Event{Kind: pgadvisory.EventReleased, Held: time.Millisecond})
				co.EndCall(pgadvisory.CallEnd{Outcome: pgadvisory.OutcomeAcquired, Wait: time.Millisecond, Held: time.Millisecond})
			}
		})
	}
}

// BenchmarkObserver is the observer's cost in a call.
func BenchmarkObserver(b *testing.B) {
	ctx := context.Background()
	pool := testdb.PoolConfig(b, func(cfg *pgxpool.Config) { cfg.MaxConns = 16 })
	lock := pgadvisory.Lock{Name: "bench.observer", ID: testdb.Key(b)}
	sampled := benchObserver(b, sdktrace.AlwaysSample())
	unsampled := benchObserver(b, sdktrace.NeverSample())
	call := func(opts ...pgadvisory.Option) func() error {
		return func() error {
			return lock.RunExclusivePgx(ctx, pool, func(pgx.Tx) error { return nil }, opts...)
		}
	}
	runCases(b,
		benchCase{"none", func(b *testing.B) { benchOp(b, pool, call()) }},
		benchCase{"noop", func(b *testing.B) { benchOp(b, pool, call(pgadvisory.WithObserver(func(pgadvisory.Event) {}))) }},
		benchCase{"otel", func(b *testing.B) { benchOp(b, pool, call(sampled.Option())) }},
		benchCase{"otel_unsampled", func(b *testing.B) { benchOp(b, pool, call(unsampled.Option())) }},
	)
}

// benchObserver is an Observer on the SDK: sampler decides which spans are
// recorded; recorded spans go through a batch span processor to an exporter
// that drops them; metrics are aggregated for a manual reader.
func benchObserver(b *testing.B, sampler sdktrace.Sampler) *lockgenotel.Observer {
	b.Helper()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithBatcher(dropSpans{}))
	b.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	obs, err := lockgenotel.New(lockgenotel.WithMeterProvider(mp), lockgenotel.WithTracerProvider(tp))
	if err != nil {
		b.Fatal(err)
	}
	return obs
}

// dropSpans is a span exporter that drops what it gets.
type dropSpans struct{}

func (dropSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (dropSpans) Shutdown(context.Context) error                             { return nil }

// benchOp runs op as a benchmark after warm-up calls, and checks that every
// call succeeds and leaves no connection checked out.
func benchOp(b *testing.B, pool *pgxpool.Pool, op func() error) {
	b.Helper()
	for range 100 {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
	for deadline := time.Now().Add(time.Minute); pool.Stat().AcquiredConns() != 0; time.Sleep(20 * time.Microsecond) {
		if time.Now().After(deadline) {
			b.Fatal(errors.New("connections still in use a minute after the op"))
		}
	}
}

// benchCase is one row of a benchmark group.
type benchCase struct {
	name string
	fn   func(b *testing.B)
}

// runCases runs a group's rows in order, or in reverse order when
// LOCKGEN_BENCH_ORDER=reverse (bench.sh reverses every other pass, so no
// row always runs last; see the root module's .ci/bench).
func runCases(b *testing.B, cases ...benchCase) {
	b.Helper()
	if os.Getenv("LOCKGEN_BENCH_ORDER") == "reverse" {
		slices.Reverse(cases)
	}
	for _, c := range cases {
		b.Run(c.name, c.fn)
	}
}
