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
//     only), as services that sample a small share of traces mostly run;
//   - sdk_floor: no observer, but the least the SDK does for what otel
//     records: a sampled span around the call and three measurements with
//     one attribute set built beforehand. otel minus sdk_floor is what this
//     package adds to the SDK's own cost;
//   - sdk_floor_unsampled: the same with the unsampled tracer (a span that
//     records nothing, and the three measurements): otel_unsampled's floor.
//
// BenchmarkObserverPaired runs the same rows interleaved call by call and
// compares the medians of the single calls' times; BenchmarkObserverAlone
// is the observer's own work for one call, without the database, for the
// same two samplers.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

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
	pool, rows := benchRows(b)
	cases := make([]benchCase, len(rows))
	for i, r := range rows {
		cases[i] = benchCase{r.name, func(b *testing.B) { benchOp(b, pool, r.op) }}
	}
	runCases(b, cases...)
}

// BenchmarkObserverPaired runs the rows of BenchmarkObserver in turn, one
// call each, inside one loop: each call is timed on its own, and the
// medians of those times are compared. Neighbouring calls see the same
// load, so on a shared, busy machine the paired ratio is far steadier than
// a ratio of two benchmarks run seconds apart. It reports each row's
// median (<row>-µs) and the ratios of the medians to none's (<row>/none);
// ns/op is the time of one round of all rows.
func BenchmarkObserverPaired(b *testing.B) {
	_, rows := benchRows(b)
	for range 100 {
		for _, r := range rows {
			if err := r.op(); err != nil {
				b.Fatal(err)
			}
		}
	}
	samples := make([][]time.Duration, len(rows))
	order := make([]int, len(rows))
	for i := range order {
		order[i] = i
	}
	rng := rand.New(rand.NewPCG(1, 2))
	b.ReportAllocs()
	for b.Loop() {
		// Each round runs the rows in a random order, so that no row
		// always follows the same one (and inherits its after-effects: a
		// garbage collection, a background goroutine).
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, i := range order {
			start := time.Now()
			if err := rows[i].op(); err != nil {
				b.Fatal(err)
			}
			samples[i] = append(samples[i], time.Since(start))
		}
	}
	base := medianDuration(samples[0])
	for i, r := range rows {
		m := medianDuration(samples[i])
		b.ReportMetric(float64(m)/1e3, r.name+"-µs")
		if i > 0 {
			b.ReportMetric(float64(m)/float64(base), fmt.Sprintf("%s/none", r.name))
		}
	}
}

// benchRow is one row: a RunExclusivePgx call on the benchmark's pool.
type benchRow struct {
	name string
	op   func() error
}

// benchRows opens the pool and makes the rows (see the file comment), none
// first.
func benchRows(b *testing.B) (*pgxpool.Pool, []benchRow) {
	ctx := context.Background()
	pool := testdb.PoolConfig(b, func(cfg *pgxpool.Config) { cfg.MaxConns = 16 })
	lock := pgadvisory.Lock{Name: "bench.observer", ID: testdb.Key(b)}
	empty := func(pgx.Tx) error { return nil }
	call := func(opts ...pgadvisory.Option) func() error {
		return func() error { return lock.RunExclusivePgx(ctx, pool, empty, opts...) }
	}
	sampled := benchObserver(b, sdktrace.AlwaysSample())
	unsampled := benchObserver(b, sdktrace.NeverSample())
	floor := newSDKFloor(b, sdktrace.AlwaysSample())
	floorUnsampled := newSDKFloor(b, sdktrace.NeverSample())
	return pool, []benchRow{
		{"none", call()},
		{"noop", call(pgadvisory.WithObserver(func(pgadvisory.Event) {}))},
		{"otel", call(sampled.Option())},
		{"otel_unsampled", call(unsampled.Option())},
		{"sdk_floor", floor.call(ctx, lock, pool, empty)},
		{"sdk_floor_unsampled", floorUnsampled.call(ctx, lock, pool, empty)},
	}
}

// call is a RunExclusivePgx call inside the least the SDK does for it: a
// span around it and three measurements.
func (f *sdkFloor) call(ctx context.Context, lock pgadvisory.Lock, pool *pgxpool.Pool, fn func(pgx.Tx) error) func() error {
	return func() error {
		sctx, span := f.tracer.Start(ctx, "lock")
		err := lock.RunExclusivePgx(sctx, pool, fn)
		f.wait.Record(sctx, 0.0001, f.attrs)
		f.hold.Record(sctx, 0.0001, f.attrs)
		f.attempts.Add(sctx, 1, f.attrs)
		span.End()
		return err
	}
}

// sdkFloor is the SDK, configured as benchObserver configures it, with
// instruments like the observer's and one attribute set built once.
type sdkFloor struct {
	tracer     trace.Tracer
	wait, hold metric.Float64Histogram
	attempts   metric.Int64Counter
	attrs      metric.MeasurementOption
}

func newSDKFloor(b *testing.B, sampler sdktrace.Sampler) *sdkFloor {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithBatcher(dropSpans{}))
	b.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	meter := mp.Meter("floor")
	f := &sdkFloor{tracer: tp.Tracer("floor"), attrs: metric.WithAttributeSet(attribute.NewSet(
		attribute.String("lockgen.lock.name", "bench.observer"), attribute.String("lockgen.outcome", "acquired")))}
	var err error
	if f.wait, err = meter.Float64Histogram("wait"); err != nil {
		b.Fatal(err)
	}
	if f.hold, err = meter.Float64Histogram("hold"); err != nil {
		b.Fatal(err)
	}
	if f.attempts, err = meter.Int64Counter("attempts"); err != nil {
		b.Fatal(err)
	}
	return f
}

func medianDuration(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
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
