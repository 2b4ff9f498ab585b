package pgadvisory

import (
	"context"
	"errors"
)

// errInterrupted is a txContext's Err once the caller's context ended while
// they were linked.
var errInterrupted = errors.New("interrupted: the call's context is done")

// txContext is the context the driver's BEGIN and COMMIT of a lock
// transaction run under. The protocol owns it so that it knows whether
// COMMIT was sent:
//
//   - It follows the caller's context only while linked (during COMMIT,
//     and during BEGIN for database/sql, whose transaction keeps the context
//     it began with), so database/sql does not roll the transaction back on
//     its own while fn runs; run does that, once fn has returned.
//   - Its Err is errInterrupted, never context.Canceled. database/sql's
//     Tx.Commit refuses to send COMMIT once the transaction's context is
//     done and returns a bare context.Canceled then (the context it derives
//     from this one). A driver interrupted while COMMIT is in flight reports
//     this context's Err or a timeout instead (pgx: a net timeout, since
//     errInterrupted is neither Canceled nor DeadlineExceeded), and pgx
//     marks what it never sent (pgconn.SafeToRetry). See commitSent.
//
// A caller's context that can never end needs none of this: newTxContext
// returns nil, whose context is the caller's own.
type txContext struct {
	context.Context // context.WithCancel of the caller's context without its cancelation
	cancel          context.CancelFunc
}

// newTxContext is the transaction context of a call under ctx, or nil when
// ctx can never be done.
func newTxContext(ctx context.Context) *txContext {
	if ctx.Done() == nil {
		return nil
	}
	inner, cancel := context.WithCancel(context.WithoutCancel(ctx))
	return &txContext{Context: inner, cancel: cancel}
}

// Err is errInterrupted once t is done.
func (t *txContext) Err() error {
	if t.Context.Err() != nil {
		return errInterrupted
	}
	return nil
}

// or is what the driver runs under: t, or ctx (the caller's) for a nil t.
func (t *txContext) or(ctx context.Context) context.Context {
	if t == nil {
		return ctx
	}
	return t
}

// link makes t done when ctx is, until stop is called; stop reports whether
// ctx ended meanwhile (t is then done, or about to be).
func (t *txContext) link(ctx context.Context) (stop func() (interrupted bool)) {
	if t == nil {
		return func() bool { return false }
	}
	unlink := context.AfterFunc(ctx, t.cancel)
	return func() bool { return !unlink() }
}

// release frees t's resources once the call is over.
func (t *txContext) release() {
	if t != nil {
		t.cancel()
	}
}
