package pgadvisory

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Session-lock waiters of a Locker without shared session connections
// (WithSessionConns(0)), in lockgen's queue too.
//
// Such a Locker takes each session lock on a connection of its own. A
// waiting call (RunSession with WithWait, on a set or shared too; Lead,
// Campaign) does not wait on that connection in the server's queue: each
// try takes a pool connection, checks it as any session lock's connection
// is checked (a pooler, a standby; statement_timeout is not lifted, since
// no statement waits), and runs the queued try statement of the shared
// connections (sessionQueueTry: wait_try, and pg_try_advisory_lock on
// the same backend once wait_try granted). Not granted, the connection
// goes back to the pool and the call sleeps until it is woken or its
// heartbeat passes; granted, the connection is the lock's, as it would be
// after a wait in the server's queue, and its release wakes the queue's
// head (unlockSQL with queuedSession).

// queuedLockSession takes c's lock through lockgen's queue on a connection
// of its own from acquire; on success the lock is held on the returned
// connection. A wait that ends without the lock leaves the queue. A
// database without the queue makes the Locker wait in the server's queue
// from then on, and a session whose transactions are read-only by default
// makes this call wait there (readOnlyByDefault): the connection is
// returned unlocked (fallback true), for the caller to give back before it
// waits there.
func (c *callState) queuedLockSession(ctx context.Context, acquire func(context.Context) (sessionConn, error), start time.Time) (conn sessionConn, fallback bool, err error) {
	w := c.newSessionQueueWait(start)
	defer w.close()
	for {
		conn, err := acquire(ctx)
		if err != nil {
			c.leaveQueueOn(ctx, acquire, w.q)
			return nil, false, c.failure(ctx, "begin", poolWaitError(ctx, err))
		}
		s, err := c.openSessionFor(ctx, conn, false)
		if err != nil {
			c.leaveQueueOn(ctx, acquire, w.q)
			return nil, false, err
		}
		granted, err := c.queueTryOn(ctx, conn, s, w.q)
		if err != nil {
			if !w.q.seq.Valid && noQueueSchema(err) {
				// No queue in this database: wait in the server's. The try
				// failed, so its transaction took nothing.
				c.locker.noQueue.Store(true)
				return conn, true, nil
			}
			if readOnlyByDefault(w.q, err) {
				// This call waits in the server's (see readOnlyByDefault).
				c.serverQueue = true
				return conn, true, nil
			}
			if serializationFailure(err) {
				if err = w.retry(ctx); err == nil {
					continue // queueTryOn gave the connection back
				}
			}
			c.leaveQueueOn(ctx, acquire, w.q)
			return nil, false, err
		}
		if granted {
			c.queuedSession = true
			c.grantedQueued()
			return conn, false, nil
		}
		conn.release()
		if err := w.pause(ctx); err != nil {
			c.leaveQueueOn(ctx, acquire, w.q)
			return nil, false, err
		}
	}
}

// queueTryOn is one try of a queued session lock on conn, a connection of
// its own (see queuedLockSession): granted, the lock is held on conn.
// Not granted, q has the call's place. On error conn has been released
// or discarded, except for a database without the queue (noQueueSchema),
// when it is left as it was for the server's queue.
func (c *callState) queueTryOn(ctx context.Context, conn sessionConn, s openedSession, q *queueState) (granted bool, err error) {
	var ok, standby bool
	var pid int32
	var seq sql.NullInt64
	var head sql.NullBool
	var prev any
	if q.seq.Valid {
		prev = q.seq.Int64
	}
	query, first := c.sessionQueueTrySQL()
	args := []any{first, prev, q.rowTTL(&c.locker.polls), s.pid}
	if err := conn.queryRow(ctx, query, args, &ok, &standby, &pid, &seq, &head); err != nil {
		if !q.seq.Valid && noQueueSchema(err) || readOnlyByDefault(q, err) {
			return false, err // conn as it was, for the server's queue
		}
		// The statement's transaction is rolled back: it took nothing,
		// and the call's place is as it was.
		if serializationFailure(err) {
			// On a session serializable by default (the caller tries
			// again): a failure at commit keeps the session locks that the
			// statement took, which are given back, and the connection
			// goes back to the pool instead of being closed, so that the
			// retries of a contended lock do not each open one.
			c.releasePartial(ctx, conn)
			return false, c.failure(ctx, "lock", err)
		}
		conn.discard()
		if pooled := pooledStatementError(err); pooled != nil {
			return false, c.refusal(ctx, "lock", ErrTransactionPooler, pooled)
		}
		return false, c.failure(ctx, "lock", err)
	}
	switch {
	case pid != s.pid:
		// The pid guard kept pg_try_advisory_lock from running on
		// another backend; wait_try's changes there are the queue's.
		conn.discard()
		if seq.Valid {
			q.seq = seq
		}
		return false, c.refusal(ctx, "lock", ErrTransactionPooler, fmt.Errorf("backend changed from pid %d to %d", s.pid, pid))
	case standby:
		conn.release() // wait_try writes nothing on a standby
		return false, c.refusal(ctx, "lock", ErrStandby, nil)
	case ok:
		if ctx.Err() != nil {
			// Granted, but the caller gave up meanwhile: release at
			// once, which wakes the head.
			c.queuedSession = true
			_ = c.releaseSession(ctx, conn)
			c.wakeQueued()
			return false, c.failure(ctx, "lock", ctx.Err())
		}
		return true, nil
	}
	q.seq, q.head = seq, head
	return false, nil
}
