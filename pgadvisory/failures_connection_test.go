package pgadvisory_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/faultproxy"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Failure-mode tests: what RunExclusive and RunExclusivePgx report, commit
// and leave locked when something fails. Every test runs over both front
// doors, each on a pool of its own (failurePoolSize), and checks the outcome
// from a witness (internal/testkit/witness): rows committed, the lock free,
// no connection left checked out. The family: failures_connection_test.go
// (this file: the backend dies or the connection breaks, before or during
// COMMIT), failures_fn_test.go (fn deadlocks, fails, panics or swallows an
// error), cancel_test.go (contexts), faults_*_test.go (fault injection).

// TestFailBackendTerminated: the holder's backend is killed
// (pg_terminate_backend) in the middle of fn. The call reports ErrConnLost
// with SQLSTATE 57P01, nothing fn wrote is committed, the lock is free at once
// and the pool goes on working.
func TestFailBackendTerminated(t *testing.T) {
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		w := witness.New(t)
		door := frontdoor.Open(t, drv, frontdoor.MaxConns(failurePoolSize))
		key := testdb.Key(t)
		err := door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
			require.NoError(t, w.Mark(ctx, tx, "before-kill"))
			pid, err := tx.QueryInt(ctx, "SELECT pg_backend_pid()")
			require.NoError(t, err)
			require.False(t, w.LockFree(t, key), "control: the probe sees the lock held")
			var killed bool
			// With a timeout, pg_terminate_backend waits until the backend is gone.
			require.NoError(t, w.DB.QueryRowContext(ctx, "SELECT pg_terminate_backend($1, 30000)", pid).Scan(&killed))
			require.True(t, killed)
			require.False(t, w.BackendAlive(t, pid))
			require.True(t, w.LockFree(t, key), "the server released the lock with the backend")
			return tx.Exec(ctx, "SELECT 1")
		})
		sqlstate.RequireTyped(t, err, pgadvisory.ErrConnLost, "fn", "57P01")
		w.RequireClosing(t, door, witness.Closing{Mark: "before-kill", Next: "next-call"}, key)
	})
}

// TestFailBackendTerminatedWhileIdle: the holder's backend is killed while
// fn is idle (between statements), and fn's next step is COMMIT. The server
// sent its FATAL 57P01 before it could read COMMIT, so nothing committed;
// but the client reads that FATAL as COMMIT's answer, exactly as it reads
// the FATAL of a backend killed while COMMIT runs a deferred trigger
// (TestFaultKillDuringCommitBeforeRecord), so it cannot tell which: the
// call reports ErrCommitUnknown. The operator who killed an idle holder
// knows that nothing committed (docs/operations.md, "In an incident").
func TestFailBackendTerminatedWhileIdle(t *testing.T) {
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		w := witness.New(t)
		door := frontdoor.Open(t, drv, frontdoor.MaxConns(failurePoolSize))
		key := testdb.Key(t)
		err := door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
			require.NoError(t, w.Mark(ctx, tx, "idle-kill"))
			pid, err := tx.QueryInt(ctx, "SELECT pg_backend_pid()")
			require.NoError(t, err)
			var killed bool
			require.NoError(t, w.DB.QueryRowContext(ctx, "SELECT pg_terminate_backend($1, 30000)", pid).Scan(&killed))
			require.True(t, killed)
			require.True(t, w.LockFree(t, key), "the server released the lock with the backend")
			return nil // the next step is COMMIT
		})
		sqlstate.RequireTyped(t, err, pgadvisory.ErrCommitUnknown, "commit", "57P01")
		require.NotErrorIs(t, err, pgadvisory.ErrConnLost)
		w.RequireClosing(t, door, witness.Closing{Mark: "idle-kill", Next: "next-call"}, key) // killed while idle: nothing committed
	})
}

// TestFailIdleInTransactionTimeout: the server ends a session that stays idle
// in the lock transaction longer than idle_in_transaction_session_timeout.
// The next statement, or COMMIT, reports ErrConnLost with SQLSTATE 25P03:
// the server can only raise 25P03 before it read COMMIT, so nothing was
// committed and the outcome is known, not ErrCommitUnknown.
func TestFailIdleInTransactionTimeout(t *testing.T) {
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		for _, next := range []string{"statement", "commit"} {
			t.Run(next, func(t *testing.T) {
				ctx := testdb.Context(t)
				w := witness.New(t)
				door := frontdoor.Open(t, drv, frontdoor.MaxConns(failurePoolSize),
					frontdoor.Settings(map[string]string{"idle_in_transaction_session_timeout": "200"}))
				key := testdb.Key(t)
				err := door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
					require.NoError(t, w.Mark(ctx, tx, "idle"))
					pid, err := tx.QueryInt(ctx, "SELECT pg_backend_pid()")
					require.NoError(t, err)
					// Pause until the server has ended the session.
					require.Eventually(t, func() bool { return !w.BackendAlive(t, pid) }, 30*time.Second, 20*time.Millisecond)
					require.True(t, w.LockFree(t, key))
					if next == "statement" {
						return tx.Exec(ctx, "SELECT 1")
					}
					return nil
				})
				op := pgadvisory.OpFn
				if next == "commit" {
					op = pgadvisory.OpCommit
				}
				sqlstate.RequireTyped(t, err, pgadvisory.ErrConnLost, op, "25P03")
				require.NotErrorIs(t, err, pgadvisory.ErrCommitUnknown)
				w.RequireClosing(t, door, witness.Closing{Mark: "idle", Next: "next-call"}, key)
			})
		}
	})
}

// TestFailConnectionCut: the network connection is reset while fn runs.
// ErrConnLost, nothing committed, and the server frees the lock when it
// notices the reset.
func TestFailConnectionCut(t *testing.T) {
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		w := witness.New(t)
		px := faultproxy.ToTestDB(t)
		door := frontdoor.Open(t, drv, frontdoor.MaxConns(failurePoolSize), frontdoor.Configure(px.Route))
		key := testdb.Key(t)
		err := door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
			require.NoError(t, w.Mark(ctx, tx, "before-cut"))
			require.False(t, w.LockFree(t, key), "control: the probe sees the lock held")
			require.Equal(t, 1, px.Conns())
			px.CutAll()
			return tx.Exec(ctx, "SELECT 1")
		})
		sqlstate.RequireTyped(t, err, pgadvisory.ErrConnLost, "fn", "")
		w.RequireClosing(t, door, witness.Closing{Mark: "before-cut", Late: true, Next: "next-call"}, key)
	})
}

// TestFailConnectionLostDuringCommit: COMMIT reaches the server, which
// commits, but the connection breaks before the client reads the answer.
// The call reports ErrCommitUnknown (not ErrConnLost, which promises that
// nothing was committed), and the row is indeed there: "unknown" is the
// honest answer.
func TestFailConnectionLostDuringCommit(t *testing.T) {
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		w := witness.New(t)
		px := faultproxy.ToTestDB(t)
		door := frontdoor.Open(t, drv, frontdoor.MaxConns(failurePoolSize), frontdoor.Configure(px.Route))
		key := testdb.Key(t)
		var armed, fired atomic.Bool
		px.OnClientWrite(func(p []byte) faultproxy.Action {
			if armed.Load() && faultproxy.HasQuery(p, "commit") {
				armed.Store(false)
				fired.Store(true)
				return faultproxy.ForwardThenCutClient
			}
			return faultproxy.Forward
		})
		err := door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
			armed.Store(true)
			return w.Mark(ctx, tx, "committed-unseen")
		})
		require.True(t, fired.Load(), "the hook saw the COMMIT")
		sqlstate.RequireTyped(t, err, pgadvisory.ErrCommitUnknown, "commit", "")
		require.NotErrorIs(t, err, pgadvisory.ErrConnLost)
		// The server committed although the client never heard so.
		w.RequireClosing(t, door, witness.Closing{Mark: "committed-unseen", Committed: true, Late: true, Next: "next-call"}, key)
	})
}

// TestFailHalfOpenConnection: the network goes silent (no reset) while fn
// runs. A statement bounded by a deadline gives up and the call fails with
// nothing committed; but the server, which sees a healthy idle client, keeps
// the transaction and the lock until it learns otherwise: here when the
// network heals and the client's close arrives. (In production that is TCP
// keepalive or idle_in_transaction_session_timeout.)
func TestFailHalfOpenConnection(t *testing.T) {
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		w := witness.New(t)
		px := faultproxy.ToTestDB(t)
		door := frontdoor.Open(t, drv, frontdoor.MaxConns(failurePoolSize), frontdoor.Configure(px.Route))
		key := testdb.Key(t)
		err := door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
			require.NoError(t, w.Mark(ctx, tx, "half-open"))
			px.Blackhole(true)
			sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			return tx.Exec(sctx, "SELECT 1")
		})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.False(t, w.Committed(t, "half-open"))
		require.False(t, w.LockFree(t, key), "the server still holds the lock for the silent client")
		px.Blackhole(false)
		w.RequireClosing(t, door, witness.Closing{Mark: "half-open", Late: true, Next: "next-call"}, key)
	})
}

// TestFailClientGoneMidStatement: the client vanishes (connection reset, and
// nothing it sends afterwards gets through, as when its host dies) while the
// server runs a long statement of fn. By default the server notices only when
// the statement ends, and holds the lock meanwhile although nothing can
// commit. With client_connection_check_interval (PostgreSQL 14+) it polls the
// socket during the statement and releases the lock at once.
func TestFailClientGoneMidStatement(t *testing.T) {
	for _, checked := range []bool{false, true} {
		mode := "default"
		if checked {
			mode = "client_connection_check_interval"
		}
		t.Run(mode, func(t *testing.T) {
			frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
				ctx := testdb.Context(t)
				w := witness.New(t)
				px := faultproxy.ToTestDB(t)
				door := frontdoor.Open(t, drv, frontdoor.MaxConns(failurePoolSize), frontdoor.Configure(func(c *pgx.ConnConfig) {
					px.Route(c)
					if checked {
						c.RuntimeParams["client_connection_check_interval"] = "100"
					}
				}))
				// Before the pool closes (after a failed assertion too): let pgx's
				// pending cancel request through.
				t.Cleanup(func() { px.Blackhole(false) })
				key := testdb.Key(t)
				var pid int64
				err := door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
					require.NoError(t, w.Mark(ctx, tx, "vanished"))
					var err error
					pid, err = tx.QueryInt(ctx, "SELECT pg_backend_pid()")
					require.NoError(t, err)
					go func() {
						for !w.Sleeping(pid) {
							time.Sleep(5 * time.Millisecond)
						}
						px.Blackhole(true) // holds the cancel request pgx sends when it sees the cut
						px.CutAll()
					}()
					return tx.Exec(ctx, "SELECT pg_sleep(60)")
				})
				sqlstate.RequireTyped(t, err, pgadvisory.ErrConnLost, "fn", "")
				require.False(t, w.Committed(t, "vanished"))
				if !checked {
					require.True(t, w.BackendAlive(t, pid))
					require.False(t, w.LockFree(t, key), "the server still runs the statement and holds the lock for a vanished client")
					px.Blackhole(false) // pgx's cancel request arrives: the statement stops, the backend finds its client gone
				}
				require.Eventually(t, func() bool { return w.LockFree(t, key) }, 30*time.Second, 10*time.Millisecond)
				// pgxpool counts the dead connection as checked out until pgx's
				// cancel request, held by the blackhole, is through.
				px.Blackhole(false)
				w.RequireClosing(t, door, witness.Closing{Mark: "vanished", Next: "next-call"}, key)
			})
		})
	}
}

// failurePoolSize bounds the pool of each door a failure, cancelation or
// fault test opens.
const failurePoolSize = 8
