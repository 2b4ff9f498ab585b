package lockgenotel_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// A call's span is a child of the caller's span; the call's statements run
// in its context (a driver tracer sees the lock's span), and so does a
// session lock's fn, whose own spans nest under the lock's. The control:
// the same statements without the observer run in the caller's span.

func TestSpanParents(t *testing.T) {
	frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
		ctx := testdb.Context(t)
		tm := newTelemetry(t)
		lock := pgadvisory.Lock{Name: "otel.traced", ID: testdb.Key(t)}
		tracer := tm.tp.Tracer("test")

		t.Run("child of the caller", func(t *testing.T) {
			tm.spans.Reset()
			cctx, caller := tracer.Start(ctx, "caller")
			require.NoError(t, door.RunExclusiveLock(cctx, lock, noop, tm.obs.Option()))
			caller.End()
			spans := tm.spans.GetSpans()
			require.Len(t, spans, 2)
			lockSpan := spans[0]
			require.Equal(t, "lockgen.run_exclusive otel.traced", lockSpan.Name)
			require.Equal(t, caller.SpanContext().TraceID(), lockSpan.SpanContext.TraceID())
			require.Equal(t, caller.SpanContext().SpanID(), lockSpan.Parent.SpanID())
		})

		t.Run("session work nests under the lock", func(t *testing.T) {
			tm.spans.Reset()
			require.NoError(t, door.RunSession(ctx, lock, func(ctx context.Context) error {
				_, work := tracer.Start(ctx, "work")
				work.End()
				return nil
			}, tm.obs.Option()))
			spans := tm.spans.GetSpans()
			require.Len(t, spans, 2)
			work, lockSpan := spans[0], spans[1]
			require.Equal(t, "work", work.Name)
			require.Equal(t, "lockgen.run_session otel.traced", lockSpan.Name)
			require.Equal(t, lockSpan.SpanContext.SpanID(), work.Parent.SpanID())
			require.False(t, lockSpan.Parent.IsValid(), "no caller span: the lock's span is a root")
		})

		t.Run("statements run in the lock's span", func(t *testing.T) {
			tr := &spanTracer{}
			traced := frontdoor.Open(t, door.Driver, frontdoor.Configure(func(cc *pgx.ConnConfig) { cc.Tracer = tr }))
			tm.spans.Reset()
			cctx, caller := tracer.Start(ctx, "caller")
			require.NoError(t, traced.RunExclusiveLock(cctx, lock, noop, tm.obs.Option()))
			lockSpan := tm.spans.GetSpans()[0]
			seen := tr.of("pg_try_advisory_xact_lock")
			require.NotEmpty(t, seen)
			for _, sc := range seen {
				require.Equal(t, lockSpan.SpanContext.SpanID(), sc.SpanID())
			}

			// Control: unobserved, the statement runs in the caller's span.
			tr.reset()
			require.NoError(t, traced.RunExclusiveLock(cctx, lock, noop))
			caller.End()
			for _, sc := range tr.of("pg_try_advisory_xact_lock") {
				require.Equal(t, caller.SpanContext().SpanID(), sc.SpanID())
			}
		})
	})
}

// spanTracer is a pgx tracer (queries and batches) that records the span
// each statement's context carries.
type spanTracer struct {
	mu    sync.Mutex
	spans map[string][]trace.SpanContext
}

func (s *spanTracer) record(ctx context.Context, sql string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.spans == nil {
		s.spans = map[string][]trace.SpanContext{}
	}
	s.spans[sql] = append(s.spans[sql], trace.SpanContextFromContext(ctx))
}

// of returns the spans of the statements containing substr.
func (s *spanTracer) of(substr string) []trace.SpanContext {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []trace.SpanContext
	for sql, scs := range s.spans {
		if strings.Contains(sql, substr) {
			out = append(out, scs...)
		}
	}
	return out
}

func (s *spanTracer) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spans = nil
}

func (s *spanTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	s.record(ctx, data.SQL)
	return ctx
}

func (s *spanTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (s *spanTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (s *spanTracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	s.record(ctx, data.SQL)
}

func (s *spanTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
