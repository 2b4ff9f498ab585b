package pgadvisory

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/faultproxy"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// How a session lock is lost, told once for each way its connection can be
// held: shared with other locks (SetSessionConns(db, n > 0), one check per
// connection, session_muxwatch.go) and dedicated (SetSessionConns(db, 0),
// a watcher per call, watcher.go), through both drivers. Every story ends
// with fn's context canceled with ErrLockLost and the call returning
// ErrLockLost from the watch; its control, the same call without the
// loss, returns nil. These tests are internal: one story unlocks a key on
// the lock's own connection, through the hook Lead's election uses.

// lossInterval and lossTimeout are the stories' WithCheckInterval and
// WithCheckTimeout.
const (
	lossInterval = 100 * time.Millisecond
	// Far above a statement's time on a busy machine: the controls run
	// on a link that answers, slowly, and must not time out.
	lossTimeout = time.Second
	// lossNoticed bounds the wait for a loss: far above interval plus
	// timeout, far below the test's deadline.
	lossNoticed = 20 * time.Second
)

// lossDoor is a front door whose connections go through a fault proxy.
type lossDoor struct {
	name   string
	handle any          // the pool
	s      *lockerState // the state of the Locker whose calls run here (set by the test)
	run    func(ctx context.Context, c *callState, fn func(context.Context) error) error
}

// proxiedDoors opens a database/sql pool and a pgx pool of their own whose
// connections go through px, closed when t ends.
func proxiedDoors(t *testing.T, px *faultproxy.Proxy) []lossDoor {
	t.Helper()
	cfg, err := pgx.ParseConfig(testdb.URL(t))
	require.NoError(t, err)
	px.Route(cfg)
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { _ = db.Close() })
	pcfg, err := pgxpool.ParseConfig(testdb.URL(t))
	require.NoError(t, err)
	px.Route(pcfg.ConnConfig)
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return []lossDoor{
		{"database/sql", db, nil, func(ctx context.Context, c *callState, fn func(context.Context) error) error {
			return runSession(ctx, c, c.locker, databaseSQLSessions(db), fn)
		}},
		{"pgx", pool, nil, func(ctx context.Context, c *callState, fn func(context.Context) error) error {
			return runSession(ctx, c, c.locker, pgxSessions(pool), fn)
		}},
	}
}

// forEachSessionMode runs body for each door with shared connections (the
// default two) and with dedicated ones.
func forEachSessionMode(t *testing.T, doors []lossDoor, body func(t *testing.T, d lossDoor, dedicated bool)) {
	for _, d := range doors {
		for _, dedicated := range []bool{false, true} {
			name := d.name + "/shared"
			n := defaultSessionConns
			if dedicated {
				name, n = d.name+"/dedicated", 0
			}
			t.Run(name, func(t *testing.T) {
				d.s = newLockerState()
				d.s.setSessionConns(n)
				body(t, d, dedicated)
			})
		}
	}
}

// sessionCall is a session lock call on keys (a set when there are
// several) with opts.
func sessionCall(t *testing.T, s *lockerState, keys []int64, opts ...Option) *callState {
	t.Helper()
	if len(keys) > 1 {
		opts = append(opts, WithLocks(keys[1:]...))
	}
	c, err := newCall(s, keys[0], opts, famSession, "pool", false, false)
	require.NoError(t, err)
	return c
}

// unlockOnLocked makes c unlock key on its own connection once its locks
// are taken, before fn runs: the backend no longer holds it, while the
// connection stays healthy.
func unlockOnLocked(c *callState, key int64) {
	c.onLocked = func(ctx context.Context, q sessionQuerier) error {
		var ok bool
		if err := q.queryRow(ctx, "SELECT pg_advisory_unlock($1)", []any{key}, &ok); err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("the connection did not hold lock %d", key)
		}
		return nil
	}
}

// lockTimeoutOnLocked sets a lock_timeout of 50ms on c's connection once
// its locks are taken, before fn runs, as a role setting would.
func lockTimeoutOnLocked(c *callState) {
	c.onLocked = func(ctx context.Context, q sessionQuerier) error {
		var set string
		return q.queryRow(ctx, "SELECT pg_catalog.set_config('lock_timeout', '50ms', false)", nil, &set)
	}
}

// lockHolders are the backends that hold key (granted) in the test
// database.
func lockHolders(t *testing.T, admin *sql.DB, key int64) []int32 {
	t.Helper()
	rows, err := admin.Query(`SELECT pid FROM pg_catalog.pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1
  AND ((classid::bigint << 32) | objid::bigint) = $1 ORDER BY pid`, key)
	require.NoError(t, err)
	defer rows.Close()
	var pids []int32
	for rows.Next() {
		var pid int32
		require.NoError(t, rows.Scan(&pid))
		pids = append(pids, pid)
	}
	require.NoError(t, rows.Err())
	return pids
}

// takeOver takes key on a connection of admin's, which it returns; the
// caller unlocks it there.
func takeOver(t *testing.T, ctx context.Context, admin *sql.DB, key int64) *sql.Conn {
	t.Helper()
	conn, err := admin.Conn(ctx)
	require.NoError(t, err)
	var ok bool
	require.NoError(t, conn.QueryRowContext(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&ok))
	require.True(t, ok, "another session takes the lock the call's backend no longer holds")
	return conn
}

// awaitLoss waits for fn's context to end, at most lossNoticed.
func awaitLoss(t *testing.T, ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return true
	case <-time.After(lossNoticed):
		t.Errorf("the loss was not noticed within %v", lossNoticed)
		return false
	}
}

func TestSessionLossStories(t *testing.T) {
	admin := testdb.DB(t)
	px := faultproxy.ToTestDB(t)
	var delay atomic.Int64 // every chunk a client writes waits this long (a slow link)
	px.OnClientWrite(func([]byte) faultproxy.Action {
		time.Sleep(time.Duration(delay.Load()))
		return faultproxy.Forward
	})
	t.Cleanup(func() { px.Blackhole(false); delay.Store(0) })
	doors := proxiedDoors(t, px)

	type story struct {
		name string
		// prepare changes the call before it runs (nil: nothing).
		prepare func(c *callState, keys []int64)
		// provoke makes the loss happen while fn runs and returns what puts
		// things back once it was noticed.
		provoke func(t *testing.T, ctx context.Context, keys []int64) (heal func())
		says    string // in the call's error
	}
	stories := []story{
		{
			name: "terminated backend",
			provoke: func(t *testing.T, ctx context.Context, keys []int64) func() {
				pids := lockHolders(t, admin, keys[0])
				require.Len(t, pids, 1)
				var ok bool
				require.NoError(t, admin.QueryRowContext(ctx, "SELECT pg_terminate_backend($1)", pids[0]).Scan(&ok))
				require.True(t, ok)
				return func() {}
			},
		},
		{
			name: "half-open link",
			provoke: func(t *testing.T, ctx context.Context, keys []int64) func() {
				px.Blackhole(true)
				return func() { px.Blackhole(false) }
			},
			says: fmt.Sprintf("did not answer within %v", lossTimeout),
		},
		{
			name: "check timeout on a slow link",
			provoke: func(t *testing.T, ctx context.Context, keys []int64) func() {
				delay.Store(int64(4 * lossTimeout))
				return func() { delay.Store(0) }
			},
			says: fmt.Sprintf("did not answer within %v", lossTimeout),
		},
		{
			name:    "lock taken over",
			prepare: func(c *callState, keys []int64) { unlockOnLocked(c, keys[1]) },
			provoke: func(t *testing.T, ctx context.Context, keys []int64) func() {
				other := takeOver(t, ctx, admin, keys[1])
				return func() {
					_, err := other.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", keys[1])
					require.NoError(t, err)
					require.NoError(t, other.Close())
				}
			},
			says: "backend holds 2 of 3 locks",
		},
		{
			// The server answers the check with an error on a connection
			// that stays up: here the session's lock_timeout (a common role
			// setting) while another session holds a lock on the catalog
			// view the check reads; in production also a statement_timeout
			// on a busy server or an operator's pg_cancel_backend. The
			// check could not say the locks are held: a loss. The check
			// timeout is far above the lock_timeout, so the server's answer
			// comes first.
			name: "check answered with an error",
			prepare: func(c *callState, keys []int64) {
				c.checkTimeout = lossNoticed
				lockTimeoutOnLocked(c)
			},
			provoke: func(t *testing.T, ctx context.Context, keys []int64) func() {
				tx, err := admin.BeginTx(ctx, nil)
				require.NoError(t, err)
				_, err = tx.ExecContext(ctx, "LOCK TABLE pg_catalog.pg_locks IN ACCESS EXCLUSIVE MODE")
				require.NoError(t, err)
				return func() { require.NoError(t, tx.Rollback()) }
			},
			says: "canceling statement due to lock timeout",
		},
	}

	forEachSessionMode(t, doors, func(t *testing.T, d lossDoor, dedicated bool) {
		for _, s := range stories {
			t.Run(s.name, func(t *testing.T) {
				ctx := testdb.Context(t)
				keys := []int64{testdb.Key(t), testdb.Key(t), testdb.Key(t)}
				c := sessionCall(t, d.s, keys, WithCheckInterval(lossInterval), WithCheckTimeout(lossTimeout))
				if s.prepare != nil {
					s.prepare(c, keys)
				}
				var cause error
				err := d.run(ctx, c, func(fctx context.Context) error {
					heal := s.provoke(t, ctx, keys)
					defer heal()
					if awaitLoss(t, fctx) {
						cause = context.Cause(fctx)
					}
					return cause
				})
				require.ErrorIs(t, cause, ErrLockLost, "fn's context ends with the loss")
				require.ErrorIs(t, err, ErrLockLost)
				var pe *Error
				require.ErrorAs(t, err, &pe)
				require.Equal(t, OpWatch, pe.Op, "%v", err)
				require.ErrorContains(t, err, s.says)
				for _, key := range keys {
					require.Eventually(t, func() bool { return len(lockHolders(t, admin, key)) == 0 }, 30*time.Second, 10*time.Millisecond,
						"lock %d is released on the server", key)
				}
			})
		}

		// CONTROL: the same calls without a loss, on a link that is slow
		// (every write waits a sixth of the check timeout) but answers, with
		// the session's lock_timeout of the error story: ten intervals pass
		// without a cancelation, and every lock is held.
		t.Run("control", func(t *testing.T) {
			ctx := testdb.Context(t)
			keys := []int64{testdb.Key(t), testdb.Key(t), testdb.Key(t)}
			c := sessionCall(t, d.s, keys, WithCheckInterval(lossInterval), WithCheckTimeout(lossTimeout))
			lockTimeoutOnLocked(c)
			delay.Store(int64(lossTimeout / 6))
			defer delay.Store(0)
			require.NoError(t, d.run(ctx, c, func(fctx context.Context) error {
				select {
				case <-fctx.Done():
					t.Errorf("canceled without a loss: %v", context.Cause(fctx))
				case <-time.After(10 * lossInterval):
				}
				for _, key := range keys {
					require.Len(t, lockHolders(t, admin, key), 1)
				}
				return nil
			}))
		})
	})
}

// TestSessionReleasePartlyLostSet: a session lock over three keys whose
// backend no longer holds one of them when fn returns (unlocked on its own
// connection; the watcher, at a one-hour interval, never checks), while
// another session held that key as fn ran, ends in ErrLockLost from the
// release: the unlock finds two of three locks. The control: the same call
// with all three held returns nil.
func TestSessionReleasePartlyLostSet(t *testing.T) {
	admin := testdb.DB(t)
	px := faultproxy.ToTestDB(t)
	forEachSessionMode(t, proxiedDoors(t, px), func(t *testing.T, d lossDoor, dedicated bool) {
		ctx := testdb.Context(t)
		quiet := WithCheckInterval(time.Hour)

		keys := []int64{testdb.Key(t), testdb.Key(t), testdb.Key(t)}
		c := sessionCall(t, d.s, keys, quiet)
		unlockOnLocked(c, keys[2])
		err := d.run(ctx, c, func(fctx context.Context) error {
			other := takeOver(t, ctx, admin, keys[2])
			_, err := other.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", keys[2])
			require.NoError(t, err)
			require.NoError(t, other.Close())
			require.NoError(t, fctx.Err(), "the watcher did not check")
			return nil
		})
		require.ErrorIs(t, err, ErrLockLost)
		var pe *Error
		require.ErrorAs(t, err, &pe)
		require.Equal(t, OpRelease, pe.Op, "%v", err)
		require.ErrorContains(t, err, "the unlock found 2 of 3 locks held")
		for _, key := range keys {
			require.Eventually(t, func() bool { return len(lockHolders(t, admin, key)) == 0 }, 30*time.Second, 10*time.Millisecond)
		}

		// CONTROL: nothing unlocked, the release verifies all three.
		keys = []int64{testdb.Key(t), testdb.Key(t), testdb.Key(t)}
		require.NoError(t, d.run(ctx, sessionCall(t, d.s, keys, quiet), func(context.Context) error { return nil }))
		for _, key := range keys {
			require.Empty(t, lockHolders(t, admin, key))
		}
	})
}

// TestSessionSharedSmallestInterval: two locks share one connection
// (SetSessionConns(db, 1)). The first wants a check every hour with an
// hour's timeout; alone, a link gone silent is not noticed (the control).
// The second joins with WithCheckInterval(100ms) and WithCheckTimeout(1s):
// the connection is now checked at the smallest interval, bounded by the
// smallest timeout, and once the link goes silent (after a few checks, so
// that the interval in force is the connection's, not only the first one
// armed when the second lock joined) both locks' work is canceled.
func TestSessionSharedSmallestInterval(t *testing.T) {
	admin := testdb.DB(t)
	px := faultproxy.ToTestDB(t)
	t.Cleanup(func() { px.Blackhole(false) })
	for _, d := range proxiedDoors(t, px) {
		t.Run(d.name, func(t *testing.T) {
			d.s = newLockerState()
			d.s.setSessionConns(1)
			ctx := testdb.Context(t)
			slow, fast := testdb.Key(t), testdb.Key(t)
			// Whatever fails first, the link heals before the calls are
			// waited for (the hourly lock's release would wait an hour).
			defer px.Blackhole(false)

			started, stop := make(chan struct{}), make(chan struct{})
			defer close(stop) // ends the hourly lock's fn when a check below failed
			slowCause := make(chan error, 1)
			slowDone := make(chan error, 1)
			go func() {
				slowDone <- d.run(ctx, sessionCall(t, d.s, []int64{slow}, WithCheckInterval(time.Hour), WithCheckTimeout(time.Hour)),
					func(fctx context.Context) error {
						close(started)
						select {
						case <-fctx.Done():
						case <-stop:
						}
						slowCause <- context.Cause(fctx)
						return context.Cause(fctx)
					})
			}()
			select {
			case <-started:
			case <-ctx.Done():
				t.Fatal("the first lock was not granted")
			}

			// CONTROL: alone, the hourly lock's silent link goes unnoticed.
			px.Blackhole(true)
			time.Sleep(10 * lossInterval)
			px.Blackhole(false)
			select {
			case err := <-slowCause:
				t.Fatalf("the hourly lock was canceled: %v", err)
			default:
			}

			var fastCause error
			err := d.run(ctx, sessionCall(t, d.s, []int64{fast}, WithCheckInterval(lossInterval), WithCheckTimeout(lossTimeout)),
				func(fctx context.Context) error {
					require.Equal(t, lockHolders(t, admin, slow), lockHolders(t, admin, fast), "both locks share one connection")
					time.Sleep(5 * lossInterval) // a few checks pass
					require.NoError(t, fctx.Err(), "no loss yet")
					px.Blackhole(true)
					defer px.Blackhole(false) // before the release's unlock
					if awaitLoss(t, fctx) {
						fastCause = context.Cause(fctx)
					}
					return fastCause
				})
			require.ErrorIs(t, fastCause, ErrLockLost)
			require.ErrorIs(t, err, ErrLockLost)
			var slowErr error
			select {
			case slowErr = <-slowCause:
			case <-time.After(lossNoticed):
			}
			px.Blackhole(false)
			require.ErrorIs(t, slowErr, ErrLockLost, "the hourly lock's work is canceled too")
			select {
			case err := <-slowDone:
				require.ErrorIs(t, err, ErrLockLost)
			case <-ctx.Done():
				t.Fatal("the hourly lock's call did not return")
			}
		})
	}
}
