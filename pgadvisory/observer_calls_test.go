package pgadvisory_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// An Observer follows each call from its start, with the caller's context,
// to its end, with an outcome: acquired, locked, timeout, lost or error,
// mapped from the call's own error with errors.Is. A nested call's error
// that fn returns is not the outer call's outcome (the control: the same
// error from the outer call itself is). The context the observer returns
// is the call's context from then on: its statements and a session's fn
// see it.

func TestCallObserverOutcomes(t *testing.T) {
	frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
		ctx := testdb.Context(t)
		key := testdb.Key(t)
		var log callLog
		observe := pgadvisory.WithCallObserver(&log)

		t.Run("acquired", func(t *testing.T) {
			require.NoError(t, door.RunExclusive(ctx, key, noop, observe))
			c := log.only(t)
			require.Equal(t, pgadvisory.Call{Kind: pgadvisory.CallExclusive, LockIDs: []int64{key}}, c.call)
			require.Equal(t, []pgadvisory.EventKind{pgadvisory.EventAcquired, pgadvisory.EventReleased}, kinds(c.events))
			require.Equal(t, pgadvisory.OutcomeAcquired, c.end.Outcome)
			require.NoError(t, c.end.Err)
			require.Positive(t, c.end.Wait)
			require.Positive(t, c.end.Held)
			require.Equal(t, c.events[0].Wait, c.end.Wait)
			require.Equal(t, c.events[1].Held, c.end.Held)
			require.False(t, c.end.AlreadyDone)
			require.NoError(t, c.end.Rejection)
		})

		t.Run("fn fails: still acquired", func(t *testing.T) {
			boom := errors.New("boom")
			require.ErrorIs(t, door.RunExclusive(ctx, key, func(frontdoor.Tx) error { return boom }, observe), boom)
			c := log.only(t)
			require.Equal(t, pgadvisory.OutcomeAcquired, c.end.Outcome)
			require.ErrorIs(t, c.end.Err, boom)
			require.Positive(t, c.end.Held)
		})

		t.Run("locked", func(t *testing.T) {
			release := door.Hold(t, key, nil)
			require.ErrorIs(t, door.RunExclusive(ctx, key, txNotCalled(t), observe), pgadvisory.ErrLocked)
			require.NoError(t, release())
			c := log.only(t)
			require.Equal(t, []pgadvisory.EventKind{pgadvisory.EventContended}, kinds(c.events))
			require.Equal(t, pgadvisory.OutcomeLocked, c.end.Outcome)
			require.ErrorIs(t, c.end.Err, pgadvisory.ErrLocked)
			require.Positive(t, c.end.Wait, "the refusal is an answer")
			require.Equal(t, c.events[0].Wait, c.end.Wait)
			require.Zero(t, c.end.Held)
		})

		t.Run("timeout", func(t *testing.T) {
			release := door.Hold(t, key, nil)
			err := door.RunExclusive(ctx, key, txNotCalled(t), observe, pgadvisory.WithWait(20*time.Millisecond))
			require.ErrorIs(t, err, pgadvisory.ErrLockTimeout)
			require.NoError(t, release())
			c := log.only(t)
			require.Equal(t, pgadvisory.OutcomeTimeout, c.end.Outcome)
			require.GreaterOrEqual(t, c.end.Wait, 20*time.Millisecond, "the server waited lock_timeout")
			require.Zero(t, c.end.Held)
		})

		t.Run("error", func(t *testing.T) {
			canceled, cancel := context.WithCancel(ctx)
			cancel()
			require.ErrorIs(t, door.RunExclusive(canceled, key, txNotCalled(t), observe), context.Canceled)
			c := log.only(t)
			require.Equal(t, []pgadvisory.EventKind{pgadvisory.EventError}, kinds(c.events))
			require.Equal(t, pgadvisory.OutcomeError, c.end.Outcome)
			require.Zero(t, c.end.Wait, "no answer came")
		})

		t.Run("nested ErrLocked is fn's, not the call's", func(t *testing.T) {
			other := testdb.Key(t)
			release := door.Hold(t, other, nil)
			err := door.RunExclusive(ctx, key, func(frontdoor.Tx) error {
				return door.RunExclusive(ctx, other, txNotCalled(t), observe)
			}, observe)
			require.NoError(t, release())
			require.ErrorIs(t, err, pgadvisory.ErrLocked)
			calls := log.take()
			require.Len(t, calls, 2)
			outer, inner := calls[0], calls[1]
			require.Equal(t, []int64{key}, outer.call.LockIDs)
			require.Equal(t, pgadvisory.OutcomeAcquired, outer.end.Outcome, "the outer call held its lock")
			require.ErrorIs(t, outer.end.Err, pgadvisory.ErrLocked)
			require.Equal(t, pgadvisory.OutcomeLocked, inner.end.Outcome)
		})

		t.Run("fn panics", func(t *testing.T) {
			require.PanicsWithValue(t, "boom", func() {
				_ = door.RunExclusive(ctx, key, func(frontdoor.Tx) error { panic("boom") }, observe)
			})
			c := log.only(t)
			require.Equal(t, 1, c.ends)
			require.Equal(t, pgadvisory.OutcomeAcquired, c.end.Outcome)
			require.ErrorContains(t, c.end.Err, "fn panicked")
		})

		t.Run("refused before the start: not observed", func(t *testing.T) {
			require.ErrorIs(t, door.RunExclusive(ctx, key, noop, observe, pgadvisory.WithWait(-time.Second)), pgadvisory.ErrInvalidArgument)
			require.ErrorIs(t, door.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error { return nil }, observe, pgadvisory.WithFencing()),
				pgadvisory.ErrInvalidArgument)
			require.ErrorIs(t, door.RunOnce(ctx, key, "", noop, observe), pgadvisory.ErrInvalidArgument)
			require.Empty(t, log.take())
		})

		t.Run("the observer's context is the call's", func(t *testing.T) {
			tr := &queryTracer{}
			traced := frontdoor.Open(t, door.Driver, frontdoor.Configure(func(cc *pgx.ConnConfig) { cc.Tracer = tr }))
			require.NoError(t, traced.RunExclusive(ctx, key, noop, observe))
			c := log.only(t)
			lockQueries := tr.matching("pg_try_advisory_xact_lock")
			require.NotEmpty(t, lockQueries, "the lock statement was traced")
			for _, q := range lockQueries {
				require.Same(t, c, q.call, "the lock statement ran with the observer's context")
			}

			// Control: without an observer the statements carry the caller's context.
			tr.reset()
			require.NoError(t, traced.RunExclusive(ctx, key, noop))
			for _, q := range tr.matching("pg_try_advisory_xact_lock") {
				require.Nil(t, q.call)
			}
		})
	})
}

func TestCallObserverSession(t *testing.T) {
	frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
		ctx := testdb.Context(t)
		w := witness.New(t)
		key := testdb.Key(t)
		var log callLog
		observe := pgadvisory.WithCallObserver(&log)

		t.Run("acquired, fn's context from the observer", func(t *testing.T) {
			var inFn *loggedCall
			require.NoError(t, door.RunSession(ctx, pgadvisory.ID(key), func(ctx context.Context) error {
				inFn, _ = ctx.Value(loggedCallKey{}).(*loggedCall)
				return nil
			}, observe))
			c := log.only(t)
			require.Same(t, c, inFn, "fn's context derives from the observer's")
			require.Equal(t, pgadvisory.CallSession, c.call.Kind)
			require.Equal(t, pgadvisory.OutcomeAcquired, c.end.Outcome)
			require.Positive(t, c.end.Held)
		})

		t.Run("lost", func(t *testing.T) {
			err := door.RunSession(ctx, pgadvisory.ID(key), func(fnCtx context.Context) error {
				require.True(t, w.BackendAlive(t, int64(w.Holder(t, key).PID)))
				// On the test's ctx: fn's may end as soon as the backend
				// is gone, before this statement's answer is read.
				_, err := testdb.DB(t).ExecContext(ctx, "SELECT pg_terminate_backend($1)", w.Holder(t, key).PID)
				require.NoError(t, err)
				<-fnCtx.Done()
				return context.Cause(fnCtx)
			}, observe, pgadvisory.WithCheckInterval(50*time.Millisecond))
			require.ErrorIs(t, err, pgadvisory.ErrLockLost)
			c := log.only(t)
			require.Equal(t, pgadvisory.OutcomeLost, c.end.Outcome)
			require.Equal(t, []pgadvisory.EventKind{pgadvisory.EventAcquired, pgadvisory.EventError, pgadvisory.EventReleased}, kinds(c.events))
			require.Eventually(t, func() bool { return w.LockFree(t, key) }, 30*time.Second, 20*time.Millisecond)
		})

		t.Run("locked", func(t *testing.T) {
			release := door.Hold(t, key, nil)
			require.ErrorIs(t, door.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error { return nil }, observe), pgadvisory.ErrLocked)
			require.NoError(t, release())
			c := log.only(t)
			require.Equal(t, pgadvisory.OutcomeLocked, c.end.Outcome)
			require.True(t, c.events[0].Session)
		})
	})
}

func TestCallObserverRunOnce(t *testing.T) {
	migrated.DB(t)
	frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
		ctx := testdb.Context(t)
		key := testdb.Key(t)
		lock := pgadvisory.Lock{Name: "reports.observed", ID: key}
		var log callLog
		observe := pgadvisory.WithCallObserver(&log)
		window := fmt.Sprintf("window-%d", key)

		require.NoError(t, door.RunOnceLock(ctx, lock, window, noop, observe))
		c := log.only(t)
		require.Equal(t, pgadvisory.Call{Kind: pgadvisory.CallOnce, Name: lock.Name, LockIDs: []int64{key}, Window: window}, c.call)
		require.Equal(t, pgadvisory.OutcomeAcquired, c.end.Outcome)
		require.False(t, c.end.AlreadyDone)

		// The window is done: the lock was granted, the ledger said so.
		require.ErrorIs(t, door.RunOnceLock(ctx, lock, window, txNotCalled(t), observe), pgadvisory.ErrAlreadyDone)
		c = log.only(t)
		require.Equal(t, pgadvisory.OutcomeAcquired, c.end.Outcome)
		require.True(t, c.end.AlreadyDone)
		require.ErrorIs(t, c.end.Err, pgadvisory.ErrAlreadyDone)
		require.Positive(t, c.end.Wait)

		// Control: a fenced call reports its token from the grant on.
		var token int64
		require.NoError(t, door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
			var ok bool
			token, ok = tx.FencingToken()
			require.True(t, ok)
			return nil
		}, observe, pgadvisory.WithFencing()))
		c = log.only(t)
		require.True(t, c.call.Fencing)
		require.Positive(t, token)
		for _, e := range c.events {
			require.Equal(t, token, e.Token, "%s", e.Kind)
		}
	})
}

// txNotCalled is a transaction fn that fails the test if it is called.
func txNotCalled(t *testing.T) func(frontdoor.Tx) error {
	return func(frontdoor.Tx) error {
		t.Error("fn was called")
		return nil
	}
}

// callLog is an Observer that records every call it follows.
type callLog struct {
	mu    sync.Mutex
	calls []*loggedCall
	// keys, if set, limits the log to calls on these lock IDs (observers
	// set for the whole process see other tests' calls too).
	keys []int64
}

// loggedCall is one call as the log saw it; it is also the call's
// CallObserver, and the value the call's context carries.
type loggedCall struct {
	log    *callLog
	call   pgadvisory.Call
	events []pgadvisory.Event
	end    pgadvisory.CallEnd
	ends   int
}

type loggedCallKey struct{}

func (l *callLog) StartCall(ctx context.Context, call pgadvisory.Call) (context.Context, pgadvisory.CallObserver) {
	if l.keys != nil && !overlaps(l.keys, call.LockIDs) {
		return ctx, nil
	}
	c := &loggedCall{log: l, call: call}
	l.mu.Lock()
	l.calls = append(l.calls, c)
	l.mu.Unlock()
	return context.WithValue(ctx, loggedCallKey{}, c), c
}

func (c *loggedCall) Event(e pgadvisory.Event) {
	c.log.mu.Lock()
	defer c.log.mu.Unlock()
	c.events = append(c.events, e)
}

func (c *loggedCall) EndCall(end pgadvisory.CallEnd) {
	c.log.mu.Lock()
	defer c.log.mu.Unlock()
	c.end = end
	c.ends++
}

// take returns the calls so far and forgets them.
func (l *callLog) take() []*loggedCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	calls := l.calls
	l.calls = nil
	return calls
}

// only returns the one call so far, which has ended once, and forgets it.
func (l *callLog) only(t *testing.T) *loggedCall {
	t.Helper()
	calls := l.take()
	require.Len(t, calls, 1)
	require.Equal(t, 1, calls[0].ends, "EndCall exactly once")
	return calls[0]
}

func overlaps(a, b []int64) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}

// queryTracer is a pgx tracer (queries and batches) that records each
// statement with the loggedCall its context carries, if any.
type queryTracer struct {
	mu      sync.Mutex
	queries []tracedQuery
}

type tracedQuery struct {
	sql  string
	call *loggedCall
}

func (q *queryTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	c, _ := ctx.Value(loggedCallKey{}).(*loggedCall)
	q.mu.Lock()
	q.queries = append(q.queries, tracedQuery{sql: data.SQL, call: c})
	q.mu.Unlock()
	return ctx
}

func (q *queryTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// The pgx front door sends BEGIN and the lock statement as a batch.

func (q *queryTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (q *queryTracer) TraceBatchQuery(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchQueryData) {
	q.TraceQueryStart(ctx, conn, pgx.TraceQueryStartData{SQL: data.SQL, Args: data.Args})
}

func (q *queryTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (q *queryTracer) matching(substr string) []tracedQuery {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []tracedQuery
	for _, tq := range q.queries {
		if strings.Contains(tq.sql, substr) {
			out = append(out, tq)
		}
	}
	return out
}

func (q *queryTracer) reset() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.queries = nil
}
