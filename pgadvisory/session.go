package pgadvisory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// sessionQuerier runs one statement on the connection that holds a
// session lock.
type sessionQuerier interface {
	queryRow(ctx context.Context, query string, args []any, dest ...any) error
}

// sessionConn is a dedicated connection as the session protocol needs it.
type sessionConn interface {
	sessionQuerier
	// simpleQueryRow runs a query without parameters, over the simple
	// protocol where the driver lets the caller choose (pgx): no prepared
	// statement that a pooler could give to another client's server
	// connection, or mix up with another client's of the same name.
	simpleQueryRow(ctx context.Context, query string, dest ...any) error
	// simpleExec runs a statement without parameters over the simple
	// protocol.
	simpleExec(ctx context.Context, query string) error
	// announcedPID is the backend pid from the connection's startup
	// (BackendKeyData), if the driver exposes it.
	announcedPID() (uint32, bool)
	// release returns the connection to its pool; discard closes it.
	release()
	discard()
}

// runSession is the session-lock protocol shared by both drivers, between
// its observers' start and end (observer.go), on the shared connections of
// the Locker's state s (for pool), or on a connection of its own.
func runSession(ctx context.Context, c *callState, s *lockerState, acquire func(context.Context) (sessionConn, error), fn func(context.Context) error) error {
	c.session = true
	kind := CallSession
	if c.lead {
		kind = CallLead
	}
	return c.observed(ctx, kind, "", 0, func(ctx context.Context) error {
		if p := s.sessionPool(); p != nil {
			return runSessionMux(ctx, c, p, acquire, fn)
		}
		return runSessionLock(ctx, c, acquire, fn)
	})
}

// runSessionLock is the session-lock protocol itself: open (check the
// connection), lock, watch while fn runs, release and verify.
func runSessionLock(ctx context.Context, c *callState, acquire func(context.Context) (sessionConn, error), fn func(context.Context) error) (err error) {
	if err := ctx.Err(); err != nil {
		return c.failure(ctx, "begin", err)
	}
	start := time.Now()
	var conn sessionConn
	if c.sessionQueued() {
		// A waiting call waits in lockgen's queue
		// (session_queue_dedicated.go).
		qc, fallback, err := c.queuedLockSession(ctx, acquire, start)
		if err != nil {
			return err
		}
		if fallback {
			qc.release() // no queue in this database: the server's, below
		} else {
			conn = qc
		}
	}
	if conn == nil {
		var err error
		if conn, err = acquire(ctx); err != nil {
			return c.failure(ctx, "begin", poolWaitError(ctx, err))
		}
		s, err := c.openSession(ctx, conn)
		if err != nil {
			return err
		}
		if err := c.lockSession(ctx, conn, s, start); err != nil {
			return err
		}
	}
	if c.onLocked != nil {
		if err := c.onLocked(ctx, conn); err != nil {
			unreleased := c.releaseSession(ctx, conn)
			c.wakeQueued()
			if unreleased != nil {
				return fmt.Errorf("%w (and the release: %w)", err, unreleased)
			}
			return err
		}
	}
	acquired := time.Now()
	c.granted(acquired.Sub(start), 0)

	workCtx, cancel := context.WithCancelCause(ctx)
	w := &watcher{c: c, conn: conn, cancel: cancel, stop: make(chan struct{})}
	w.wg.Add(1)
	go w.watch(workCtx)

	defer func() {
		close(w.stop)
		w.wg.Wait()
		lost := w.lost
		cancel(nil)
		var unreleased error
		if lost != nil {
			conn.discard()
		} else {
			unreleased = c.releaseSession(ctx, conn)
		}
		c.wakeQueued()
		if r := recover(); r != nil {
			if obs := c.obs; obs != nil {
				obs.held = time.Since(acquired)
			}
			panic(r)
		}
		err = c.sessionOutcome(ctx, lost, unreleased, err)
		if obs := c.obs; obs != nil {
			obs.held = time.Since(acquired)
		}
	}()
	return fn(workCtx)
}

// sessionOutcome is a session lock call's result once its locks are
// released: a loss the watcher saw (lost) or the release found
// (unreleased) wins over fn's error, which it carries along.
func (c *callState) sessionOutcome(ctx context.Context, lost, unreleased, fnErr error) error {
	switch {
	case lost != nil:
		return &Error{Op: "watch", LockIDs: c.ids, Name: c.name, SQLState: SQLState(lost), Kind: ErrLockLost, Err: joinErr(lost, fnErr)}
	case unreleased != nil:
		return &Error{Op: OpRelease, LockIDs: c.ids, Name: c.name, SQLState: SQLState(unreleased), Kind: ErrLockLost, Err: joinErr(unreleased, fnErr)}
	case fnErr != nil || ctx.Err() != nil:
		return c.fnFailure(ctx, fnErr)
	}
	return nil
}

// openedSession is what openSession learned about a session lock's
// connection.
type openedSession struct {
	pid int32 // the server backend
	// lifted: statement_timeout is 0 for the session until the lock
	// statement puts previous back (a waiting call, see WithWait).
	lifted   bool
	previous string
}

// openSession checks a session lock's connection before anything is
// locked: a pooler (a backend pid other than the one announced at
// startup) is told apart by its mode and refused unless declared, a
// standby is refused, and a waiting call lifts statement_timeout where
// that is safe. On error the connection has been released or discarded.
func (c *callState) openSession(ctx context.Context, conn sessionConn) (openedSession, error) {
	return c.openSessionFor(ctx, conn, c.wait)
}

// openSessionFor is openSession that lifts statement_timeout only when
// lift is true: a lock statement that waits on the server needs it, a
// try in lockgen's queue does not.
func (c *callState) openSessionFor(ctx context.Context, conn sessionConn, lift bool) (openedSession, error) {
	var s openedSession
	announced, known := conn.announcedPID()
	if !known {
		announced = 0
	}
	var standby bool
	var previous sql.NullString
	if err := conn.simpleQueryRow(ctx, sessionProbeSQL(announced, lift), &s.pid, &standby, &previous); err != nil {
		conn.discard()
		return s, c.sessionFailure(ctx, "begin", err)
	}
	s.lifted, s.previous = previous.Valid, previous.String
	if known && announced != uint32(s.pid) {
		if err := c.checkPooler(ctx, conn, s.pid, announced); err != nil {
			return s, err
		}
	}
	if standby {
		conn.release() // nothing was lifted on a standby (see sessionProbeSQL)
		return s, c.refusal(ctx, "begin", ErrStandby, nil)
	}
	if known && announced != uint32(s.pid) && lift {
		// A declared session pooler: the server connection is this
		// client's alone, so lifting statement_timeout cannot leak.
		if err := conn.simpleQueryRow(ctx, liftStatementTimeoutSQL, &s.previous); err != nil {
			conn.discard()
			return s, c.sessionFailure(ctx, "begin", err)
		}
		s.lifted = true
	}
	return s, nil
}

// checkPooler decides about a connection that goes through a pooler
// (server pid and announced pid differ), as probePooler finds it: a pooler
// in statement mode is refused (ErrStatementPooler), one in transaction or
// session mode too (ErrTransactionPooler) unless the caller declared
// session mode (WithSessionPooler). On error the connection has been
// released or discarded.
func (c *callState) checkPooler(ctx context.Context, conn sessionConn, pid int32, announced uint32) error {
	kind, detail, err := probePooler(ctx, conn, pid, announced)
	switch {
	case err != nil:
		conn.discard()
		return c.failure(ctx, "begin", err)
	case kind == ErrStatementPooler:
		conn.discard()
		return c.refusal(ctx, "begin", kind, detail)
	case !c.sessionPooler:
		conn.release()
		return c.refusal(ctx, "begin", kind, c.poolerHint(detail))
	}
	return nil
}

// probePooler asks a pooler in the path of conn (server pid and announced
// pid differ) to open a transaction. One in statement mode refuses: kind
// ErrStatementPooler. Session and transaction mode both accept, and no
// client can tell them apart (a transaction pooler with few clients keeps
// giving a client the same server connection, as session mode does): kind
// ErrTransactionPooler, which only WithSessionPooler overrides. detail says
// what was seen; err is a failure of the connection itself.
func probePooler(ctx context.Context, conn sessionConn, pid int32, announced uint32) (kind, detail, err error) {
	if err := conn.simpleExec(ctx, "BEGIN"); err != nil {
		if classify(err) == ErrStatementPooler {
			return ErrStatementPooler, fmt.Errorf("server pid %d, announced pid %d; the pooler refused BEGIN: %w", pid, announced, err), nil
		}
		return nil, nil, err
	}
	if err := conn.simpleExec(ctx, "ROLLBACK"); err != nil {
		return nil, nil, err
	}
	return ErrTransactionPooler, undeclaredPooler(pid, announced), nil
}

// undeclaredPooler is the detail of a refusal of a pooler in transaction
// or session mode.
func undeclaredPooler(pid int32, announced uint32) error {
	return fmt.Errorf("server pid %d, announced pid %d: a pooler in transaction or session mode, "+
		"which a client cannot tell apart; if it is in session mode (PgBouncer pool_mode=session), declare it with WithSessionPooler", pid, announced)
}

// lockSession sends the lock statement. A set not granted whole is
// released; on error the connection has been released or discarded.
func (c *callState) lockSession(ctx context.Context, conn sessionConn, s openedSession, start time.Time) error {
	query, args := c.sessionLockSQL(s.pid, s.previous, s.lifted)
	var granted, standby bool
	var lockPID int32
	if err := conn.queryRow(ctx, query, args, &granted, &standby, &lockPID); err != nil {
		// A failed statement may have left some locks of a set granted, and
		// a lifted statement_timeout is not back yet: the connection goes.
		defer conn.discard()
		if pooled := pooledStatementError(err); pooled != nil {
			return c.refusal(ctx, "lock", ErrTransactionPooler, pooled)
		}
		return c.lockFailure(ctx, err, start, func(ctx context.Context) (text string, ms int64, err error) {
			err = conn.queryRow(ctx, statementTimeoutSQL, nil, &text, &ms)
			return text, ms, err
		})
	}
	if lockPID != s.pid {
		conn.discard()
		return c.refusal(ctx, "lock", ErrTransactionPooler, fmt.Errorf("backend changed from pid %d to %d", s.pid, lockPID))
	}
	if !granted {
		switch {
		case s.lifted:
			conn.discard() // not granted, so statement_timeout was not put back
		case len(c.ids) > 1:
			c.releasePartial(ctx, conn) // the locks before the first one held elsewhere
		default:
			conn.release()
		}
		return c.locked()
	}
	return nil
}

// sessionFailure is failure for a step on a session lock's connection,
// which recognises a pooler by its prepared statements (see
// pooledStatementError).
func (c *callState) sessionFailure(ctx context.Context, op Op, err error) error {
	if pooled := pooledStatementError(err); pooled != nil {
		return c.refusal(ctx, op, ErrTransactionPooler, pooled)
	}
	return c.failure(ctx, op, err)
}

// pooledStatementError recognises a dedicated connection whose prepared
// statements belong to another client (42P05, already exists) or vanished
// (26000, does not exist): its statements run on a server connection that
// other clients share, as behind a transaction pooler that does not track
// prepared statements (PgBouncer before 1.21). It returns the detail of a
// refusal, or nil.
func pooledStatementError(err error) error {
	switch SQLState(err) {
	case "42P05", "26000":
		return fmt.Errorf("a prepared statement of this connection is unknown or another's on the server: "+
			"its statements run on server connections that other clients share: %w", err)
	}
	return nil
}

// joinErr is the cause of a lost session lock, with fn's error if it
// returned one other than the loss itself (fn often returns its context's
// cause, which already says it).
func joinErr(lost, fnErr error) error {
	if fnErr == nil || errors.Is(fnErr, lost) {
		return lost
	}
	return fmt.Errorf("%w; fn returned: %w", lost, fnErr)
}

// releaseSession unlocks c's locks on conn and verifies the count: every
// lock of the set must have been held. Then it returns conn to the pool.
// If the unlock fails, does not answer within the check timeout, or finds
// a lock missing, it closes conn instead (nothing can stay locked on a
// pooled connection, and the server releases whatever the session held)
// and returns what went wrong: the lock was lost, at the latest now.
func (c *callState) releaseSession(ctx context.Context, conn sessionConn) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.checkTimeout)
	defer cancel()
	query, args := c.unlockSQL()
	var released int64
	err := conn.queryRow(rctx, query, args, &released)
	if err != nil && c.queuedSession && serializationFailure(err) && !c.lead {
		released, err = c.releaseConflicted(func(query string, args []any, dest ...any) error {
			return conn.queryRow(rctx, query, args, dest...)
		})
	}
	if err != nil {
		conn.discard()
		if rctx.Err() != nil {
			return fmt.Errorf("the unlock did not answer within %v (WithCheckTimeout); the connection was closed, "+
				"so the server releases the locks once it notices: %w", c.checkTimeout, err)
		}
		return fmt.Errorf("the unlock failed, the connection is gone: %w", err)
	}
	if int(released) != len(c.ids) {
		conn.discard()
		return fmt.Errorf("the unlock found %d of %d locks held", released, len(c.ids))
	}
	conn.release()
	return nil
}

// releasePartial releases the locks of a set that its try statement took
// before it found one held elsewhere, and returns conn to the pool; if that
// fails conn is closed instead.
func (c *callState) releasePartial(ctx context.Context, conn sessionConn) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.checkTimeout)
	defer cancel()
	query, args := c.unlockHeldSQL()
	var released int64
	if err := conn.queryRow(rctx, query, args, &released); err != nil {
		conn.discard()
		return
	}
	conn.release()
}
