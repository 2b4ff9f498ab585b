package lockgenotel

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockgen/lockgen/pgadvisory"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/lockgen/lockgen/otel"

// Observer is a pgadvisory.Observer that records metrics and spans. Make
// one with [New]; it is safe for concurrent calls.
type Observer struct {
	tracer       trace.Tracer
	wait, hold   metric.Float64Histogram
	attempts     metric.Int64Counter
	rejections   metric.Int64Counter
	metricLockID bool

	// measurements caches the attribute sets of the metrics (setKey ->
	// metric.MeasurementOption), up to maxCachedSets of them: building a
	// set sorts and hashes its attributes, which would otherwise be most
	// of the observer's cost.
	measurements sync.Map
	cached       atomic.Int64
}

// maxCachedSets bounds the cache of attribute sets. The SDK keeps one
// series per set anyway; beyond the bound (many parameterized lock IDs)
// sets are built per call.
const maxCachedSets = 4096

// setKey identifies the attribute set of a measurement.
type setKey struct {
	name    string
	id      int64
	hasID   bool
	kind    pgadvisory.CallKind
	outcome pgadvisory.Outcome
	errType string
}

// measurement is the option carrying the attribute set of k: the lock's
// name and ID (as configured), the family, the outcome and, if not empty,
// error.type.
func (o *Observer) measurement(k setKey) metric.MeasurementOption {
	if v, ok := o.measurements.Load(k); ok {
		return v.(metric.MeasurementOption)
	}
	var kvs [5]attribute.KeyValue
	attrs := kvs[:0]
	if k.name != "" {
		attrs = append(attrs, LockNameKey.String(k.name))
	}
	if k.hasID {
		attrs = append(attrs, LockIDKey.Int64(k.id))
	}
	attrs = append(attrs, CallKey.String(k.kind.String()), OutcomeKey.String(k.outcome.String()))
	if k.errType != "" {
		attrs = append(attrs, ErrorTypeKey.String(k.errType))
	}
	opt := metric.WithAttributeSet(attribute.NewSet(attrs...))
	if o.cached.Load() < maxCachedSets {
		if _, loaded := o.measurements.LoadOrStore(k, opt); !loaded {
			o.cached.Add(1)
		}
	}
	return opt
}

// Option configures [New].
type Option func(*config)

type config struct {
	meters       metric.MeterProvider
	tracers      trace.TracerProvider
	metricLockID bool
}

// WithMeterProvider sets where the metrics go. The default is the global
// provider (otel.GetMeterProvider), as it is when the metric is recorded.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.meters = mp }
}

// WithTracerProvider sets where the spans go. The default is the global
// provider (otel.GetTracerProvider). A no-op provider
// (go.opentelemetry.io/otel/trace/noop) turns spans off.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tracers = tp }
}

// WithMetricLockID says whether metrics carry lockgen.lock.id (the default
// is true). Parameterized locks have one ID per parameter value, so their
// IDs can make many time series; spans always carry the ID.
func WithMetricLockID(include bool) Option {
	return func(c *config) { c.metricLockID = include }
}

// Bucket boundaries, in seconds. Waits range from a try-lock's round trip
// (about 100 µs on a local server) to long WithWait waits; holds from an
// empty transaction to a session lock held for a day.
var (
	waitBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
	holdBuckets = []float64{0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 14400, 86400}
)

// New returns an Observer recording through the global providers, or those
// given with [WithMeterProvider] and [WithTracerProvider].
func New(opts ...Option) (*Observer, error) {
	c := config{metricLockID: true}
	for _, opt := range opts {
		if opt != nil {
			opt(&c)
		}
	}
	if c.meters == nil {
		c.meters = otel.GetMeterProvider()
	}
	if c.tracers == nil {
		c.tracers = otel.GetTracerProvider()
	}
	meter := c.meters.Meter(ScopeName)
	o := &Observer{tracer: c.tracers.Tracer(ScopeName), metricLockID: c.metricLockID}
	var err error
	if o.wait, err = meter.Float64Histogram("lockgen.lock.wait.duration",
		metric.WithUnit("s"),
		metric.WithDescription("Time from the start of a lock call until the server granted or refused its locks, or the wait timed out."),
		metric.WithExplicitBucketBoundaries(waitBuckets...)); err != nil {
		return nil, fmt.Errorf("lockgenotel: %w", err)
	}
	if o.hold, err = meter.Float64Histogram("lockgen.lock.hold.duration",
		metric.WithUnit("s"),
		metric.WithDescription("Time a lock call held its locks, from the grant to the release."),
		metric.WithExplicitBucketBoundaries(holdBuckets...)); err != nil {
		return nil, fmt.Errorf("lockgenotel: %w", err)
	}
	if o.attempts, err = meter.Int64Counter("lockgen.lock.attempts",
		metric.WithUnit("{attempt}"),
		metric.WithDescription("Lock calls, by outcome: acquired, locked, timeout, lost or error.")); err != nil {
		return nil, fmt.Errorf("lockgenotel: %w", err)
	}
	if o.rejections, err = meter.Int64Counter("lockgen.fencing.rejections",
		metric.WithUnit("{rejection}"),
		metric.WithDescription("Writes and token publishes that a fencing guard refused, as lockgen calls saw them.")); err != nil {
		return nil, fmt.Errorf("lockgenotel: %w", err)
	}
	return o, nil
}

// StartCall implements pgadvisory.Observer: it starts the call's span, a
// child of ctx's, and returns ctx with it.
func (o *Observer) StartCall(ctx context.Context, call pgadvisory.Call) (context.Context, pgadvisory.CallObserver) {
	c := &callObserver{o: o, kind: call.Kind, key: setKey{name: call.Name, kind: call.Kind}}
	if len(call.LockIDs) > 0 {
		c.id = call.LockIDs[0]
		if o.metricLockID {
			c.key.id, c.key.hasID = c.id, true
		}
	}
	name := "lockgen." + call.Kind.String()
	if call.Name != "" {
		name += " " + call.Name
	}
	ctx, c.span = o.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal))
	if c.span.IsRecording() {
		c.span.SetAttributes(spanAttributes(call)...)
	}
	c.ctx = ctx
	return ctx, c
}

// Option returns the pgadvisory option that makes o observe one call, or
// every call on a lock (pgadvisory.Lock.With).
func (o *Observer) Option() pgadvisory.Option {
	return pgadvisory.WithCallObserver(o)
}

// spanAttributes are a call's attributes as its span starts. They are set
// only on a span that records: a sampler that drops the span makes them
// free.
func spanAttributes(call pgadvisory.Call) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 7)
	if call.Name != "" {
		attrs = append(attrs, LockNameKey.String(call.Name))
	}
	if len(call.LockIDs) > 0 {
		attrs = append(attrs, LockIDKey.Int64(call.LockIDs[0]))
	}
	if len(call.LockIDs) > 1 {
		attrs = append(attrs, LockIDsKey.Int64Slice(call.LockIDs))
	}
	attrs = append(attrs, CallKey.String(call.Kind.String()))
	if call.Shared {
		attrs = append(attrs, LockSharedKey.Bool(true))
	}
	if call.Window != "" {
		attrs = append(attrs, RunOnceWindowKey.String(call.Window))
	}
	if call.Token != 0 {
		attrs = append(attrs, FencingTokenKey.Int64(call.Token))
	}
	return attrs
}
