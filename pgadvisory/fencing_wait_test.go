package pgadvisory_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// A fenced WithWait against the server's own timeouts, as an unfenced one
// gets it (wait_server_settings_test.go, whose helpers this uses): on a
// database with lock_timeout = 100ms and statement_timeout = 400ms whose
// lockgen schema predates migration 00011 (no queue: a waiting call waits
// in the server's queue, inside fence_acquire), a fenced caller
// waits the 1.5s a holder keeps the lock (pgx lifts statement_timeout in
// the same round trip), publishes, and fn runs under the database's
// settings again (what the acquisition set for its own transaction ends
// with COMMIT AND CHAIN); database/sql's RunExclusive cannot lift
// statement_timeout without a round trip and names it in ErrLockTimeout,
// and leaves no lock behind. With the queue, a fenced caller waits in
// lockgen's queue, where each try is a short statement: it gets its wait
// on both front doors (TestFencingWaitQueueOutlastsServerTimeouts).

func TestFencingWaitOutlastsServerTimeouts(t *testing.T) {
	url := timeoutDatabase(t)
	db := openOn(t, url)
	m, err := pgadvisory.NewMigrator(db)
	require.NoError(t, err)
	_, err = m.UpTo(testdb.Context(t), 10)
	require.NoError(t, err)
	w := witness.Of(db)
	for _, wait := range []time.Duration{0, 5 * time.Second} {
		for _, mode := range []string{"cache_statement", "exec", "simple_protocol"} {
			doors := frontdoor.OpenAll(t, frontdoor.URL(url+"?default_query_exec_mode="+mode), frontdoor.MaxConns(2))
			for _, door := range doors {
				if door.Driver == frontdoor.SQL && mode != "cache_statement" {
					continue
				}
				t.Run(fmt.Sprintf("WithWait(%v)/%s/%s", wait, door, mode), func(t *testing.T) {
					key, other := testdb.Key(t), testdb.Key(t)
					ctx := testdb.Context(t)
					done := holdUntilWaited(t, w, url, key, "%fence_acquire%")
					var lockTimeout, statementTimeout string
					var tok int64
					err := door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
						tok, _ = tx.FencingToken()
						if err := tx.QueryRow(ctx, "SHOW lock_timeout").Scan(&lockTimeout); err != nil {
							return err
						}
						return tx.QueryRow(ctx, "SHOW statement_timeout").Scan(&statementTimeout)
					}, pgadvisory.WithWait(wait), pgadvisory.WithFencing(), pgadvisory.WithLocks(other))
					require.NoError(t, frontdoor.Await(t, done, "the holder's return"))
					if door.Driver == frontdoor.Pgx {
						require.NoError(t, err, "the wait outlasted lock_timeout and statement_timeout")
						require.Equal(t, tok, fencing.Published(t, db, key))
						require.Equal(t, "100ms", lockTimeout, "fn runs under the database's lock_timeout")
						require.Equal(t, "400ms", statementTimeout, "fn runs under the database's statement_timeout")
						return
					}
					sqlstate.RequireTyped(t, err, pgadvisory.ErrLockTimeout, "lock", "57014")
					require.ErrorContains(t, err, "statement_timeout (400ms) ended the wait")
					require.Eventually(t, func() bool { return len(w.Holds(t, key)) == 0 }, 30*time.Second, 10*time.Millisecond,
						"no session lock left behind")
					require.Zero(t, fencing.Published(t, db, key))
				})
			}
		}
	}
}

// TestFencingWaitQueueOutlastsServerTimeouts: on the same database, a
// fenced WithWait on one lock (both front doors, every pgx exec mode)
// waits in lockgen's queue for a holder that keeps the lock 1.5s and is
// granted: no server timeout ends a queued wait. It publishes its token,
// fn runs under the database's settings, and the queue is empty after.
func TestFencingWaitQueueOutlastsServerTimeouts(t *testing.T) {
	url := timeoutDatabase(t)
	db := openOn(t, url)
	require.NoError(t, pgadvisory.Migrate(testdb.Context(t), db))
	for _, mode := range []string{"cache_statement", "exec", "simple_protocol"} {
		for _, door := range frontdoor.OpenAll(t, frontdoor.URL(url+"?default_query_exec_mode="+mode), frontdoor.MaxConns(2)) {
			if door.Driver == frontdoor.SQL && mode != "cache_statement" {
				continue
			}
			t.Run(fmt.Sprintf("%s/%s", door, mode), func(t *testing.T) {
				key := testdb.Key(t)
				ctx := testdb.Context(t)
				release := holdSession(t, db, key)
				go func() { time.Sleep(1500 * time.Millisecond); release() }()
				start := time.Now()
				var lockTimeout, statementTimeout string
				var tok int64
				require.NoError(t, door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
					tok, _ = tx.FencingToken()
					if err := tx.QueryRow(ctx, "SHOW lock_timeout").Scan(&lockTimeout); err != nil {
						return err
					}
					return tx.QueryRow(ctx, "SHOW statement_timeout").Scan(&statementTimeout)
				}, pgadvisory.WithWait(0), pgadvisory.WithFencing()))
				require.GreaterOrEqual(t, time.Since(start), 1400*time.Millisecond, "the call waited for the holder")
				require.Equal(t, tok, fencing.Published(t, db, key))
				require.Equal(t, "100ms", lockTimeout, "fn runs under the database's lock_timeout")
				require.Equal(t, "400ms", statementTimeout, "fn runs under the database's statement_timeout")
				require.Zero(t, queueRows(t, db, key), "the queue is empty")
			})
		}
	}
}
