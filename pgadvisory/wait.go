package pgadvisory

import (
	"context"
	"fmt"
	"time"
)

// What a waiting call ([WithWait]) does about the server's own timeouts.
// lock_timeout is always set by the lock statement itself (statement.go).
// statement_timeout is lifted by a statement before the lock statement
// where that is free (statementTimeoutPrelude for pgx transaction locks,
// the probe of a session lock); where it is not, a wait that
// statement_timeout ends is reported here, by name and value.

// statementTimeoutSQL reads statement_timeout as shown (such as "200ms")
// and in milliseconds.
const statementTimeoutSQL = `SELECT current_setting('statement_timeout'), setting::bigint
FROM pg_catalog.pg_settings WHERE name = 'statement_timeout'`

// lockFailure is the error of a failed lock statement that started at
// start (see lockFailed).
func (c *callState) lockFailure(ctx context.Context, err error, start time.Time, readTimeout func(context.Context) (string, int64, error)) error {
	return c.txError(c.lockFailed(ctx, err, start, readTimeout))
}

// lockFailed is the outcome of a failed lock statement that started at
// start. A waiting call's statement canceled by the server (SQLSTATE
// 57014) while ctx is live was canceled by statement_timeout when that
// setting is on and the statement ran at least that long; readTimeout
// reads it (one more round trip, on this failure only), and the step is
// then refused with ErrLockTimeout, naming it. Any other failure is
// classified as usual.
func (c *callState) lockFailed(ctx context.Context, err error, start time.Time, readTimeout func(context.Context) (string, int64, error)) txOutcome {
	if !c.wait || SQLState(err) != "57014" || ctx.Err() != nil {
		return stepFailed(ctx, OpLock, err)
	}
	waited := time.Since(start)
	rctx, cancel := context.WithTimeout(ctx, c.checkTimeout)
	text, ms, rerr := readTimeout(rctx)
	cancel()
	if rerr != nil || ms <= 0 || waited < time.Duration(ms)*time.Millisecond {
		return stepFailed(ctx, OpLock, err) // canceled by someone else (pg_cancel_backend)
	}
	return txOutcome{end: txRefused, op: OpLock, kind: ErrLockTimeout, ctxErr: ctx.Err(), err: fmt.Errorf(
		"the server's statement_timeout (%s) ended the wait after %v, before %s; this call cannot lift it "+
			"for the lock statement without an extra round trip (see WithWait): wait less, raise statement_timeout "+
			"for this role or database, or use a pgx front door: %w",
		text, waited.Round(time.Millisecond), c.waitPhrase(), err)}
}

// waitPhrase says what wait the caller asked for.
func (c *callState) waitPhrase() string {
	if c.timeout == 0 {
		return "WithWait(0), which waits until ctx is done"
	}
	return fmt.Sprintf("WithWait(%v)", c.timeout)
}
