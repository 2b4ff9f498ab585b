package pgadvisory

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// classify maps a driver error to one of the sentinel kinds, or nil. It is
// the one place where SQLSTATEs and connection failures get their meaning.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if isConnectFailure(err) {
		return ErrConnect
	}
	switch code := SQLState(err); {
	case code == "55P03":
		return ErrLockTimeout
	case code == "40P01":
		return ErrDeadlock
	case code == "53200":
		return ErrLockTableFull
	case code == "08P01" && isStatementPooler(err):
		return ErrStatementPooler
	case code == "57P01", code == "57P02", code == "57P03", code == "25P03", strings.HasPrefix(code, "08"):
		return ErrConnLost
	case code == "LF001", code == "LF004":
		return ErrStaleToken
	case code == "LF002":
		return ErrMissingToken
	case code == "LF003":
		return ErrTruncateRefused
	case code == "LF005":
		return ErrNullParameter
	case (code == "42P01" || code == "3F000" || code == "42883") && strings.Contains(err.Error(), "pgadvisory"):
		return ErrNotMigrated
	case code != "":
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	if isConnFailure(err) {
		return ErrConnLost
	}
	return nil
}

// isStatementPooler reports PgBouncer's refusal of a transaction in
// statement mode: "transaction blocks not allowed in statement pooling
// mode", SQLSTATE 08P01 (a protocol violation, which the server itself
// raises only for a broken client). PgBouncer's messages are not
// translated, so its wording is a reliable sign.
func isStatementPooler(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && strings.Contains(pgErr.Message, "statement pooling mode")
}

// isConnFailure reports errors that mean the connection is gone, as the
// drivers report them: pgx's closed connection, database/sql's bad
// connection, EOF and network errors.
func isConnFailure(err error) bool {
	if errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, sql.ErrConnDone) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var netErr net.Error
	return errors.As(err, &netErr)
}

// isConnectFailure reports a failure to open a connection: nothing was sent
// on a connection of the call and no lock was taken. pgx reports it as a
// *pgconn.ConnectError, through its pool and its database/sql driver alike.
func isConnectFailure(err error) bool {
	var connectErr *pgconn.ConnectError
	return errors.As(err, &connectErr)
}

// connectDetail is what a connect failure adds to its cause: the database
// missing (SQLSTATE 3D000) gets a sentence of its own.
func connectDetail(err error) error {
	if SQLState(err) == "3D000" {
		return fmt.Errorf("the database does not exist (SQLSTATE 3D000): %w", err)
	}
	return err
}

// txError is the error of a transaction-lock call that ended as o says
// (see txOutcome), nil when it committed. It is the one place where the
// protocol's outcome gets its meaning.
func (c *callState) txError(o txOutcome) error {
	switch o.end {
	case txCommitted:
		return nil
	case txFailed:
		return c.failed(o.ctxErr, o.op, o.err)
	case txRefused:
		return c.refused(o.ctxErr, o.op, o.kind, o.err)
	case txLocked:
		return c.locked()
	case txAlreadyDone:
		return &Error{Op: OpRunOnce, LockIDs: c.ids, Name: c.name, Kind: ErrAlreadyDone, Err: fmt.Errorf("window %q", c.window)}
	case txFnFailed:
		return c.fnFailed(o.ctxErr, o.err)
	case txFnEndedTx:
		return c.txEnded(o.ctxErr, o.err)
	}
	return c.commitFailure(o.ctxErr, o.err, o.sent)
}

// failure is the error of a step that failed on a driver error or a done
// ctx (not fn's own error). Its kind is what classify makes of err, and it
// wraps ctx.Err() when ctx is done.
func (c *callState) failure(ctx context.Context, op Op, err error) error {
	return c.failed(ctx.Err(), op, err)
}

// failed is failure with ctxErr, ctx.Err() when the step ended.
func (c *callState) failed(ctxErr error, op Op, err error) error {
	kind := classify(err)
	if kind == ErrConnect {
		return c.refused(ctxErr, OpConnect, kind, connectDetail(err))
	}
	return c.refused(ctxErr, op, kind, err)
}

// refusal is the error of a step that failed with a known kind (such as
// ErrStandby); detail, if not nil, says more.
func (c *callState) refusal(ctx context.Context, op Op, kind, detail error) error {
	return c.refused(ctx.Err(), op, kind, detail)
}

// refused is refusal with ctxErr, ctx.Err() when the step ended.
func (c *callState) refused(ctxErr error, op Op, kind, detail error) error {
	return &Error{Op: op, LockIDs: c.ids, Name: c.name, SQLState: SQLState(detail), Kind: kind, Err: wrapCtxErr(ctxErr, detail)}
}

// invalid is the error of a call refused for a bad argument or option
// before anything was sent: Kind ErrInvalidArgument.
func (c *callState) invalid(op Op, err error) error {
	return c.invalidAs(op, ErrInvalidArgument, err)
}

// invalidAs is invalid with another kind (ErrIsolationLevel).
func (c *callState) invalidAs(op Op, kind, err error) error {
	return &Error{Op: op, LockIDs: c.ids, Name: c.name, Kind: kind, Err: err}
}

// fnFailure is the error for fn's error (or a context canceled during fn):
// fn's error itself when it has no special meaning, else an *Error with Op
// "fn" whose kind says what happened (deadlock, connection lost, …) and
// which still unwraps to fn's error. An error matching ErrLocked or
// ErrAlreadyDone (a nested call's) is wrapped too, with no kind of its own:
// errors.Is still finds it, and Op "fn" says that fn ran, unlike the
// call's own ErrLocked (Op "lock") or ErrAlreadyDone (Op "run-once").
func (c *callState) fnFailure(ctx context.Context, fnErr error) error {
	return c.fnFailed(ctx.Err(), fnErr)
}

// fnFailed is fnFailure with ctxErr, ctx.Err() when fn returned.
func (c *callState) fnFailed(ctxErr, fnErr error) error {
	kind := classify(fnErr)
	if kind == nil && ctxErr == nil && !errors.Is(fnErr, ErrLocked) && !errors.Is(fnErr, ErrAlreadyDone) {
		return fnErr
	}
	if kind == ErrConnect {
		// A connection fn opened: the lock transaction's own is fine.
		kind = nil
	}
	if fnErr == nil {
		fnErr = errors.New("fn returned after its context was done; rolled back")
	}
	return &Error{Op: OpFn, LockIDs: c.ids, Name: c.name, SQLState: SQLState(fnErr), Kind: kind, Err: wrapCtxErr(ctxErr, fnErr)}
}

// txEnded is the error of a call whose fn ended the lock transaction
// itself; fnErr is what fn returned, if anything, and ctxErr ctx.Err()
// when the call found out.
func (c *callState) txEnded(ctxErr, fnErr error) error {
	return &Error{Op: OpFn, LockIDs: c.ids, Name: c.name, SQLState: SQLState(fnErr), Kind: ErrTxEnded, Err: wrapCtxErr(ctxErr, fnErr)}
}

// errCommitNotSent is the cause of a COMMIT that ctx stopped before it was
// sent.
var errCommitNotSent = errors.New("COMMIT was not sent; nothing was committed")

// commitFailure is the error for a failed COMMIT, with ctxErr ctx.Err()
// when COMMIT returned. What it says follows from whether COMMIT was sent
// (see commitSent) and what answered it.
func (c *callState) commitFailure(ctxErr, err error, sent bool) error {
	var kind error
	switch {
	case !sent && ctxErr != nil:
		// ctx ended before COMMIT left: the transaction was rolled back.
		// The driver's error only repeats that (a context error).
		err = errCommitNotSent
	case !sent:
		kind = ErrConnLost
	default:
		kind = commitAnswer(err)
	}
	return &Error{Op: OpCommit, LockIDs: c.ids, Name: c.name, SQLState: SQLState(err), Kind: kind, Err: wrapCtxErr(ctxErr, err)}
}

// commitAnswer is the kind of a COMMIT that was sent and failed with err.
//
// Only a definite answer says that nothing committed: an ERROR from the
// server (a deferred constraint, a serialization failure: the transaction
// was rolled back; its kind is classify's), or COMMIT answered by ROLLBACK
// (the transaction had failed earlier). Anything else leaves the outcome
// unknown: a broken connection, ctx ending while COMMIT was in flight, or
// a FATAL error such as 57P01, which the server sends when it ends the
// session whether or not it had begun to run COMMIT (a backend killed while
// idle and one killed while a deferred trigger runs inside COMMIT answer
// alike). The one exception is 25P03: the server raises it only while idle
// in the transaction, waiting for the next command, so it ended the
// session before it read COMMIT.
func commitAnswer(err error) error {
	code := SQLState(err)
	switch {
	case code == "25P03":
		return ErrConnLost
	case errors.Is(err, pgx.ErrTxCommitRollback):
		return nil
	case code != "" && !fatal(err):
		return classify(err)
	}
	return ErrCommitUnknown
}

// fatal reports a server error that ended the session (severity FATAL or
// PANIC), or, for drivers that give no severity, one of the codes that
// mean so (class 08, 57P01–57P03).
func fatal(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		severity := pgErr.SeverityUnlocalized // PostgreSQL 9.6+: never translated
		if severity == "" {
			severity = pgErr.Severity
		}
		return severity == "FATAL" || severity == "PANIC"
	}
	return classify(err) == ErrConnLost
}

// withContext makes err wrap ctx's error when ctx is done.
func withContext(ctx context.Context, err error) error {
	return wrapCtxErr(ctx.Err(), err)
}

// wrapCtxErr makes err wrap ctxErr, a done context's error, if not nil.
func wrapCtxErr(ctxErr, err error) error {
	switch {
	case ctxErr == nil:
		return err
	case err == nil:
		return ctxErr
	case errors.Is(err, ctxErr):
		return err
	default:
		return fmt.Errorf("%w: %w", ctxErr, err)
	}
}
