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

	// locks caches what the observer builds per lock (lockKey ->
	// *lockEntry), for up to maxCachedLocks locks: building an attribute
	// set sorts and hashes it, which would otherwise be most of the
	// observer's own cost.
	locks  sync.Map
	cached atomic.Int64
}

// maxCachedLocks bounds the cache. The SDK keeps the series of every set
// anyway; beyond the bound (many parameterized lock IDs with
// WithMetricLockID(true)) a call builds the sets it needs itself.
const maxCachedLocks = 4096

// lockKey identifies a call's lock in the metrics: its name, its ID (as
// configured) and the call's family.
type lockKey struct {
	name  string
	id    int64
	hasID bool
	kind  pgadvisory.CallKind
}

// lockEntry is what the observer keeps per lockKey: the span name and the
// measurement options (attribute sets) of its metrics.
type lockEntry struct {
	key      lockKey
	spanName string
	// byOutcome are the options of each outcome without error.type; a
	// cached entry has them all, a call's own entry builds them on demand.
	byOutcome [pgadvisory.OutcomeError + 1]metric.MeasurementOption
	// withError maps errorKey to the options with error.type (or of a
	// fencing rejection), built as they occur.
	withError sync.Map
}

// errorKey is an outcome with an error.type, or a fencing rejection (with
// rejection set).
type errorKey struct {
	outcome   pgadvisory.Outcome
	errType   string
	rejection bool
}

// entry returns the cached entry of k, or a call's own when the cache is
// full.
func (o *Observer) entry(k lockKey) *lockEntry {
	if v, ok := o.locks.Load(k); ok {
		return v.(*lockEntry)
	}
	e := &lockEntry{key: k, spanName: "lockgen." + k.kind.String()}
	if k.name != "" {
		e.spanName += " " + k.name
	}
	if o.cached.Load() >= maxCachedLocks {
		return e
	}
	for outcome := pgadvisory.OutcomeAcquired; outcome <= pgadvisory.OutcomeError; outcome++ {
		e.byOutcome[outcome] = e.build(errorKey{outcome: outcome})
	}
	if v, loaded := o.locks.LoadOrStore(k, e); loaded {
		return v.(*lockEntry)
	}
	o.cached.Add(1)
	return e
}

// measurement is the option for outcome and, if not empty, errType.
func (e *lockEntry) measurement(outcome pgadvisory.Outcome, errType string) metric.MeasurementOption {
	if errType == "" {
		if m := e.byOutcome[outcome]; m != nil {
			return m
		}
		m := e.build(errorKey{outcome: outcome})
		e.byOutcome[outcome] = m // a call's own entry: one goroutine at a time
		return m
	}
	return e.withErrorKey(errorKey{outcome: outcome, errType: errType})
}

// rejection is the option of a fencing rejection of kind.
func (e *lockEntry) rejection(kind error) metric.MeasurementOption {
	return e.withErrorKey(errorKey{errType: rejectionName(kind), rejection: true})
}

func (e *lockEntry) withErrorKey(k errorKey) metric.MeasurementOption {
	if v, ok := e.withError.Load(k); ok {
		return v.(metric.MeasurementOption)
	}
	v, _ := e.withError.LoadOrStore(k, e.build(k))
	return v.(metric.MeasurementOption)
}

// build makes the attribute set of k: the lock's name and ID (as
// configured), the family, and the outcome with error.type, or the
// rejection.
func (e *lockEntry) build(k errorKey) metric.MeasurementOption {
	var kvs [5]attribute.KeyValue
	attrs := kvs[:0]
	if e.key.name != "" {
		attrs = append(attrs, LockNameKey.String(e.key.name))
	}
	if e.key.hasID {
		attrs = append(attrs, LockIDKey.Int64(e.key.id))
	}
	attrs = append(attrs, CallKey.String(e.key.kind.String()))
	switch {
	case k.rejection:
		attrs = append(attrs, RejectionKey.String(k.errType))
	case k.errType != "":
		attrs = append(attrs, OutcomeKey.String(k.outcome.String()), ErrorTypeKey.String(k.errType))
	default:
		attrs = append(attrs, OutcomeKey.String(k.outcome.String()))
	}
	return metric.WithAttributeSet(attribute.NewSet(attrs...))
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
	k := lockKey{name: call.Name, kind: call.Kind}
	if len(call.LockIDs) > 0 && o.metricLockID {
		k.id, k.hasID = call.LockIDs[0], true
	}
	c := &callObserver{o: o, call: call, lock: o.entry(k)}
	ctx, c.span = o.tracer.Start(ctx, c.lock.spanName, trace.WithSpanKind(trace.SpanKindInternal))
	c.ctx = ctx
	return ctx, c
}

// Option returns the pgadvisory option that makes o observe one call, or
// every call on a lock (pgadvisory.Lock.With).
func (o *Observer) Option() pgadvisory.Option {
	return pgadvisory.WithCallObserver(o)
}

// spanAttributes are a call's attributes, set on its span when it ends
// (all at once: one call into the SDK), and only on a span that records: a
// sampler that drops the span makes them free.
func spanAttributes(call pgadvisory.Call, attrs []attribute.KeyValue) []attribute.KeyValue {
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
