// Package sqlstate asserts the SQLSTATE an error carries, and the typed
// error pgadvisory wraps it in.
//
//	sqlstate.Require(t, err, "LF001")                                   // any error from the server
//	sqlstate.RequireKind(t, err, pgadvisory.ErrStaleToken, "LF001")     // and its kind
//	sqlstate.RequireTyped(t, err, pgadvisory.ErrConnLost, "fn", "57P01") // pgadvisory's *Error, step included
package sqlstate

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/pgadvisory"
)

// Require checks that err carries SQLSTATE code: the driver's
// *pgconn.PgError with that code is in err's chain, and pgadvisory.SQLState
// reports it. The messages of lockgen's own codes (LF…) start with
// "pgadvisory: ". It returns the PgError.
func Require(t testing.TB, err error, code string, msgAndArgs ...any) *pgconn.PgError {
	t.Helper()
	require.Error(t, err, msgAndArgs...)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "want a PostgreSQL error with SQLSTATE %s, got %v %s", code, err, describe(msgAndArgs))
	require.Equal(t, code, pgErr.Code, "%s %s", pgErr.Message, describe(msgAndArgs))
	require.Equal(t, code, pgadvisory.SQLState(err), "%v %s", err, describe(msgAndArgs))
	if strings.HasPrefix(code, "LF") {
		require.True(t, strings.HasPrefix(pgErr.Message, "pgadvisory: "), pgErr.Message)
	}
	return pgErr
}

// RequireKind checks that err is of kind (errors.Is) and carries SQLSTATE
// code (see [Require]).
func RequireKind(t testing.TB, err, kind error, code string, msgAndArgs ...any) *pgconn.PgError {
	t.Helper()
	require.ErrorIs(t, err, kind, msgAndArgs...)
	return Require(t, err, code, msgAndArgs...)
}

// RequireTyped checks pgadvisory's typed error of a failed call: err is of
// kind (errors.Is) and an *pgadvisory.Error whose Op is op and whose
// SQLState is code. code "" means the server raised nothing (a broken
// connection, a context); otherwise the driver's error stays reachable
// ([Require]). It returns the *pgadvisory.Error.
func RequireTyped(t testing.TB, err, kind error, op pgadvisory.Op, code string, msgAndArgs ...any) *pgadvisory.Error {
	t.Helper()
	require.ErrorIs(t, err, kind, msgAndArgs...)
	var pe *pgadvisory.Error
	require.ErrorAs(t, err, &pe, msgAndArgs...)
	require.Equal(t, op, pe.Op, "%v %s", err, describe(msgAndArgs))
	require.Equal(t, code, pe.SQLState, "%v %s", err, describe(msgAndArgs))
	require.Equal(t, code, pgadvisory.SQLState(err), msgAndArgs...)
	if code != "" {
		Require(t, err, code, msgAndArgs...)
	}
	return pe
}

// describe formats msgAndArgs as testify does: a format and its arguments,
// or one value.
func describe(msgAndArgs []any) string {
	if len(msgAndArgs) == 0 {
		return ""
	}
	if format, ok := msgAndArgs[0].(string); ok && len(msgAndArgs) > 1 {
		return fmt.Sprintf(format, msgAndArgs[1:]...)
	}
	return fmt.Sprint(msgAndArgs[0])
}
