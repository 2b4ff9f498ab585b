package pgadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/faultproxy"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Failure-mode tests: what RunExclusive and RunExclusivePgx report, commit
// and leave locked when the backend dies, the connection breaks (before or
// during COMMIT), fn deadlocks, fails, panics or swallows an error. Every
// test runs over both front doors, each on a pool of its own, and checks the
// outcome from a separate connection (fmEnv.obs): rows committed, the lock
// free, no connection left checked out.
//
// Helpers carry the fm prefix so they cannot collide with other test files
// of the package.

// fmTx is the lock transaction as fn sees it, whichever front door opened it.
type fmTx interface {
	exec(ctx context.Context, query string, args ...any) error
	queryInt(ctx context.Context, query string, args ...any) (int64, error)
}

type fmSQLTx struct{ tx *sql.Tx }

func (q fmSQLTx) exec(ctx context.Context, query string, args ...any) error {
	_, err := q.tx.ExecContext(ctx, query, args...)
	return err
}

func (q fmSQLTx) queryInt(ctx context.Context, query string, args ...any) (n int64, err error) {
	err = q.tx.QueryRowContext(ctx, query, args...).Scan(&n)
	return n, err
}

type fmPgxTx struct{ tx pgx.Tx }

func (q fmPgxTx) exec(ctx context.Context, query string, args ...any) error {
	_, err := q.tx.Exec(ctx, query, args...)
	return err
}

func (q fmPgxTx) queryInt(ctx context.Context, query string, args ...any) (n int64, err error) {
	err = q.tx.QueryRow(ctx, query, args...).Scan(&n)
	return n, err
}

// fmDoor is one front door on a pool of its own.
type fmDoor struct {
	name  string
	run   func(ctx context.Context, key int64, fn func(fmTx) error, opts ...pgadvisory.Option) error
	inUse func() int // connections checked out of the pool
}

// fmDoorNames are the front doors every test runs over.
var fmDoorNames = []string{"database-sql", "pgx"}

// fmMaxConns bounds each front door's pool.
const fmMaxConns = 8

// fmOpen opens front door name on a new pool to the test database; adjust
// (may be nil) edits the connection configuration first.
func fmOpen(t *testing.T, name string, adjust func(*pgx.ConnConfig)) fmDoor {
	t.Helper()
	if adjust == nil {
		adjust = func(*pgx.ConnConfig) {}
	}
	switch name {
	case "database-sql":
		cfg, err := pgx.ParseConfig(testdb.URL(t))
		require.NoError(t, err)
		adjust(cfg)
		db := stdlib.OpenDB(*cfg)
		db.SetMaxOpenConns(fmMaxConns)
		t.Cleanup(func() { _ = db.Close() })
		return fmDoor{
			name: name,
			run: func(ctx context.Context, key int64, fn func(fmTx) error, opts ...pgadvisory.Option) error {
				return pgadvisory.RunExclusive(ctx, db, key, func(tx *sql.Tx) error { return fn(fmSQLTx{tx}) }, opts...)
			},
			inUse: func() int { return db.Stats().InUse },
		}
	case "pgx":
		cfg, err := pgxpool.ParseConfig(testdb.URL(t))
		require.NoError(t, err)
		cfg.MaxConns = fmMaxConns
		adjust(cfg.ConnConfig)
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		require.NoError(t, err)
		t.Cleanup(func() {
			// pool.Close waits for every connection to come back: bounded, so
			// that a leaked connection fails the test instead of hanging it.
			closed := make(chan struct{})
			go func() { pool.Close(); close(closed) }()
			select {
			case <-closed:
			case <-time.After(30 * time.Second):
				t.Errorf("pgx pool.Close blocked: %d connections never returned", pool.Stat().AcquiredConns())
			}
		})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, pool.Ping(ctx))
		return fmDoor{
			name: name,
			run: func(ctx context.Context, key int64, fn func(fmTx) error, opts ...pgadvisory.Option) error {
				return pgadvisory.RunExclusivePgx(ctx, pool, key, func(tx pgx.Tx) error { return fn(fmPgxTx{tx}) }, opts...)
			},
			inUse: func() int { return int(pool.Stat().AcquiredConns()) },
		}
	}
	t.Fatalf("unknown front door %q", name)
	return fmDoor{}
}

// fmViaProxy routes a configuration through a new fault proxy, in clear
// text so that the proxy's hook can read the protocol.
func fmViaProxy(t *testing.T) (func(*pgx.ConnConfig), *faultproxy.Proxy) {
	t.Helper()
	cfg, err := pgx.ParseConfig(testdb.URL(t))
	require.NoError(t, err)
	px := faultproxy.New(t, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	host, port, err := net.SplitHostPort(px.Addr())
	require.NoError(t, err)
	p, err := strconv.ParseUint(port, 10, 16)
	require.NoError(t, err)
	return func(c *pgx.ConnConfig) {
		c.Host, c.Port, c.TLSConfig, c.Fallbacks = host, uint16(p), nil, nil
	}, px
}

// fmEnv is the observer side of a test: a direct connection pool that never
// takes part in the calls under test, and a table fn writes marks into.
type fmEnv struct {
	obs   *sql.DB
	table string
}

func fmNewEnv(t *testing.T) *fmEnv {
	t.Helper()
	obs := testdb.DB(t)
	table := pgx.Identifier{testdb.Schema(t), "marks"}.Sanitize()
	_, err := obs.Exec("CREATE TABLE " + table + " (label text PRIMARY KEY)")
	require.NoError(t, err)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		// A failed test may have left a transaction open on the table (a
		// leaked connection): end it, or dropping the schema waits forever.
		_, _ = obs.Exec(`SELECT pg_terminate_backend(pid, 10000) FROM pg_catalog.pg_locks
			WHERE relation = $1::regclass AND pid <> pg_backend_pid()`, table)
	})
	return &fmEnv{obs: obs, table: table}
}

// mark inserts label through the lock transaction.
func (e *fmEnv) mark(ctx context.Context, tx fmTx, label string) error {
	return tx.exec(ctx, "INSERT INTO "+e.table+" (label) VALUES ($1)", label)
}

// committed reports whether a row labelled label is visible to others.
func (e *fmEnv) committed(t *testing.T, label string) bool {
	t.Helper()
	var n int
	require.NoError(t, e.obs.QueryRow("SELECT count(*) FROM "+e.table+" WHERE label = $1", label).Scan(&n))
	return n == 1
}

// lockFree reports whether another session can take key right now (the
// probe's transaction-scoped lock ends with its own statement).
func (e *fmEnv) lockFree(t *testing.T, key int64) bool {
	t.Helper()
	var free bool
	require.NoError(t, e.obs.QueryRow("SELECT pg_try_advisory_xact_lock($1)", key).Scan(&free))
	return free
}

// lockEntries counts pg_locks rows for key in this database, granted or
// waiting.
func (e *fmEnv) lockEntries(t *testing.T, key int64, granted bool) int {
	t.Helper()
	var n int
	require.NoError(t, e.obs.QueryRow(`SELECT count(*) FROM pg_catalog.pg_locks
		WHERE locktype = 'advisory' AND objsubid = 1 AND granted = $2
		  AND database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
		  AND ((classid::bigint << 32) | objid::bigint) = $1`, key, granted).Scan(&n))
	return n
}

// backendAlive reports whether the server still runs backend pid.
func (e *fmEnv) backendAlive(t *testing.T, pid int64) bool {
	t.Helper()
	var n int
	require.NoError(t, e.obs.QueryRow("SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE pid = $1", pid).Scan(&n))
	return n == 1
}

// requireNoLeak waits until door has no connection checked out.
func fmRequireNoLeak(t *testing.T, door fmDoor) {
	t.Helper()
	require.Eventually(t, func() bool { return door.inUse() == 0 }, 30*time.Second, 10*time.Millisecond,
		"%s: connections still checked out", door.name)
}

// fmRequireUsable shows the door still works: a call commits.
func fmRequireUsable(t *testing.T, e *fmEnv, door fmDoor, key int64, label string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, door.run(ctx, key, func(tx fmTx) error { return e.mark(ctx, tx, label) }))
	require.True(t, e.committed(t, label), "control: a committed mark is seen")
}

// fmRequireUsableAfterKills shows the door still works after a nemesis that
// may have signalled a holder whose call then ended normally: such a
// connection went back to the pool idle and its backend exits afterwards,
// which no client can know before it uses the connection again. Each such
// stale connection costs at most one call, which must fail as ErrConnLost
// (nothing committed); within maxConns+1 calls one must commit.
func fmRequireUsableAfterKills(t *testing.T, e *fmEnv, door fmDoor, key int64, maxConns int, label string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for attempt := 0; attempt <= maxConns; attempt++ {
		err := door.run(ctx, key, func(tx fmTx) error { return e.mark(ctx, tx, label) })
		if err == nil {
			require.True(t, e.committed(t, label), "control: a committed mark is seen")
			return
		}
		require.ErrorIs(t, err, pgadvisory.ErrConnLost, "attempt %d: only a stale pooled connection may fail a call", attempt)
		t.Logf("attempt %d found a stale pooled connection: %v", attempt, err)
	}
	t.Fatalf("%s: no call committed in %d attempts", door.name, maxConns+1)
}

// fmRequireKind checks the *pgadvisory.Error of a failed call.
func fmRequireKind(t *testing.T, err error, kind error, op, sqlState string) *pgadvisory.Error {
	t.Helper()
	require.ErrorIs(t, err, kind)
	var pe *pgadvisory.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, op, pe.Op, "%v", err)
	require.Equal(t, sqlState, pe.SQLState, "%v", err)
	require.Equal(t, sqlState, pgadvisory.SQLState(err))
	if sqlState != "" {
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, "the driver's error stays reachable")
		require.Equal(t, sqlState, pgErr.Code)
	}
	return pe
}

func fmContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestFailBackendTerminated: the holder's backend is killed
// (pg_terminate_backend) in the middle of fn. The call reports ErrConnLost
// with SQLSTATE 57P01, nothing fn wrote is committed, the lock is free at once
// and the pool goes on working.
func TestFailBackendTerminated(t *testing.T) {
	for _, name := range fmDoorNames {
		t.Run(name, func(t *testing.T) {
			ctx := fmContext(t)
			e := fmNewEnv(t)
			door := fmOpen(t, name, nil)
			key := testdb.Key(t)
			err := door.run(ctx, key, func(tx fmTx) error {
				require.NoError(t, e.mark(ctx, tx, "before-kill"))
				pid, err := tx.queryInt(ctx, "SELECT pg_backend_pid()")
				require.NoError(t, err)
				require.False(t, e.lockFree(t, key), "control: the probe sees the lock held")
				var killed bool
				// With a timeout, pg_terminate_backend waits until the backend is gone.
				require.NoError(t, e.obs.QueryRowContext(ctx, "SELECT pg_terminate_backend($1, 30000)", pid).Scan(&killed))
				require.True(t, killed)
				require.False(t, e.backendAlive(t, pid))
				require.True(t, e.lockFree(t, key), "the server released the lock with the backend")
				return tx.exec(ctx, "SELECT 1")
			})
			fmRequireKind(t, err, pgadvisory.ErrConnLost, "fn", "57P01")
			require.False(t, e.committed(t, "before-kill"))
			require.True(t, e.lockFree(t, key))
			fmRequireNoLeak(t, door)
			fmRequireUsable(t, e, door, key, "next-call")
		})
	}
}

// TestFailIdleInTransactionTimeout: the server ends a session that stays idle
// in the lock transaction longer than idle_in_transaction_session_timeout.
// The next statement, or COMMIT, reports ErrConnLost with SQLSTATE 25P03:
// the server can only raise 25P03 before it read COMMIT, so nothing was
// committed and the outcome is known, not ErrCommitUnknown.
func TestFailIdleInTransactionTimeout(t *testing.T) {
	for _, name := range fmDoorNames {
		for _, next := range []string{"statement", "commit"} {
			t.Run(name+"/"+next, func(t *testing.T) {
				ctx := fmContext(t)
				e := fmNewEnv(t)
				door := fmOpen(t, name, func(c *pgx.ConnConfig) {
					c.RuntimeParams["idle_in_transaction_session_timeout"] = "200"
				})
				key := testdb.Key(t)
				err := door.run(ctx, key, func(tx fmTx) error {
					require.NoError(t, e.mark(ctx, tx, "idle"))
					pid, err := tx.queryInt(ctx, "SELECT pg_backend_pid()")
					require.NoError(t, err)
					// Pause until the server has ended the session.
					require.Eventually(t, func() bool { return !e.backendAlive(t, pid) }, 30*time.Second, 20*time.Millisecond)
					require.True(t, e.lockFree(t, key))
					if next == "statement" {
						return tx.exec(ctx, "SELECT 1")
					}
					return nil
				})
				op := "fn"
				if next == "commit" {
					op = "commit"
				}
				fmRequireKind(t, err, pgadvisory.ErrConnLost, op, "25P03")
				require.NotErrorIs(t, err, pgadvisory.ErrCommitUnknown)
				require.False(t, e.committed(t, "idle"))
				fmRequireNoLeak(t, door)
				fmRequireUsable(t, e, door, key, "next-call")
			})
		}
	}
}

// TestFailConnectionCut: the network connection is reset while fn runs.
// ErrConnLost, nothing committed, and the server frees the lock when it
// notices the reset.
func TestFailConnectionCut(t *testing.T) {
	for _, name := range fmDoorNames {
		t.Run(name, func(t *testing.T) {
			ctx := fmContext(t)
			e := fmNewEnv(t)
			adjust, px := fmViaProxy(t)
			door := fmOpen(t, name, adjust)
			key := testdb.Key(t)
			err := door.run(ctx, key, func(tx fmTx) error {
				require.NoError(t, e.mark(ctx, tx, "before-cut"))
				require.False(t, e.lockFree(t, key), "control: the probe sees the lock held")
				require.Equal(t, 1, px.Conns())
				px.CutAll()
				return tx.exec(ctx, "SELECT 1")
			})
			fmRequireKind(t, err, pgadvisory.ErrConnLost, "fn", "")
			require.False(t, e.committed(t, "before-cut"))
			require.Eventually(t, func() bool { return e.lockFree(t, key) }, 30*time.Second, 10*time.Millisecond)
			fmRequireNoLeak(t, door)
			fmRequireUsable(t, e, door, key, "next-call")
		})
	}
}

// TestFailConnectionLostDuringCommit: COMMIT reaches the server, which
// commits, but the connection breaks before the client reads the answer.
// The call reports ErrCommitUnknown (not ErrConnLost, which promises that
// nothing was committed), and the row is indeed there: "unknown" is the
// honest answer.
func TestFailConnectionLostDuringCommit(t *testing.T) {
	for _, name := range fmDoorNames {
		t.Run(name, func(t *testing.T) {
			ctx := fmContext(t)
			e := fmNewEnv(t)
			adjust, px := fmViaProxy(t)
			door := fmOpen(t, name, adjust)
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
			err := door.run(ctx, key, func(tx fmTx) error {
				armed.Store(true)
				return e.mark(ctx, tx, "committed-unseen")
			})
			require.True(t, fired.Load(), "the hook saw the COMMIT")
			fmRequireKind(t, err, pgadvisory.ErrCommitUnknown, "commit", "")
			require.NotErrorIs(t, err, pgadvisory.ErrConnLost)
			require.Eventually(t, func() bool { return e.committed(t, "committed-unseen") }, 30*time.Second, 10*time.Millisecond,
				"the server committed although the client never heard so")
			require.Eventually(t, func() bool { return e.lockFree(t, key) }, 30*time.Second, 10*time.Millisecond)
			fmRequireNoLeak(t, door)
			fmRequireUsable(t, e, door, key, "next-call")
		})
	}
}

// TestFailDeadlockInFn: two calls hold k1 and k2 and then each asks, inside
// fn, for the other's key. The server breaks the cycle: exactly one call
// reports ErrDeadlock (40P01) and commits nothing; the other then gets its
// second lock and commits.
func TestFailDeadlockInFn(t *testing.T) {
	for _, name := range fmDoorNames {
		t.Run(name, func(t *testing.T) {
			ctx := fmContext(t)
			e := fmNewEnv(t)
			door := fmOpen(t, name, nil)
			keys := [2]int64{testdb.Key(t), testdb.Key(t)}
			holding := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
			var errs [2]error
			var wg sync.WaitGroup
			for i := range 2 {
				wg.Go(func() {
					errs[i] = door.run(ctx, keys[i], func(tx fmTx) error {
						if err := e.mark(ctx, tx, "call"+strconv.Itoa(i)); err != nil {
							return err
						}
						close(holding[i])
						select { // both hold their first lock before either asks for the second
						case <-holding[1-i]:
						case <-ctx.Done():
							return ctx.Err()
						}
						return tx.exec(ctx, "SELECT pg_advisory_xact_lock($1)", keys[1-i])
					})
				})
			}
			wg.Wait()
			loser := 0
			if errs[0] == nil {
				loser = 1
			}
			require.NoError(t, errs[1-loser], "the survivor commits")
			fmRequireKind(t, errs[loser], pgadvisory.ErrDeadlock, "fn", "40P01")
			require.False(t, e.committed(t, "call"+strconv.Itoa(loser)))
			require.True(t, e.committed(t, "call"+strconv.Itoa(1-loser)))
			require.True(t, e.lockFree(t, keys[0]))
			require.True(t, e.lockFree(t, keys[1]))
			fmRequireNoLeak(t, door)
		})
	}
}

// fmErr is a typed error fn returns, to show errors.As through the result.
type fmErr struct{ step int }

func (e *fmErr) Error() string { return "fm: step " + strconv.Itoa(e.step) + " failed" }

// TestFailFnError: fn's error rolls back, is returned so that errors.Is and
// errors.As find it (plain and wrapped), and the lock is released.
func TestFailFnError(t *testing.T) {
	boom := errors.New("fm: boom")
	for _, name := range fmDoorNames {
		for _, tc := range []struct {
			name string
			err  error
		}{
			{"plain", boom},
			{"wrapped", fmt.Errorf("fm: sending the report: %w", boom)},
			{"typed", fmt.Errorf("fm: %w", &fmErr{step: 3})},
		} {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				ctx := fmContext(t)
				e := fmNewEnv(t)
				door := fmOpen(t, name, nil)
				key := testdb.Key(t)
				err := door.run(ctx, key, func(tx fmTx) error {
					require.NoError(t, e.mark(ctx, tx, "failed"))
					return tc.err
				})
				require.Error(t, err)
				if tc.name == "typed" {
					var fe *fmErr
					require.ErrorAs(t, err, &fe)
					require.Equal(t, 3, fe.step)
				} else {
					require.ErrorIs(t, err, boom)
				}
				require.Equal(t, tc.err, err, "an error without a special meaning comes back as fn returned it")
				require.False(t, e.committed(t, "failed"))
				require.True(t, e.lockFree(t, key), "released with the rollback, before the call returned")
				fmRequireNoLeak(t, door)
				fmRequireUsable(t, e, door, key, "next-call")
			})
		}
	}
}

// fmRecover runs f and returns what it panicked with, or nil.
func fmRecover(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

// TestFailFnPanics: a panic in fn propagates to the caller after the
// transaction was rolled back and its connection returned.
func TestFailFnPanics(t *testing.T) {
	for _, name := range fmDoorNames {
		t.Run(name, func(t *testing.T) {
			ctx := fmContext(t)
			e := fmNewEnv(t)
			door := fmOpen(t, name, nil)
			key := testdb.Key(t)
			type fmPanic struct{ n int }
			var ret error
			v := fmRecover(func() {
				ret = door.run(ctx, key, func(tx fmTx) error {
					require.NoError(t, e.mark(ctx, tx, "panicked"))
					require.Equal(t, 1, door.inUse(), "control: the leak check sees a checked-out connection")
					panic(fmPanic{n: 7})
				})
			})
			require.Equal(t, fmPanic{n: 7}, v, "the panic reaches the caller unchanged")
			require.NoError(t, ret, "the call did not return normally")
			require.False(t, e.committed(t, "panicked"))
			require.True(t, e.lockFree(t, key))
			fmRequireNoLeak(t, door)
			fmRequireUsable(t, e, door, key, "next-call")
		})
	}
}

// TestFailSwallowedSQLError: fn ignores a failed statement (the transaction
// is now aborted) and returns nil. COMMIT then rolls back: the call fails,
// knowing that nothing was committed.
func TestFailSwallowedSQLError(t *testing.T) {
	for _, name := range fmDoorNames {
		t.Run(name, func(t *testing.T) {
			ctx := fmContext(t)
			e := fmNewEnv(t)
			door := fmOpen(t, name, nil)
			key := testdb.Key(t)
			err := door.run(ctx, key, func(tx fmTx) error {
				require.NoError(t, e.mark(ctx, tx, "swallowed"))
				require.Error(t, tx.exec(ctx, "SELECT 1/0"), "control: the statement fails")
				return nil
			})
			require.Error(t, err)
			var pe *pgadvisory.Error
			require.ErrorAs(t, err, &pe)
			require.Equal(t, "commit", pe.Op)
			require.ErrorIs(t, err, pgx.ErrTxCommitRollback)
			require.NotErrorIs(t, err, pgadvisory.ErrCommitUnknown, "the outcome is known: rolled back")
			require.NotErrorIs(t, err, pgadvisory.ErrConnLost)
			require.False(t, e.committed(t, "swallowed"))
			require.True(t, e.lockFree(t, key))
			fmRequireNoLeak(t, door)
			fmRequireUsable(t, e, door, key, "next-call")
		})
	}
}

// TestFailHalfOpenConnection: the network goes silent (no reset) while fn
// runs. A statement bounded by a deadline gives up and the call fails with
// nothing committed; but the server, which sees a healthy idle client, keeps
// the transaction and the lock until it learns otherwise: here when the
// network heals and the client's close arrives. (In production that is TCP
// keepalive or idle_in_transaction_session_timeout.)
func TestFailHalfOpenConnection(t *testing.T) {
	for _, name := range fmDoorNames {
		t.Run(name, func(t *testing.T) {
			ctx := fmContext(t)
			e := fmNewEnv(t)
			adjust, px := fmViaProxy(t)
			door := fmOpen(t, name, adjust)
			key := testdb.Key(t)
			err := door.run(ctx, key, func(tx fmTx) error {
				require.NoError(t, e.mark(ctx, tx, "half-open"))
				px.Blackhole(true)
				sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				defer cancel()
				return tx.exec(sctx, "SELECT 1")
			})
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.False(t, e.committed(t, "half-open"))
			require.False(t, e.lockFree(t, key), "the server still holds the lock for the silent client")
			px.Blackhole(false)
			require.Eventually(t, func() bool { return e.lockFree(t, key) }, 30*time.Second, 10*time.Millisecond)
			require.False(t, e.committed(t, "half-open"))
			fmRequireNoLeak(t, door)
			fmRequireUsable(t, e, door, key, "next-call")
		})
	}
}

// TestFailClientGoneMidStatement: the client vanishes (connection reset, and
// nothing it sends afterwards gets through, as when its host dies) while the
// server runs a long statement of fn. By default the server notices only when
// the statement ends, and holds the lock meanwhile although nothing can
// commit. With client_connection_check_interval (PostgreSQL 14+) it polls the
// socket during the statement and releases the lock at once.
func TestFailClientGoneMidStatement(t *testing.T) {
	for _, checked := range []bool{false, true} {
		for _, name := range fmDoorNames {
			mode := "default"
			if checked {
				mode = "client_connection_check_interval"
			}
			t.Run(mode+"/"+name, func(t *testing.T) {
				ctx := fmContext(t)
				e := fmNewEnv(t)
				proxied, px := fmViaProxy(t)
				door := fmOpen(t, name, func(c *pgx.ConnConfig) {
					proxied(c)
					if checked {
						c.RuntimeParams["client_connection_check_interval"] = "100"
					}
				})
				// Before the pool closes (after a failed assertion too): let pgx's
				// pending cancel request through.
				t.Cleanup(func() { px.Blackhole(false) })
				key := testdb.Key(t)
				var pid int64
				err := door.run(ctx, key, func(tx fmTx) error {
					require.NoError(t, e.mark(ctx, tx, "vanished"))
					var err error
					pid, err = tx.queryInt(ctx, "SELECT pg_backend_pid()")
					require.NoError(t, err)
					go func() {
						for !e.sleeping(t, pid) {
							time.Sleep(5 * time.Millisecond)
						}
						px.Blackhole(true) // holds the cancel request pgx sends when it sees the cut
						px.CutAll()
					}()
					return tx.exec(ctx, "SELECT pg_sleep(60)")
				})
				fmRequireKind(t, err, pgadvisory.ErrConnLost, "fn", "")
				require.False(t, e.committed(t, "vanished"))
				if !checked {
					require.True(t, e.backendAlive(t, pid))
					require.False(t, e.lockFree(t, key), "the server still runs the statement and holds the lock for a vanished client")
					px.Blackhole(false) // pgx's cancel request arrives: the statement stops, the backend finds its client gone
				}
				require.Eventually(t, func() bool { return e.lockFree(t, key) }, 30*time.Second, 10*time.Millisecond)
				require.False(t, e.committed(t, "vanished"))
				// pgxpool counts the dead connection as checked out until pgx's
				// cancel request, held by the blackhole, is through.
				px.Blackhole(false)
				fmRequireNoLeak(t, door)
			})
		}
	}
}
