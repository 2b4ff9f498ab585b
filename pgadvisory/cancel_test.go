package pgadvisory_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Cancelation tests: a context that is done before the call, while it waits
// for the lock, while fn runs, or by the time fn returns. The call must end,
// its error must wrap ctx.Err(), nothing may be committed and nothing may
// stay checked out or locked. failurePoolSize is in
// failures_connection_test.go.

// TestCancelBeforeCall: a context already canceled: fn is not called, the
// error wraps context.Canceled and not a single statement is sent.
func TestCancelBeforeCall(t *testing.T) {
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		tr := &statementCounter{}
		door := frontdoor.Open(t, drv, frontdoor.MaxConns(failurePoolSize), frontdoor.Configure(func(c *pgx.ConnConfig) { c.Tracer = tr }))
		key := testdb.Key(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		before := tr.n.Load()
		called := false
		err := door.RunExclusive(ctx, key, func(frontdoor.Tx) error { called = true; return nil })
		require.ErrorIs(t, err, context.Canceled)
		require.False(t, called)
		var pe *pgadvisory.Error
		require.ErrorAs(t, err, &pe)
		require.Equal(t, pgadvisory.OpBegin, pe.Op)
		require.Equal(t, before, tr.n.Load(), "no statement was sent")
		require.Zero(t, door.InUse())

		// Control: the tracer does see a call's statements.
		require.NoError(t, door.RunExclusive(context.Background(), key, func(frontdoor.Tx) error { return nil }))
		require.Greater(t, tr.n.Load(), before)
	})
}

// TestCancelWhileWaiting: a caller waiting for the lock (WithWait(0), no
// server timeout) gives up when its context is canceled. The holder keeps
// the lock and commits; afterwards no waiter, lock or connection is left.
// Both queues: an exclusive wait queues in lockgen's queue
// (pgadvisory.waiter, holding no connection), a shared one in the server's.
func TestCancelWhileWaiting(t *testing.T) {
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		for _, queue := range []string{"lockgen_queue", "server_queue"} {
			t.Run(queue, func(t *testing.T) {
				ctx := testdb.Context(t)
				migrated.DB(t) // lockgen's queue is migration 00011's
				w := witness.New(t)
				door := frontdoor.Open(t, drv, frontdoor.MaxConns(failurePoolSize))
				key := testdb.Key(t)
				opts := []pgadvisory.Option{pgadvisory.WithWait(0)}
				// waiting counts the waiters of key in the queue under test.
				waiting := func() int { return queueRows(t, w.DB, key) }
				if queue == "server_queue" {
					opts = append(opts, pgadvisory.WithShared())
					waiting = func() int { return w.Locks(t, false, key) }
				}

				held, release := make(chan struct{}), make(chan struct{})
				released := false
				defer func() {
					// A failed assertion must not leave the holder holding
					// its connection: the pool's closing would report it.
					if !released {
						close(release)
					}
				}()
				holderDone := make(chan error, 1)
				go func() {
					holderDone <- door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
						if err := w.Mark(ctx, tx, "holder"); err != nil {
							return err
						}
						close(held)
						<-release
						return nil
					})
				}()
				frontdoor.Await(t, held, "the holder's lock")

				wctx, cancel := context.WithCancel(ctx)
				defer cancel()
				var called atomic.Bool
				waiterDone := make(chan error, 1)
				go func() {
					waiterDone <- door.RunExclusive(wctx, key, func(frontdoor.Tx) error { called.Store(true); return nil }, opts...)
				}()
				require.Eventually(t, func() bool { return waiting() == 1 }, 30*time.Second, 10*time.Millisecond,
					"the waiter is queued")
				cancel()
				err := frontdoor.Await(t, waiterDone, "the canceled waiter")
				require.ErrorIs(t, err, context.Canceled)
				require.False(t, called.Load())
				var pe *pgadvisory.Error
				require.ErrorAs(t, err, &pe)
				// A queued call takes a pool connection for each try, so the
				// cancel may find it connecting or beginning one.
				require.Contains(t, []pgadvisory.Op{pgadvisory.OpLock, pgadvisory.OpConnect, pgadvisory.OpBegin}, pe.Op)
				// No waiter is left to take the lock later: lockgen's queue
				// row is gone, and the server stops waiting for an abandoned
				// caller (pgx sends it a cancel request from a goroutine of its
				// own when it closes the connection).
				require.Eventually(t, func() bool { return waiting() == 0 && w.Locks(t, false, key) == 0 },
					30*time.Second, 10*time.Millisecond, "the abandoned waiter is still queued")

				// The holder is unaffected: it still holds the lock, then commits.
				require.False(t, w.LockFree(t, key))
				require.Equal(t, 1, w.Locks(t, true, key))
				released = true
				close(release)
				require.NoError(t, frontdoor.Await(t, holderDone, "the holder"))
				require.True(t, w.Committed(t, "holder"))

				require.Eventually(t, func() bool {
					return w.Locks(t, false, key) == 0 && w.Locks(t, true, key) == 0
				}, 30*time.Second, 10*time.Millisecond, "no waiter or holder left on the server")
				w.RequireClosing(t, door, witness.Closing{Next: "next-call"}, key)
			})
		}
	})
}

// TestCancelDuringQueuedCommit: the caller's context ends while a queued
// call's try that was not granted is writing its COMMIT (the one that
// keeps the call's row), on a connection that, as a TLS connection does,
// cannot write again once a write failed. The COMMIT is not interrupted:
// the call returns context.Canceled with its row gone and no connection
// left checked out or in a transaction. (Interrupted, the COMMIT never
// arrives and pgx cannot send Terminate: the server keeps the transaction
// and the row locked until pgx gives up on the connection, 15s later;
// wait_leave waits behind it, gives up after the check timeout and leaves
// the row to expire.)
func TestCancelDuringQueuedCommit(t *testing.T) {
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		migrated.DB(t) // lockgen's queue is migration 00011's
		w := witness.New(t)
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		cut := &commitCutter{cancel: cancel}
		key := testdb.Key(t)
		app := fmt.Sprintf("cut-commit-%d", key)
		door := frontdoor.Open(t, drv, frontdoor.MaxConns(failurePoolSize), frontdoor.Configure(cut.configure),
			frontdoor.Settings(map[string]string{"application_name": app}))

		held, release := make(chan struct{}), make(chan struct{})
		released := false
		defer func() {
			if !released {
				close(release)
			}
		}()
		holderDone := make(chan error, 1)
		go func() {
			holderDone <- door.RunExclusive(ctx, key, func(frontdoor.Tx) error { close(held); <-release; return nil })
		}()
		frontdoor.Await(t, held, "the holder's lock")

		waiterDone := make(chan error, 1)
		go func() {
			waiterDone <- door.RunExclusive(wctx, key, func(frontdoor.Tx) error { return nil }, pgadvisory.WithWait(0))
		}()
		require.Eventually(t, func() bool { return queueRows(t, w.DB, key) == 1 }, 30*time.Second, 10*time.Millisecond,
			"the waiter is queued")
		cut.armed.Store(true) // the next try's COMMIT cancels wctx as it is written
		err := frontdoor.Await(t, waiterDone, "the canceled waiter")
		require.ErrorIs(t, err, context.Canceled)
		require.False(t, cut.armed.Load(), "control: the canceled COMMIT was a not-granted try's")
		require.Zero(t, queueRows(t, w.DB, key), "the canceled waiter's row is gone when the call returns")
		require.Equal(t, 1, door.InUse(), "only the holder's connection is checked out")
		require.Zero(t, idleInTransaction(t, w, app), "no backend of the door but the holder's is in a transaction")

		released = true
		close(release)
		require.NoError(t, frontdoor.Await(t, holderDone, "the holder"))
		w.RequireClosing(t, door, witness.Closing{Next: "next-call"}, key)
	})
}

// idleInTransaction counts the backends of application app that are in a
// transaction and hold no advisory lock (a lock holder's are left out).
func idleInTransaction(t *testing.T, w *witness.Witness, app string) int {
	t.Helper()
	var n int
	require.NoError(t, w.DB.QueryRow(`SELECT count(*) FROM pg_catalog.pg_stat_activity a
WHERE a.application_name = $1 AND a.state LIKE 'idle in transaction%'
  AND NOT EXISTS (SELECT FROM pg_catalog.pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory' AND l.granted)`, app).Scan(&n))
	return n
}

// commitCutter cuts a COMMIT: once armed, the first simple-protocol COMMIT
// a connection writes calls cancel before the write, and the write waits
// (at most a second) for the connection's deadline to be set by the
// cancellation, as if ctx had ended while the bytes were on their way. A
// connection whose write failed fails every later write, as TLS does.
type commitCutter struct {
	armed  atomic.Bool
	cancel context.CancelFunc
}

func (c *commitCutter) configure(cfg *pgx.ConnConfig) {
	cfg.AfterNetConnect = func(_ context.Context, _ *pgconn.Config, conn net.Conn) (net.Conn, error) {
		return &cutConn{Conn: conn, cut: c, deadline: make(chan struct{})}, nil
	}
}

type cutConn struct {
	net.Conn
	cut      *commitCutter
	deadline chan struct{} // closed once a deadline in the past was set
	once     sync.Once
	mu       sync.Mutex
	broken   error
}

// commitMsg is the simple-protocol Query message "commit".
var commitMsg = append([]byte{'Q', 0, 0, 0, 11}, "commit\x00"...)

func (c *cutConn) Write(b []byte) (int, error) {
	if bytes.Equal(b, commitMsg) && c.cut.armed.CompareAndSwap(true, false) {
		c.cut.cancel()
		select {
		case <-c.deadline:
		case <-time.After(time.Second): // the COMMIT does not watch the canceled context
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken != nil {
		return 0, c.broken
	}
	n, err := c.Conn.Write(b)
	if err != nil {
		c.broken = err
	}
	return n, err
}

func (c *cutConn) SetDeadline(t time.Time) error {
	if !t.IsZero() && !t.After(time.Now()) {
		c.once.Do(func() { close(c.deadline) })
	}
	return c.Conn.SetDeadline(t)
}

// TestCancelDeadlineInFn: the deadline passes while fn is blocked, either in
// a statement (pg_sleep) or on ctx itself. The error wraps
// context.DeadlineExceeded and nothing is committed.
func TestCancelDeadlineInFn(t *testing.T) {
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		for _, blockedOn := range []string{"pg_sleep", "ctx"} {
			t.Run(blockedOn, func(t *testing.T) {
				w := witness.New(t)
				door := frontdoor.Open(t, drv, frontdoor.MaxConns(failurePoolSize))
				key := testdb.Key(t)
				ctx := newManualDeadline(testdb.Context(t))
				var pid int64
				err := door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
					require.NoError(t, w.Mark(ctx, tx, "deadline"))
					var err error
					pid, err = tx.QueryInt(ctx, "SELECT pg_backend_pid()")
					require.NoError(t, err)
					if blockedOn == "ctx" {
						ctx.expire()
						<-ctx.Done()
						return ctx.Err()
					}
					go func() {
						// Expire once the server is running the sleep.
						for !w.Sleeping(pid) {
							time.Sleep(5 * time.Millisecond)
						}
						ctx.expire()
					}()
					return tx.Exec(ctx, "SELECT pg_sleep(60)")
				})
				require.ErrorIs(t, err, context.DeadlineExceeded)
				var pe *pgadvisory.Error
				require.ErrorAs(t, err, &pe)
				require.Equal(t, pgadvisory.OpFn, pe.Op)
				// The lock may outlive the call briefly: database/sql rolls a
				// canceled transaction back on a goroutine of its own, and pgx,
				// when a statement was in flight, closes the connection and
				// cancels the statement from a goroutine of its own
				// (TestCancelServerSide shows how to have it gone before).
				w.RequireClosing(t, door, witness.Closing{Mark: "deadline", Late: true, Next: "next-call"}, key)
			})
		}
	})
}

// TestCancelFnReturnsNilAfterCancel: fn returns nil, but the context was
// canceled meanwhile: the work is rolled back and the error wraps ctx.Err().
func TestCancelFnReturnsNilAfterCancel(t *testing.T) {
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		w := witness.New(t)
		door := frontdoor.Open(t, drv, frontdoor.MaxConns(failurePoolSize))
		key := testdb.Key(t)
		ctx, cancel := context.WithCancel(testdb.Context(t))
		err := door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
			require.NoError(t, w.Mark(ctx, tx, "canceled"))
			cancel()
			return nil
		})
		require.ErrorIs(t, err, context.Canceled)
		require.True(t, errors.Is(err, ctx.Err()))
		var pe *pgadvisory.Error
		require.ErrorAs(t, err, &pe)
		require.Equal(t, pgadvisory.OpFn, pe.Op)
		// database/sql rolls back a canceled transaction on a goroutine of
		// its own, which may still be at work when the call returns.
		w.RequireClosing(t, door, witness.Closing{Mark: "canceled", Late: true, Next: "next-call"}, key)
	})
}

// TestCancelServerSide: with pgx's CancelRequestContextWatcherHandler, a
// caller whose context ends while the server works for it (waiting for the
// lock, or running a statement in fn) leaves nothing behind on the server
// when the call returns: no queued waiter, no lock. (With pgx's default the
// same cleanup happens shortly after the call returns:
// TestCancelWhileWaiting, TestCancelDeadlineInFn.)
func TestCancelServerSide(t *testing.T) {
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		t.Run("waiting", func(t *testing.T) {
			ctx := testdb.Context(t)
			w := witness.New(t)
			door := serverQueue(frontdoor.Open(t, drv, frontdoor.MaxConns(failurePoolSize), frontdoor.Configure(cancelOnServer)))
			key, other := testdb.Key(t), testdb.Key(t)
			held, release := make(chan struct{}), make(chan struct{})
			holderDone := make(chan error, 1)
			go func() {
				holderDone <- door.RunExclusive(ctx, key, func(frontdoor.Tx) error { close(held); <-release; return nil })
			}()
			frontdoor.Await(t, held, "the holder's lock")
			released := false
			defer func() {
				if !released {
					close(release)
				}
			}()

			wctx, cancel := context.WithCancel(ctx)
			waiterDone := make(chan error, 1)
			go func() {
				// The Locker waits in the server's queue, as on a database
				// without migration 00011 (in lockgen's queue a waiter
				// holds no connection: TestCancelWhileWaiting/lockgen_queue).
				waiterDone <- door.RunExclusive(wctx, key, func(frontdoor.Tx) error { return nil }, pgadvisory.WithWait(0), pgadvisory.WithLocks(other))
			}()
			require.Eventually(t, func() bool { return w.Locks(t, false, key) == 1 }, 30*time.Second, 10*time.Millisecond)
			cancel()
			require.ErrorIs(t, frontdoor.Await(t, waiterDone, "the canceled waiter"), context.Canceled)
			require.Zero(t, w.Locks(t, false, key), "the server stopped waiting before the call returned")
			require.Equal(t, 1, w.Locks(t, true, key), "the holder is unaffected")
			released = true
			close(release)
			require.NoError(t, frontdoor.Await(t, holderDone, "the holder"))
			w.RequireClosing(t, door, witness.Closing{Next: "next-call"}, key)
		})
		t.Run("pg_sleep", func(t *testing.T) {
			w := witness.New(t)
			door := frontdoor.Open(t, drv, frontdoor.MaxConns(failurePoolSize), frontdoor.Configure(cancelOnServer))
			key := testdb.Key(t)
			ctx := newManualDeadline(testdb.Context(t))
			err := door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
				require.NoError(t, w.Mark(ctx, tx, "sleeping"))
				pid, err := tx.QueryInt(ctx, "SELECT pg_backend_pid()")
				require.NoError(t, err)
				go func() {
					for !w.Sleeping(pid) {
						time.Sleep(5 * time.Millisecond)
					}
					ctx.expire()
				}()
				return tx.Exec(ctx, "SELECT pg_sleep(60)")
			})
			require.ErrorIs(t, err, context.DeadlineExceeded)
			sqlstate.Require(t, err, "57014", "the server canceled the statement")
			require.True(t, w.LockFree(t, key), "the server stopped the statement and rolled back before the call returned")
			w.RequireClosing(t, door, witness.Closing{Mark: "sleeping", Next: "next-call"}, key)
		})
	})
}

// statementCounter is a pgx tracer that counts the statements and batches a
// pool sends.
type statementCounter struct{ n atomic.Int64 }

func (tr *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	tr.n.Add(1)
	return ctx
}

func (tr *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (tr *statementCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	tr.n.Add(1)
	return ctx
}

func (tr *statementCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (tr *statementCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// manualDeadline is a context whose deadline passes when the test calls
// expire: a real timer could fire before fn even started on a slow machine.
type manualDeadline struct {
	context.Context // parent, for values
	done            chan struct{}
	once            sync.Once
}

func newManualDeadline(parent context.Context) *manualDeadline {
	return &manualDeadline{Context: parent, done: make(chan struct{})}
}

func (c *manualDeadline) Done() <-chan struct{} { return c.done }

func (c *manualDeadline) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

func (c *manualDeadline) expire() { c.once.Do(func() { close(c.done) }) }

// cancelOnServer makes pgx send a cancel request when a context ends and
// wait for the server's answer, instead of closing the connection and
// cancelling in the background (pgx's default).
func cancelOnServer(c *pgx.ConnConfig) {
	c.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, DeadlineDelay: 30 * time.Second}
	}
}
