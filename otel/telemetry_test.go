package lockgenotel_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
	lockgenotel "github.com/lockgen/lockgen/otel"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// telemetry is an Observer recording into the SDK's in-memory reader and
// span exporter.
type telemetry struct {
	obs    *lockgenotel.Observer
	reader *sdkmetric.ManualReader
	spans  *tracetest.InMemoryExporter
	tp     *sdktrace.TracerProvider
}

func newTelemetry(t *testing.T, opts ...lockgenotel.Option) *telemetry {
	t.Helper()
	tm := &telemetry{reader: sdkmetric.NewManualReader(), spans: tracetest.NewInMemoryExporter()}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(tm.reader))
	tm.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(tm.spans))
	t.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tm.tp.Shutdown(context.Background())
	})
	var err error
	tm.obs, err = lockgenotel.New(append([]lockgenotel.Option{lockgenotel.WithMeterProvider(mp), lockgenotel.WithTracerProvider(tm.tp)}, opts...)...)
	require.NoError(t, err)
	return tm
}

// point is one data point: its attributes as a map, and its value (a
// counter's sum, a histogram's count).
type point struct {
	attrs map[attribute.Key]attribute.Value
	value int64
	sum   float64 // histograms
}

// collect returns the data points of every metric, by metric name.
func (tm *telemetry) collect(t *testing.T) map[string][]point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, tm.reader.Collect(context.Background(), &rm))
	out := map[string][]point{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, lockgenotel.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				require.True(t, data.IsMonotonic, m.Name)
				for _, dp := range data.DataPoints {
					out[m.Name] = append(out[m.Name], point{attrs: attrMap(dp.Attributes), value: dp.Value})
				}
			case metricdata.Histogram[float64]:
				for _, dp := range data.DataPoints {
					out[m.Name] = append(out[m.Name], point{attrs: attrMap(dp.Attributes), value: int64(dp.Count), sum: dp.Sum})
				}
			default:
				t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return out
}

// count is the total of the points whose attributes include want.
func count(points []point, want map[attribute.Key]string) int64 {
	var n int64
	for _, p := range points {
		if matches(p, want) {
			n += p.value
		}
	}
	return n
}

func matches(p point, want map[attribute.Key]string) bool {
	for k, v := range want {
		got, ok := p.attrs[k]
		if v == "" {
			if ok {
				return false
			}
			continue
		}
		if !ok || got.Emit() != v {
			return false
		}
	}
	return true
}

func attrMap(s attribute.Set) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.ToSlice() {
		m[kv.Key] = kv.Value
	}
	return m
}

func spanAttrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

func eventNames(s tracetest.SpanStub) []string {
	var names []string
	for _, e := range s.Events {
		names = append(names, e.Name)
	}
	return names
}
