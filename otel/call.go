package lockgenotel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockgen/lockgen/pgadvisory"
)

// callObserver follows one call: its span, and what was recorded already.
type callObserver struct {
	o            *Observer
	ctx          context.Context // the caller's context with the call's span
	kind         pgadvisory.CallKind
	id           int64  // the call's (first) lock ID
	key          setKey // its metrics' attributes, less outcome and error.type
	span         trace.Span
	waitRecorded bool
	tokenSet     bool
}

// Event adds e to the span. The grant's wait is recorded at once, so that a
// session lock held for hours shows its wait when it is granted.
func (c *callObserver) Event(e pgadvisory.Event) {
	if e.Kind == pgadvisory.EventAcquired && !c.waitRecorded {
		c.waitRecorded = true
		c.o.wait.Record(c.ctx, e.Wait.Seconds(), c.measurement(pgadvisory.OutcomeAcquired, ""))
	}
	if !c.span.IsRecording() {
		return
	}
	if e.Token != 0 && !c.tokenSet {
		c.tokenSet = true
		c.span.SetAttributes(FencingTokenKey.Int64(e.Token))
	}
	if e.Err != nil {
		c.span.AddEvent(e.Kind.String(), trace.WithAttributes(ErrorTypeKey.String(ErrorType(e.Err))))
		return
	}
	c.span.AddEvent(e.Kind.String())
}

// EndCall records the call's metrics and ends its span.
func (c *callObserver) EndCall(end pgadvisory.CallEnd) {
	errType := ErrorType(end.Err)
	if c.kind != pgadvisory.CallFenced {
		m := c.measurement(end.Outcome, "")
		if !c.waitRecorded && end.Wait > 0 {
			c.o.wait.Record(c.ctx, end.Wait.Seconds(), m)
		}
		if end.Held > 0 {
			c.o.hold.Record(c.ctx, end.Held.Seconds(), m)
		}
		if errType != "" {
			m = c.measurement(end.Outcome, errType)
		}
		c.o.attempts.Add(c.ctx, 1, m)
	}
	if end.Rejection != nil {
		c.o.rejections.Add(c.ctx, 1, metric.WithAttributeSet(c.rejectionSet(end.Rejection)))
	}
	if c.span.IsRecording() {
		c.endSpan(end, errType)
	}
	c.span.End()
}

// endSpan sets the span's outcome and status.
func (c *callObserver) endSpan(end pgadvisory.CallEnd, errType string) {
	var kvs [3]attribute.KeyValue
	attrs := kvs[:0]
	if end.Outcome != pgadvisory.OutcomeNone {
		attrs = append(attrs, OutcomeKey.String(end.Outcome.String()))
	}
	if errType != "" {
		attrs = append(attrs, ErrorTypeKey.String(errType))
	}
	if end.AlreadyDone {
		attrs = append(attrs, AlreadyDoneKey.Bool(true))
	}
	c.span.SetAttributes(attrs...)
	// ErrLocked and a done window are answers the caller asked for, not
	// failures.
	if end.Err != nil && end.Outcome != pgadvisory.OutcomeLocked && !end.AlreadyDone {
		c.span.SetStatus(codes.Error, end.Err.Error())
	}
}

// measurement is the attribute set of the call's metrics with outcome and
// errType (see Observer.measurement).
func (c *callObserver) measurement(outcome pgadvisory.Outcome, errType string) metric.MeasurementOption {
	k := c.key
	k.outcome, k.errType = outcome, errType
	return c.o.measurement(k)
}

// rejectionSet is the attribute set of a fencing rejection: the lock's
// name and ID (as configured), the family and what was refused. Rejections
// are rare; their sets are not cached.
func (c *callObserver) rejectionSet(kind error) attribute.Set {
	var kvs [4]attribute.KeyValue
	attrs := kvs[:0]
	if c.key.name != "" {
		attrs = append(attrs, LockNameKey.String(c.key.name))
	}
	if c.key.hasID {
		attrs = append(attrs, LockIDKey.Int64(c.key.id))
	}
	attrs = append(attrs, CallKey.String(c.kind.String()), RejectionKey.String(rejectionName(kind)))
	return attribute.NewSet(attrs...)
}
