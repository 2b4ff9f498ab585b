package lockgenotel_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	lockgenotel "github.com/lockgen/lockgen/otel"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Set once: an observer set for the Locker records calls that carry no
// option; one set for a lock set records its locks instead. Instruments
// have the documented names and units, and WithMetricLockID(false) keeps
// the lock ID out of the metrics but not out of the spans.

func TestSetOnce(t *testing.T) {
	frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
		ctx := testdb.Context(t)
		process, set := newTelemetry(t), newTelemetry(t)
		raw := testdb.Key(t)
		declared := pgadvisory.Lock{Name: "otel.declared", ID: testdb.Key(t)}
		decls := []pgadvisory.Declared{{Name: declared.Name, ID: declared.ID}}

		door = door.WithLocker(pgadvisory.WithLockerObserver(process.obs), pgadvisory.WithLockSetObserver(decls, set.obs))

		require.NoError(t, door.RunExclusive(ctx, raw, noop))
		require.NoError(t, door.RunExclusiveLock(ctx, declared, noop))

		byRaw := map[attribute.Key]string{lockgenotel.LockIDKey: itoa(raw), lockgenotel.LockNameKey: ""}
		byName := map[attribute.Key]string{lockgenotel.LockIDKey: itoa(declared.ID), lockgenotel.LockNameKey: declared.Name}
		p, s := process.collect(t), set.collect(t)
		require.EqualValues(t, 1, count(p["lockgen.lock.attempts"], byRaw))
		require.Zero(t, count(p["lockgen.lock.attempts"], byName), "the lock set's observer replaces the Locker's")
		require.EqualValues(t, 1, count(s["lockgen.lock.attempts"], byName))
		require.Zero(t, count(s["lockgen.lock.attempts"], byRaw))
	})
}

func TestInstruments(t *testing.T) {
	ctx := testdb.Context(t)
	reader := sdkmetric.NewManualReader()
	obs, err := lockgenotel.New(lockgenotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	require.NoError(t, err)
	door := frontdoor.OnPool(testdb.Pool(t))
	require.NoError(t, door.RunExclusive(ctx, testdb.Key(t), noop, obs.Option()))

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	units := map[string]string{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			units[m.Name] = m.Unit
			require.NotEmpty(t, m.Description, m.Name)
		}
	}
	require.Equal(t, map[string]string{
		"lockgen.lock.wait.duration": "s",
		"lockgen.lock.hold.duration": "s",
		"lockgen.lock.attempts":      "{attempt}",
	}, units)
}

func TestMetricLockID(t *testing.T) {
	ctx := testdb.Context(t)
	tm := newTelemetry(t, lockgenotel.WithMetricLockID(false))
	lock := pgadvisory.Lock{Name: "otel.per_tenant", ID: testdb.Key(t)}
	require.NoError(t, frontdoor.OnPool(testdb.Pool(t)).RunExclusiveLock(ctx, lock, noop, tm.obs.Option()))
	for name, points := range tm.collect(t) {
		for _, p := range points {
			_, ok := p.attrs[lockgenotel.LockIDKey]
			require.False(t, ok, name)
			require.Equal(t, lock.Name, p.attrs[lockgenotel.LockNameKey].AsString(), name)
		}
	}
	spans := tm.spans.GetSpans()
	require.Len(t, spans, 1)
	require.Equal(t, lock.ID, spanAttrs(spans[0])[lockgenotel.LockIDKey].AsInt64(), "spans keep the ID")

	// Control: by default the metrics carry it.
	tm = newTelemetry(t)
	require.NoError(t, frontdoor.OnPool(testdb.Pool(t)).RunExclusiveLock(ctx, lock, noop, tm.obs.Option()))
	require.EqualValues(t, 1, count(tm.collect(t)["lockgen.lock.attempts"], map[attribute.Key]string{lockgenotel.LockIDKey: itoa(lock.ID)}))
}

func itoa(id int64) string { return attribute.Int64Value(id).Emit() }
