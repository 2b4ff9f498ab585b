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

	"github.com/jackc/pgx/v5/pgconn"
)

// classify maps a driver error to one of the sentinel kinds, or nil. It is
// the one place where SQLSTATEs and connection failures get their meaning.
func classify(err error) error {
	if err == nil {
		return nil
	}
	switch code := SQLState(err); {
	case code == "55P03":
		return ErrLockTimeout
	case code == "40P01":
		return ErrDeadlock
	case code == "53200":
		return ErrLockTableFull
	case code == "57P01", code == "57P02", code == "57P03", code == "25P03", strings.HasPrefix(code, "08"):
		return ErrConnLost
	case code == "LF001":
		return ErrStaleToken
	case code == "LF002":
		return ErrMissingToken
	case code == "LF003":
		return ErrTruncateRefused
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
	if errors.As(err, &netErr) {
		return true
	}
	var connectErr *pgconn.ConnectError
	return errors.As(err, &connectErr)
}

// failure is the error of a step that failed on a driver error or a done
// ctx (not fn's own error), reported to the observer. Its kind is what
// classify makes of err, and it wraps ctx.Err() when ctx is done.
func (c *config) failure(ctx context.Context, op string, err error) error {
	return c.refusal(ctx, op, classify(err), err)
}

// refusal is the error of a step that failed with a known kind (such as
// ErrStandby), reported to the observer; detail, if not nil, says more.
func (c *config) refusal(ctx context.Context, op string, kind, detail error) error {
	e := &Error{Op: op, LockIDs: c.ids, Name: c.name, SQLState: SQLState(detail), Kind: kind, Err: withContext(ctx, detail)}
	c.emitError(e)
	return e
}

// invalid is the error of a call refused for a bad argument or option
// before anything was sent: Kind ErrInvalidArgument.
func (c *config) invalid(op string, err error) error {
	return c.invalidAs(op, ErrInvalidArgument, err)
}

// invalidAs is invalid with another kind (ErrIsolationLevel).
func (c *config) invalidAs(op string, kind, err error) error {
	return &Error{Op: op, LockIDs: c.ids, Name: c.name, Kind: kind, Err: err}
}

// fnFailure is the error for fn's error (or a context canceled during fn):
// fn's error itself when it has no special meaning, else an *Error whose
// kind says what happened (deadlock, connection lost, …) and which still
// unwraps to fn's error.
func (c *config) fnFailure(ctx context.Context, fnErr error) error {
	kind := classify(fnErr)
	if kind == nil && ctx.Err() == nil {
		return fnErr
	}
	if fnErr == nil {
		fnErr = errors.New("fn returned after its context was done; rolled back")
	}
	return &Error{Op: "fn", LockIDs: c.ids, Name: c.name, SQLState: SQLState(fnErr), Kind: kind, Err: withContext(ctx, fnErr)}
}

// commitFailure is the error for a failed COMMIT. A connection lost during
// COMMIT leaves the outcome unknown; a server error means it did not commit.
// So does 25P03: the server raises it only while idle in the transaction,
// waiting for the next command, so it ended the session before reading
// COMMIT (the answer was queued before COMMIT was sent).
func (c *config) commitFailure(ctx context.Context, err error) error {
	kind := classify(err)
	if kind == ErrConnLost && SQLState(err) != "25P03" {
		kind = ErrCommitUnknown
	}
	return &Error{Op: "commit", LockIDs: c.ids, Name: c.name, SQLState: SQLState(err), Kind: kind, Err: withContext(ctx, err)}
}

// withContext makes err wrap ctx's error when ctx is done.
func withContext(ctx context.Context, err error) error {
	ctxErr := ctx.Err()
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
