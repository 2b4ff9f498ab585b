package sqlstate_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/pgadvisory"
)

// recorder is a testing.TB that records a failure instead of failing.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Helper()                   {}
func (r *recorder) Errorf(string, ...any)     { r.failed = true }
func (r *recorder) FailNow()                  { r.failed = true; panic(r) }
func (r *recorder) Fatalf(f string, a ...any) { r.Errorf(f, a...); r.FailNow() }

// fails reports whether check fails on a recorder.
func fails(t *testing.T, check func(tb testing.TB)) bool {
	r := &recorder{TB: t}
	func() {
		defer func() {
			if v := recover(); v != nil && v != r {
				panic(v)
			}
		}()
		check(r)
	}()
	return r.failed
}

func TestRequire(t *testing.T) {
	stale := &pgconn.PgError{Code: "LF001", Message: "pgadvisory: stale fencing token 1 for lock 2"}
	typed := &pgadvisory.Error{Op: "fn", SQLState: "LF001", Kind: pgadvisory.ErrStaleToken, Err: stale}
	lost := &pgadvisory.Error{Op: "commit", Kind: pgadvisory.ErrConnLost, Err: errors.New("EOF")}

	require.Same(t, stale, sqlstate.Require(t, fmt.Errorf("write: %w", stale), "LF001"))
	sqlstate.RequireKind(t, typed, pgadvisory.ErrStaleToken, "LF001")
	require.Same(t, typed, sqlstate.RequireTyped(t, typed, pgadvisory.ErrStaleToken, "fn", "LF001"))
	sqlstate.RequireTyped(t, lost, pgadvisory.ErrConnLost, "commit", "")

	// Controls: each helper fails on the error it must refuse.
	for name, check := range map[string]func(testing.TB){
		"nil error":        func(tb testing.TB) { sqlstate.Require(tb, nil, "LF001") },
		"no server error":  func(tb testing.TB) { sqlstate.Require(tb, errors.New("LF001"), "LF001") },
		"other code":       func(tb testing.TB) { sqlstate.Require(tb, stale, "LF002") },
		"unprefixed LF001": func(tb testing.TB) { sqlstate.Require(tb, &pgconn.PgError{Code: "LF001", Message: "stale"}, "LF001") },
		"other kind":       func(tb testing.TB) { sqlstate.RequireKind(tb, typed, pgadvisory.ErrMissingToken, "LF001") },
		"other op":         func(tb testing.TB) { sqlstate.RequireTyped(tb, typed, pgadvisory.ErrStaleToken, "commit", "LF001") },
		"untyped":          func(tb testing.TB) { sqlstate.RequireTyped(tb, stale, pgadvisory.ErrStaleToken, "fn", "LF001") },
		"code expected":    func(tb testing.TB) { sqlstate.RequireTyped(tb, lost, pgadvisory.ErrConnLost, "commit", "57P01") },
	} {
		require.True(t, fails(t, check), name)
	}
}
