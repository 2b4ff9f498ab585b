package pgadvisory_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// PgBouncer (1.18) in each pool mode, for both front doors and every pgx
// query exec mode. PgBouncer announces a pid of its own in every mode, so
// the pid check finds a pooler in all three; what follows tells them apart:
//   - statement mode refuses a transaction (08P01): every call is refused
//     with ErrStatementPooler, never ErrConnLost ("retry");
//   - session mode is safe for session locks but cannot be told from
//     transaction mode by a client: refused with ErrTransactionPooler and a
//     hint, unless declared with WithSessionPooler, then the lock works;
//   - transaction mode: session locks are refused first, before any
//     prepared statement can clash (42P05), whatever the exec mode.
// Lock state is read from pg_locks on a direct connection to the server.

// allExecModes are pgx's query exec modes that matter behind a pooler:
// the default (named prepared statements, cached), and the two that send
// none.
var allExecModes = []string{"cache_statement", "exec", "simple_protocol"}

func TestPgBouncerStatementMode(t *testing.T) {
	url := pgcluster.StartPgBouncer(t, testdb.URL(t), "statement")
	w := witness.Of(testdb.DB(t))
	for _, mode := range allExecModes {
		for _, door := range frontdoor.OpenAll(t, frontdoor.URL(url+"&default_query_exec_mode="+mode), frontdoor.MaxConns(2)) {
			t.Run(mode+"/"+door.Label(), func(t *testing.T) {
				ctx := testdb.Context(t)
				key := testdb.Key(t)
				calls := map[string]func() error{
					"RunExclusive": func() error {
						return door.RunExclusive(ctx, key, func(frontdoor.Tx) error { t.Error("fn ran"); return nil })
					},
					"RunExclusive WithWait": func() error {
						return door.RunExclusive(ctx, key, func(frontdoor.Tx) error { t.Error("fn ran"); return nil }, pgadvisory.WithWait(0))
					},
					"RunSession": func() error { return door.RunSession(ctx, pgadvisory.ID(key), notCalled(t)) },
					"RunSession WithSessionPooler": func() error {
						return door.RunSession(ctx, pgadvisory.ID(key), notCalled(t), pgadvisory.WithSessionPooler())
					},
				}
				for name, call := range calls {
					for range 3 { // every call, not just the first
						err := call()
						require.ErrorIs(t, err, pgadvisory.ErrStatementPooler, name)
						require.NotErrorIs(t, err, pgadvisory.ErrConnLost, "%s: a refusal, not a lost connection to retry", name)
						sqlstate.Require(t, err, "08P01", name)
						require.ErrorContains(t, err, "statement pooling mode", name)
						// pgx pipelines BEGIN with the lock statement, so the
						// server may have granted the lock before PgBouncer
						// refused the open transaction; PgBouncer then closes
						// that server connection, which ends the transaction.
						require.Eventually(t, func() bool { return len(w.Holds(t, key)) == 0 }, 30*time.Second, 10*time.Millisecond, name)
					}
				}
			})
		}
	}
	// Control: what a hand-written transaction gets through the same
	// PgBouncer, the bare 08P01 that lockgen classified as ErrConnLost
	// before.
	conn, err := pgx.Connect(testdb.Context(t), url)
	require.NoError(t, err)
	_, err = conn.Exec(testdb.Context(t), "BEGIN")
	sqlstate.Require(t, err, "08P01", "PgBouncer refuses the transaction")
	require.True(t, conn.IsClosed(), "and closes the client connection")
}

func TestPgBouncerSessionMode(t *testing.T) {
	url := pgcluster.StartPgBouncer(t, testdb.URL(t), "session", pgcluster.WithSetting("default_pool_size", "8"))
	w := witness.Of(testdb.DB(t))
	declared := pgadvisory.WithSessionPooler()
	for _, mode := range allExecModes {
		doors := frontdoor.OpenAll(t, frontdoor.URL(url+"&default_query_exec_mode="+mode), frontdoor.MaxConns(3))
		for i, door := range doors {
			other := doors[1-i]
			t.Run(mode+"/"+door.Label(), func(t *testing.T) {
				ctx := testdb.Context(t)
				key := testdb.Key(t)

				// Not declared: session mode looks like transaction mode.
				err := door.RunSession(ctx, pgadvisory.ID(key), notCalled(t))
				pe := sqlstate.RequireTyped(t, err, pgadvisory.ErrTransactionPooler, "begin", "")
				require.ErrorContains(t, pe, "WithSessionPooler")
				require.Empty(t, w.Holds(t, key))

				// Declared: the lock is taken on the server and excludes
				// everyone, through the pooler or not, and is released.
				for _, wait := range []pgadvisory.Option{nil, pgadvisory.WithWait(0)} {
					called := false
					require.NoError(t, door.RunSession(ctx, pgadvisory.ID(key), func(ctx context.Context) error {
						called = true
						holder := w.Holder(t, key)
						require.ErrorIs(t, other.RunSession(ctx, pgadvisory.ID(key), notCalled(t), declared), pgadvisory.ErrLocked)
						require.ErrorIs(t, other.RunExclusive(ctx, key, func(frontdoor.Tx) error {
							t.Error("a transaction lock ran under the session lock")
							return nil
						}), pgadvisory.ErrLocked)
						require.Equal(t, holder.PID, w.Holder(t, key).PID)
						return nil
					}, declared, wait))
					require.True(t, called)
					require.Empty(t, w.Holds(t, key), "released before the call returned")
				}
			})
		}
	}
}

// TestPgBouncerTransactionModeRefusesFirst: 30 session-lock calls at once
// through a transaction-mode PgBouncer with a single server connection,
// from two pools of each front door, are all refused with
// ErrTransactionPooler by the first statement, in every exec mode: the pid
// check is sent over the simple protocol, so no prepared statement of one
// client can clash with another's on the shared server connection (it
// returned a raw 42P05 in 27 of 30 calls with pgx's default mode).
// Control: two pgx clients with the default mode clash on the first query.
func TestPgBouncerTransactionModeRefusesFirst(t *testing.T) {
	url := pgcluster.StartPgBouncer(t, testdb.URL(t), "transaction", pgcluster.WithSetting("default_pool_size", "1"))
	w := witness.Of(testdb.DB(t))
	for _, mode := range allExecModes {
		t.Run(mode, func(t *testing.T) {
			ctx := testdb.Context(t)
			var doors []frontdoor.Door
			for range 2 {
				doors = append(doors, frontdoor.OpenAll(t, frontdoor.URL(url+"&default_query_exec_mode="+mode), frontdoor.MaxConns(4))...)
			}
			key := testdb.Key(t)
			errs := make([]error, 30)
			var wg sync.WaitGroup
			for i := range errs {
				door := doors[i%len(doors)]
				opts := []pgadvisory.Option{}
				if i%3 == 0 {
					opts = append(opts, pgadvisory.WithWait(0))
				}
				wg.Go(func() { errs[i] = door.RunSession(ctx, pgadvisory.ID(key), notCalled(t), opts...) })
			}
			wg.Wait()
			for i, err := range errs {
				sqlstate.RequireTyped(t, err, pgadvisory.ErrTransactionPooler, "begin", "", "call %d via %s", i, doors[i%len(doors)])
			}
			require.Empty(t, w.Holds(t, key))
		})
	}

	// Control: pgx's default mode names a prepared statement after its text,
	// so two clients on the one server connection prepare the same name.
	var clash error
	for range 2 {
		conn, err := pgx.Connect(testdb.Context(t), url)
		require.NoError(t, err)
		defer conn.Close(context.Background())
		var n int
		clash = conn.QueryRow(testdb.Context(t), "SELECT $1::int", 1).Scan(&n)
	}
	sqlstate.Require(t, clash, "42P05", fmt.Sprintf("the second client's prepared statement clashes: %v", clash))
}
