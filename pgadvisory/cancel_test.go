package pgadvisory_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Cancelation tests: a context that is done before the call, while it waits
// for the lock, while fn runs, or by the time fn returns. The call must end,
// its error must wrap ctx.Err(), nothing may be committed and nothing may
// stay checked out or locked. Helpers (fm*) are in failures_test.go.

// fmTracer counts the statements and batches a pool sends.
type fmTracer struct{ n atomic.Int64 }

func (tr *fmTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	tr.n.Add(1)
	return ctx
}

func (tr *fmTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (tr *fmTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	tr.n.Add(1)
	return ctx
}

func (tr *fmTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (tr *fmTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// fmDeadlineCtx is a context whose deadline passes when the test calls
// expire: a real timer could fire before fn even started on a slow machine.
type fmDeadlineCtx struct {
	context.Context // parent, for values
	done            chan struct{}
	once            sync.Once
}

func fmNewDeadlineCtx(parent context.Context) *fmDeadlineCtx {
	return &fmDeadlineCtx{Context: parent, done: make(chan struct{})}
}

func (c *fmDeadlineCtx) Done() <-chan struct{} { return c.done }

func (c *fmDeadlineCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

func (c *fmDeadlineCtx) expire() { c.once.Do(func() { close(c.done) }) }

// fmAwait waits for a call's result, failing the test if it never comes.
func fmAwait(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not return", what)
		return nil
	}
}

// TestCancelBeforeCall: a context already canceled: fn is not called, the
// error wraps context.Canceled and not a single statement is sent.
func TestCancelBeforeCall(t *testing.T) {
	for _, name := range fmDoorNames {
		t.Run(name, func(t *testing.T) {
			tr := &fmTracer{}
			door := fmOpen(t, name, func(c *pgx.ConnConfig) { c.Tracer = tr })
			key := testdb.Key(t)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			before := tr.n.Load()
			called := false
			err := door.run(ctx, key, func(fmTx) error { called = true; return nil })
			require.ErrorIs(t, err, context.Canceled)
			require.False(t, called)
			var pe *pgadvisory.Error
			require.ErrorAs(t, err, &pe)
			require.Equal(t, "begin", pe.Op)
			require.Equal(t, before, tr.n.Load(), "no statement was sent")
			require.Zero(t, door.inUse())

			// Control: the tracer does see a call's statements.
			require.NoError(t, door.run(context.Background(), key, func(fmTx) error { return nil }))
			require.Greater(t, tr.n.Load(), before)
		})
	}
}

// TestCancelWhileWaiting: a caller waiting for the lock (WithWait(0), no
// server timeout) gives up when its context is canceled. The holder keeps
// the lock and commits; afterwards no waiter, lock or connection is left.
func TestCancelWhileWaiting(t *testing.T) {
	for _, name := range fmDoorNames {
		t.Run(name, func(t *testing.T) {
			ctx := fmContext(t)
			e := fmNewEnv(t)
			door := fmOpen(t, name, nil)
			key := testdb.Key(t)

			held, release := make(chan struct{}), make(chan struct{})
			holderDone := make(chan error, 1)
			go func() {
				holderDone <- door.run(ctx, key, func(tx fmTx) error {
					if err := e.mark(ctx, tx, "holder"); err != nil {
						return err
					}
					close(held)
					<-release
					return nil
				})
			}()
			<-held

			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			var called atomic.Bool
			waiterDone := make(chan error, 1)
			go func() {
				waiterDone <- door.run(wctx, key, func(fmTx) error { called.Store(true); return nil }, pgadvisory.WithWait(0))
			}()
			require.Eventually(t, func() bool { return e.lockEntries(t, key, false) == 1 }, 30*time.Second, 10*time.Millisecond,
				"the waiter is queued on the server")
			cancel()
			err := fmAwait(t, waiterDone, "the canceled waiter")
			require.ErrorIs(t, err, context.Canceled)
			require.False(t, called.Load())
			var pe *pgadvisory.Error
			require.ErrorAs(t, err, &pe)
			require.Equal(t, "lock", pe.Op)
			// The server stops waiting for the abandoned caller (pgx sends it a
			// cancel request from a goroutine of its own when it closes the
			// connection): no waiter is left to take the lock later.
			require.Eventually(t, func() bool { return e.lockEntries(t, key, false) == 0 }, 30*time.Second, 10*time.Millisecond,
				"the abandoned waiter is still queued on the server")

			// The holder is unaffected: it still holds the lock, then commits.
			require.False(t, e.lockFree(t, key))
			require.Equal(t, 1, e.lockEntries(t, key, true))
			close(release)
			require.NoError(t, fmAwait(t, holderDone, "the holder"))
			require.True(t, e.committed(t, "holder"))

			require.Eventually(t, func() bool {
				return e.lockEntries(t, key, false) == 0 && e.lockEntries(t, key, true) == 0
			}, 30*time.Second, 10*time.Millisecond, "no waiter or holder left on the server")
			require.True(t, e.lockFree(t, key))
			fmRequireNoLeak(t, door)
			fmRequireUsable(t, e, door, key, "next-call")
		})
	}
}

// TestCancelDeadlineInFn: the deadline passes while fn is blocked, either in
// a statement (pg_sleep) or on ctx itself. The error wraps
// context.DeadlineExceeded and nothing is committed.
func TestCancelDeadlineInFn(t *testing.T) {
	for _, name := range fmDoorNames {
		for _, blockedOn := range []string{"pg_sleep", "ctx"} {
			t.Run(name+"/"+blockedOn, func(t *testing.T) {
				e := fmNewEnv(t)
				door := fmOpen(t, name, nil)
				key := testdb.Key(t)
				ctx := fmNewDeadlineCtx(fmContext(t))
				var pid int64
				err := door.run(ctx, key, func(tx fmTx) error {
					require.NoError(t, e.mark(ctx, tx, "deadline"))
					var err error
					pid, err = tx.queryInt(ctx, "SELECT pg_backend_pid()")
					require.NoError(t, err)
					if blockedOn == "ctx" {
						ctx.expire()
						<-ctx.Done()
						return ctx.Err()
					}
					go func() {
						// Expire once the server is running the sleep.
						for !e.sleeping(t, pid) {
							time.Sleep(5 * time.Millisecond)
						}
						ctx.expire()
					}()
					return tx.exec(ctx, "SELECT pg_sleep(60)")
				})
				require.ErrorIs(t, err, context.DeadlineExceeded)
				var pe *pgadvisory.Error
				require.ErrorAs(t, err, &pe)
				require.Equal(t, "fn", pe.Op)
				require.False(t, e.committed(t, "deadline"))
				fmRequireNoLeak(t, door)
				// The lock may outlive the call briefly: database/sql rolls a
				// canceled transaction back on a goroutine of its own, and pgx,
				// when a statement was in flight, closes the connection and
				// cancels the statement from a goroutine of its own
				// (TestCancelServerSide shows how to have it gone before).
				require.Eventually(t, func() bool { return e.lockFree(t, key) }, 30*time.Second, 10*time.Millisecond)
				require.False(t, e.committed(t, "deadline"))
			})
		}
	}
}

// sleeping reports whether backend pid is running pg_sleep.
func (e *fmEnv) sleeping(t *testing.T, pid int64) bool {
	var n int
	err := e.obs.QueryRow(`SELECT count(*) FROM pg_catalog.pg_stat_activity
		WHERE pid = $1 AND state = 'active' AND query LIKE '%pg_sleep%'`, pid).Scan(&n)
	return err == nil && n == 1
}

// TestCancelFnReturnsNilAfterCancel: fn returns nil, but the context was
// canceled meanwhile: the work is rolled back and the error wraps ctx.Err().
func TestCancelFnReturnsNilAfterCancel(t *testing.T) {
	for _, name := range fmDoorNames {
		t.Run(name, func(t *testing.T) {
			e := fmNewEnv(t)
			door := fmOpen(t, name, nil)
			key := testdb.Key(t)
			ctx, cancel := context.WithCancel(fmContext(t))
			err := door.run(ctx, key, func(tx fmTx) error {
				require.NoError(t, e.mark(ctx, tx, "canceled"))
				cancel()
				return nil
			})
			require.ErrorIs(t, err, context.Canceled)
			require.True(t, errors.Is(err, ctx.Err()))
			var pe *pgadvisory.Error
			require.ErrorAs(t, err, &pe)
			require.Equal(t, "fn", pe.Op)
			require.False(t, e.committed(t, "canceled"))
			// database/sql rolls back a canceled transaction on a goroutine of
			// its own, which may still be at work when the call returns.
			require.Eventually(t, func() bool { return e.lockFree(t, key) }, 30*time.Second, 10*time.Millisecond)
			fmRequireNoLeak(t, door)
			fmRequireUsable(t, e, door, key, "next-call")
		})
	}
}

// fmCancelRequest makes pgx send a cancel request when a context ends and
// wait for the server's answer, instead of closing the connection and
// cancelling in the background (pgx's default).
func fmCancelRequest(c *pgx.ConnConfig) {
	c.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, DeadlineDelay: 30 * time.Second}
	}
}

// TestCancelServerSide: with pgx's CancelRequestContextWatcherHandler, a
// caller whose context ends while the server works for it (waiting for the
// lock, or running a statement in fn) leaves nothing behind on the server
// when the call returns: no queued waiter, no lock. (With pgx's default the
// same cleanup happens shortly after the call returns:
// TestCancelWhileWaiting, TestCancelDeadlineInFn.)
func TestCancelServerSide(t *testing.T) {
	for _, name := range fmDoorNames {
		t.Run(name+"/waiting", func(t *testing.T) {
			ctx := fmContext(t)
			e := fmNewEnv(t)
			door := fmOpen(t, name, fmCancelRequest)
			key := testdb.Key(t)
			held, release := make(chan struct{}), make(chan struct{})
			holderDone := make(chan error, 1)
			go func() {
				holderDone <- door.run(ctx, key, func(fmTx) error { close(held); <-release; return nil })
			}()
			<-held
			released := false
			defer func() {
				if !released {
					close(release)
				}
			}()

			wctx, cancel := context.WithCancel(ctx)
			waiterDone := make(chan error, 1)
			go func() {
				waiterDone <- door.run(wctx, key, func(fmTx) error { return nil }, pgadvisory.WithWait(0))
			}()
			require.Eventually(t, func() bool { return e.lockEntries(t, key, false) == 1 }, 30*time.Second, 10*time.Millisecond)
			cancel()
			require.ErrorIs(t, fmAwait(t, waiterDone, "the canceled waiter"), context.Canceled)
			require.Zero(t, e.lockEntries(t, key, false), "the server stopped waiting before the call returned")
			require.Equal(t, 1, e.lockEntries(t, key, true), "the holder is unaffected")
			released = true
			close(release)
			require.NoError(t, fmAwait(t, holderDone, "the holder"))
			fmRequireNoLeak(t, door)
		})
		t.Run(name+"/pg_sleep", func(t *testing.T) {
			e := fmNewEnv(t)
			door := fmOpen(t, name, fmCancelRequest)
			key := testdb.Key(t)
			ctx := fmNewDeadlineCtx(fmContext(t))
			err := door.run(ctx, key, func(tx fmTx) error {
				require.NoError(t, e.mark(ctx, tx, "sleeping"))
				pid, err := tx.queryInt(ctx, "SELECT pg_backend_pid()")
				require.NoError(t, err)
				go func() {
					for !e.sleeping(t, pid) {
						time.Sleep(5 * time.Millisecond)
					}
					ctx.expire()
				}()
				return tx.exec(ctx, "SELECT pg_sleep(60)")
			})
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.Equal(t, "57014", pgadvisory.SQLState(err), "the server canceled the statement")
			require.True(t, e.lockFree(t, key), "the server stopped the statement and rolled back before the call returned")
			require.False(t, e.committed(t, "sleeping"))
			fmRequireNoLeak(t, door)
			fmRequireUsable(t, e, door, key, "next-call")
		})
	}
}
