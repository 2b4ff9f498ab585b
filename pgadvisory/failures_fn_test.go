package pgadvisory_test

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Failure-mode tests of what fn does: it deadlocks with another call, fails,
// panics, or swallows a failed statement and returns nil. Each call rolls
// back, returns what fn returned (or the typed error), releases the lock and
// gives its connection back; a witness checks (failures_connection_test.go
// holds the family's notes and failurePoolSize).

// TestFailDeadlockInFn: two calls hold k1 and k2 and then each asks, inside
// fn, for the other's key. The server breaks the cycle: exactly one call
// reports ErrDeadlock (40P01) and commits nothing; the other then gets its
// second lock and commits.
func TestFailDeadlockInFn(t *testing.T) {
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		w := witness.New(t)
		door := frontdoor.Open(t, drv, frontdoor.MaxConns(failurePoolSize))
		keys := [2]int64{testdb.Key(t), testdb.Key(t)}
		holding := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
		var errs [2]error
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Go(func() {
				errs[i] = door.RunExclusive(ctx, keys[i], func(tx frontdoor.Tx) error {
					if err := w.Mark(ctx, tx, "call"+strconv.Itoa(i)); err != nil {
						return err
					}
					close(holding[i])
					select { // both hold their first lock before either asks for the second
					case <-holding[1-i]:
					case <-ctx.Done():
						return ctx.Err()
					}
					return tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", keys[1-i])
				})
			})
		}
		wg.Wait()
		loser := 0
		if errs[0] == nil {
			loser = 1
		}
		require.NoError(t, errs[1-loser], "the survivor commits")
		sqlstate.RequireTyped(t, errs[loser], pgadvisory.ErrDeadlock, "fn", "40P01")
		require.True(t, w.Committed(t, "call"+strconv.Itoa(1-loser)))
		w.RequireClosing(t, door, witness.Closing{Mark: "call" + strconv.Itoa(loser), Next: "next-call"}, keys[0], keys[1])
	})
}

// TestFailFnError: fn's error rolls back, is returned so that errors.Is and
// errors.As find it (plain and wrapped), and the lock is released.
func TestFailFnError(t *testing.T) {
	boom := errors.New("boom")
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		for _, tc := range []struct {
			name string
			err  error
		}{
			{"plain", boom},
			{"wrapped", fmt.Errorf("sending the report: %w", boom)},
			{"typed", fmt.Errorf("report: %w", &stepError{step: 3})},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ctx := testdb.Context(t)
				w := witness.New(t)
				door := frontdoor.Open(t, drv, frontdoor.MaxConns(failurePoolSize))
				key := testdb.Key(t)
				err := door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
					require.NoError(t, w.Mark(ctx, tx, "failed"))
					return tc.err
				})
				require.Error(t, err)
				if tc.name == "typed" {
					var fe *stepError
					require.ErrorAs(t, err, &fe)
					require.Equal(t, 3, fe.step)
				} else {
					require.ErrorIs(t, err, boom)
				}
				require.Equal(t, tc.err, err, "an error without a special meaning comes back as fn returned it")
				// released with the rollback, before the call returned
				w.RequireClosing(t, door, witness.Closing{Mark: "failed", Next: "next-call"}, key)
			})
		}
	})
}

// TestFailFnPanics: a panic in fn propagates to the caller after the
// transaction was rolled back and its connection returned.
func TestFailFnPanics(t *testing.T) {
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		w := witness.New(t)
		door := frontdoor.Open(t, drv, frontdoor.MaxConns(failurePoolSize))
		key := testdb.Key(t)
		type panicValue struct{ n int }
		var ret error
		v := recovered(func() {
			ret = door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
				require.NoError(t, w.Mark(ctx, tx, "panicked"))
				require.Equal(t, 1, door.InUse(), "control: the leak check sees a checked-out connection")
				panic(panicValue{n: 7})
			})
		})
		require.Equal(t, panicValue{n: 7}, v, "the panic reaches the caller unchanged")
		require.NoError(t, ret, "the call did not return normally")
		w.RequireClosing(t, door, witness.Closing{Mark: "panicked", Next: "next-call"}, key)
	})
}

// TestFailSwallowedSQLError: fn ignores a failed statement (the transaction
// is now aborted) and returns nil. COMMIT then rolls back: the call fails,
// knowing that nothing was committed.
func TestFailSwallowedSQLError(t *testing.T) {
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		w := witness.New(t)
		door := frontdoor.Open(t, drv, frontdoor.MaxConns(failurePoolSize))
		key := testdb.Key(t)
		err := door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
			require.NoError(t, w.Mark(ctx, tx, "swallowed"))
			require.Error(t, tx.Exec(ctx, "SELECT 1/0"), "control: the statement fails")
			return nil
		})
		require.Error(t, err)
		var pe *pgadvisory.Error
		require.ErrorAs(t, err, &pe)
		require.Equal(t, pgadvisory.OpCommit, pe.Op)
		require.ErrorIs(t, err, pgx.ErrTxCommitRollback)
		require.NotErrorIs(t, err, pgadvisory.ErrCommitUnknown, "the outcome is known: rolled back")
		require.NotErrorIs(t, err, pgadvisory.ErrConnLost)
		w.RequireClosing(t, door, witness.Closing{Mark: "swallowed", Next: "next-call"}, key)
	})
}

// stepError is a typed error fn returns, to show errors.As through the result.
type stepError struct{ step int }

func (e *stepError) Error() string { return "step " + strconv.Itoa(e.step) + " failed" }

// recovered runs f and returns what it panicked with, or nil.
func recovered(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}
