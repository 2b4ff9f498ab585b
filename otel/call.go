package lockgenotel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockgen/lockgen/pgadvisory"
)

// callObserver follows one call: its span, and what was recorded already.
type callObserver struct {
	o            *Observer
	ctx          context.Context // the caller's context with the call's span
	call         pgadvisory.Call
	lock         *lockEntry
	token        int64 // a fenced call's token, from the grant
	span         trace.Span
	waitRecorded bool
}

// Event records the grant's wait at once, so that a session lock held for
// hours shows its wait when it is granted, and adds the moments that the
// span's own start and end do not mark to the span: the grant ("acquired")
// and a failed step or a lost session lock ("error"). The contention and
// the release end the call: the span's end and attributes say them.
func (c *callObserver) Event(e pgadvisory.Event) {
	switch e.Kind {
	case pgadvisory.EventAcquired:
		if !c.waitRecorded {
			c.waitRecorded = true
			c.o.wait.Record(c.ctx, e.Wait.Seconds(), c.lock.measurement(pgadvisory.OutcomeAcquired, ""))
		}
		c.token = e.Token
		if c.span.IsRecording() {
			c.span.AddEvent("acquired")
		}
	case pgadvisory.EventError:
		if c.span.IsRecording() {
			c.span.AddEvent("error", trace.WithAttributes(ErrorTypeKey.String(ErrorType(e.Err))))
		}
	}
}

// EndCall records the call's metrics and ends its span.
func (c *callObserver) EndCall(end pgadvisory.CallEnd) {
	errType := ErrorType(end.Err)
	if c.call.Kind != pgadvisory.CallFenced {
		m := c.lock.measurement(end.Outcome, "")
		if !c.waitRecorded && end.Wait > 0 {
			c.o.wait.Record(c.ctx, end.Wait.Seconds(), m)
		}
		if end.Held > 0 {
			c.o.hold.Record(c.ctx, end.Held.Seconds(), m)
		}
		if errType != "" {
			m = c.lock.measurement(end.Outcome, errType)
		}
		c.o.attempts.Add(c.ctx, 1, m)
	}
	if end.Rejection != nil {
		c.o.rejections.Add(c.ctx, 1, c.lock.rejection(end.Rejection))
	}
	if c.span.IsRecording() {
		c.endSpan(end, errType)
	}
	c.span.End()
}

// endSpan sets the span's attributes, outcome and status.
func (c *callObserver) endSpan(end pgadvisory.CallEnd, errType string) {
	var kvs [12]attribute.KeyValue
	attrs := spanAttributes(c.call, kvs[:0])
	if c.token != 0 && c.call.Token == 0 {
		attrs = append(attrs, FencingTokenKey.Int64(c.token))
	}
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
