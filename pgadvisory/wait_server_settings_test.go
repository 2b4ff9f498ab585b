package pgadvisory_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// WithWait against the server's own timeouts, set for the database (ALTER
// DATABASE … SET) as an operator would: lock_timeout = 100ms and
// statement_timeout = 400ms. A holder keeps the lock until the caller has
// waited 1.5s, far longer than either. The caller gets the wait it asked
// for (WithWait(0): until ctx is done; WithWait(5s)), except where lifting
// statement_timeout would cost a round trip (RunExclusive on database/sql):
// there the error is ErrLockTimeout and names the setting and its value,
// never a bare 57014. fn's statements run under the database's settings
// again. The controls show what a hand-written wait gets on the same
// database: 55P03 at lock_timeout, and a bare 57014 at statement_timeout.

// TestWaitOutlastsServerTimeouts covers every front door and pgx exec mode.
func TestWaitOutlastsServerTimeouts(t *testing.T) {
	url := timeoutDatabase(t)
	w := witness.Of(openOn(t, url))
	for _, wait := range []time.Duration{0, 5 * time.Second} {
		for _, mode := range []string{"cache_statement", "exec", "simple_protocol"} {
			doors := frontdoor.OpenAll(t, frontdoor.URL(url+"?default_query_exec_mode="+mode), frontdoor.MaxConns(2))
			for _, door := range doors {
				if door.Driver == frontdoor.SQL && mode != "cache_statement" {
					continue // database/sql's behaviour does not depend on pgx's mode
				}
				name := fmt.Sprintf("WithWait(%v)/%s/%s", wait, door, mode)
				t.Run(name+"/session", func(t *testing.T) {
					key := testdb.Key(t)
					ctx := testdb.Context(t)
					done := holdUntilWaited(t, w, url, key, "%pg_advisory_lock%")
					err := door.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error {
						require.Equal(t, 1, len(w.Holds(t, key)))
						return nil
					}, pgadvisory.WithWait(wait))
					require.NoError(t, err, "the wait outlasted lock_timeout and statement_timeout")
					require.NoError(t, frontdoor.Await(t, done, "the holder's return"))
					requireServerTimeouts(t, door, "the session lock's connection, back in the pool")
				})
				t.Run(name+"/transaction", func(t *testing.T) {
					key := testdb.Key(t)
					ctx := testdb.Context(t)
					done := holdUntilWaited(t, w, url, key, "%pg_advisory_xact_lock%")
					var lockTimeout, statementTimeout string
					err := door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
						if err := tx.QueryRow(ctx, "SHOW lock_timeout").Scan(&lockTimeout); err != nil {
							return err
						}
						return tx.QueryRow(ctx, "SHOW statement_timeout").Scan(&statementTimeout)
					}, pgadvisory.WithWait(wait))
					require.NoError(t, frontdoor.Await(t, done, "the holder's return"))
					if door.Driver == frontdoor.Pgx {
						require.NoError(t, err, "the wait outlasted lock_timeout and statement_timeout")
						require.Equal(t, "100ms", lockTimeout, "fn runs under the database's lock_timeout")
						require.Equal(t, "400ms", statementTimeout, "fn runs under the database's statement_timeout")
						return
					}
					// database/sql: lock_timeout is lifted, statement_timeout
					// ends the wait and is named.
					pe := sqlstate.RequireTyped(t, err, pgadvisory.ErrLockTimeout, "lock", "57014")
					require.Equal(t, []int64{key}, pe.LockIDs)
					require.ErrorContains(t, err, "statement_timeout (400ms) ended the wait")
					if wait == 0 {
						require.ErrorContains(t, err, "before WithWait(0), which waits until ctx is done")
					} else {
						require.ErrorContains(t, err, "before WithWait(5s)")
					}
				})
			}
		}
	}
}

// TestWaitServerTimeoutsControl: a hand-written waiting lock on the same
// database ends at lock_timeout (55P03), and with lock_timeout lifted by
// hand inside the statement, at statement_timeout with a bare 57014.
func TestWaitServerTimeoutsControl(t *testing.T) {
	url := timeoutDatabase(t)
	db := openOn(t, url)
	w := witness.Of(db)
	ctx := testdb.Context(t)
	key := testdb.Key(t)
	release := frontdoor.OnDB(db).Hold(t, key, nil)
	defer func() { require.NoError(t, release()) }()
	require.Equal(t, 1, len(w.Holds(t, key)))

	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", key)
	sqlstate.Require(t, err, "55P03", "the database's lock_timeout ends a wait meant to last")
	require.NoError(t, tx.Rollback())

	tx, err = db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)
FROM (SELECT set_config('lock_timeout', '0', true)) AS lifted`, key)
	sqlstate.Require(t, err, "57014", "statement_timeout, armed when the statement started, ends it")
	var pe *pgadvisory.Error
	require.NotErrorAs(t, err, &pe, "hand-written code gets the bare server error")
	require.NoError(t, tx.Rollback())
}

// timeoutDatabase creates a database of the test's own whose
// lock_timeout is 100ms and statement_timeout 400ms for every session, and
// returns its URL.
func timeoutDatabase(t *testing.T) string {
	t.Helper()
	name, url := testdb.EmptyDatabase(t)
	admin := testdb.DB(t)
	for _, set := range []string{"lock_timeout = '100ms'", "statement_timeout = '400ms'"} {
		_, err := admin.Exec("ALTER DATABASE " + pgx.Identifier{name}.Sanitize() + " SET " + set)
		require.NoError(t, err)
	}
	return url
}

// openOn opens a database/sql pool on url, closed when t ends.
func openOn(t *testing.T, url string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// holdUntilWaited takes key on a connection of its own to url and keeps it
// until a backend running a statement like pattern has waited for it for
// 1.5s, longer than the database's lock_timeout and statement_timeout,
// then releases it. The returned channel gets the holder's error.
func holdUntilWaited(t *testing.T, w *witness.Witness, url string, key int64, pattern string) <-chan error {
	t.Helper()
	ctx := testdb.Context(t)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	var pid int64
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	_, err = conn.Exec(ctx, "SELECT pg_advisory_lock($1)", key)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		for w.BlockedBy(t, pid, pattern) < 1 {
			if ctx.Err() != nil {
				done <- ctx.Err()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(1500 * time.Millisecond)
		_, err := conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", key)
		done <- err
	}()
	return done
}

// requireServerTimeouts checks that a connection of door's pool (of size
// 2, and idle) runs under the database's timeouts: a session lock put back
// the statement_timeout it lifted.
func requireServerTimeouts(t *testing.T, door frontdoor.Door, what string) {
	t.Helper()
	ctx := testdb.Context(t)
	for range 2 { // both connections of the pool, one after the other
		err := door.RunExclusive(ctx, testdb.Key(t), func(tx frontdoor.Tx) error {
			var st, lt string
			require.NoError(t, tx.QueryRow(ctx, "SHOW statement_timeout").Scan(&st))
			require.Equal(t, "400ms", st, what)
			require.NoError(t, tx.QueryRow(ctx, "SHOW lock_timeout").Scan(&lt))
			require.Equal(t, "100ms", lt, what)
			return nil
		})
		require.NoError(t, err)
	}
}
