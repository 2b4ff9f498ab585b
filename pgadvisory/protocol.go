package pgadvisory

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// txDriver is what the transaction-lock protocol needs from a front door
// (database/sql or pgx). Drivers only move statements; every decision about
// what an outcome means lives in runTx and txError (classify.go).
type txDriver interface {
	// begin starts a READ COMMITTED transaction and runs the lock statement in
	// it, in as few round trips as the driver allows. BEGIN runs under txc
	// (see txContext) if the driver's transaction keeps the context it began
	// with. A driver that can pipeline claim (not nil) after the lock
	// statement does so and says so in lockResult. A fenced statement is the
	// fenced acquisition (fencing.go), after which the transaction is the one
	// COMMIT AND CHAIN began. On error the driver has already ended whatever
	// transaction it started (after a failed fenced acquisition, by closing
	// the connection: session locks may be left on it).
	begin(ctx context.Context, txc *txContext, readOnly bool, st lockStatement, claim *runClaim) (lockResult, error)
	// beginsUnderTxContext reports whether the driver's transaction keeps
	// the context it began with (database/sql): begin then needs txc.
	beginsUnderTxContext() bool
	// txKey identifies the open transaction (the value fn receives).
	txKey() any
	// claim claims a run-once window in the lock transaction; false means
	// the window already has a run.
	claim(ctx context.Context, cl *runClaim) (bool, error)
	// commit sends COMMIT under ctx. ended reports that fn had already ended
	// the transaction itself, as far as the driver can tell without a round
	// trip (nothing was sent then).
	commit(ctx context.Context) (ended bool, err error)
	// rollback sends ROLLBACK; ended as for commit.
	rollback(ctx context.Context) (ended bool, err error)
	// pipelined reports whether begin sends the lock statement in the round
	// trip of BEGIN, so that a statement before it (lockStatement.prelude)
	// costs no round trip.
	pipelined() bool
	// statementTimeout reads the server's statement_timeout on one of the
	// pool's connections: its text and its value in milliseconds.
	statementTimeout(ctx context.Context) (string, int64, error)
}

// lockStatement is the lock statement of a transaction-scoped call, bound
// to its arguments (see callState.txLockStatement). A fenced statement is
// fence_acquire's call, which returns a token column too, followed by the
// hand-over (see fencing.go).
type lockStatement struct {
	sql    string
	args   []any
	fenced bool
	// extra receives the columns after (granted, standby), when not nil
	// (a limited call's slot and registered limit: see limited.go).
	extra []any
	// prelude, when not "", runs before sql in the same transaction and
	// round trip (pipelined drivers only): see statementTimeoutPrelude.
	prelude string
	// handover, when not "", replaces a fenced statement's hand-over
	// (fencedHandover), with its arguments; its first column is the
	// token, handoverExtra receives the others (a queued fenced call:
	// see wait_fenced.go).
	handover      string
	handoverArgs  []any
	handoverExtra []any
}

// lockResult is what the lock statement returned, and the run-once claim
// when the driver pipelined it.
type lockResult struct {
	granted, standby bool
	token            int64 // fenced statements only
	claimSent        bool  // the claim ran in the same round trip
	claimed          bool  // with claimSent: the window was claimed
	claimErr         error // with claimSent: the claim failed (the transaction is aborted)
}

// cleanupTimeout bounds a ROLLBACK or unlock sent after the caller's context
// is gone.
const cleanupTimeout = 15 * time.Second

// cleanupContext is ctx without its cancelation, bounded by cleanupTimeout.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
}

// txOutcome is how the transaction-lock protocol ended: where it stopped
// and what the server or fn answered there. It carries ctx.Err() as it
// was when the step ended, so that the error made of it (txError) says
// what the step saw.
type txOutcome struct {
	end    txEnd
	op     Op    // the step that failed or was refused
	err    error // the driver's error, fn's error, or a refusal's detail
	kind   error // txRefused: the refusal's kind
	ctxErr error // ctx.Err() when the step ended
	sent   bool  // txCommitFailed: COMMIT was sent
}

// txEnd says where the transaction-lock protocol stopped.
type txEnd uint8

// The ends of the transaction-lock protocol.
const (
	txCommitted    txEnd = iota // fn's work committed
	txFailed                    // a step failed on err; its kind is classify's
	txRefused                   // a step was refused with kind
	txLocked                    // another session holds a lock
	txAlreadyDone               // the run-once window already has a run
	txFnFailed                  // fn returned err, or ctx ended while fn ran
	txFnEndedTx                 // fn ended the transaction itself (err: what fn returned)
	txCommitFailed              // COMMIT failed with err
)

// stepFailed is the outcome of step op failing on err.
func stepFailed(ctx context.Context, op Op, err error) txOutcome {
	return txOutcome{end: txFailed, op: op, err: err, ctxErr: ctx.Err()}
}

// runTx is the transaction-lock protocol itself. It records the grant and
// the release in c (see callState.granted) and returns how it ended.
func runTx(ctx context.Context, c *callState, d txDriver, call func() error) txOutcome {
	if err := ctx.Err(); err != nil {
		return stepFailed(ctx, OpBegin, err)
	}
	start := time.Now()
	var txc *txContext // made when a driver step needs it (see txContext)
	if d.beginsUnderTxContext() {
		txc = newTxContext(ctx)
	}
	defer func() { txc.release() }()
	var claim *runClaim
	if c.runOnce {
		claim = c.runClaim()
	}
	st := c.txLockStatement(d.pipelined())
	// A queued read-only call begins read-write: its lock statement writes
	// the queue, and makes the transaction read-only once granted.
	res, err := d.begin(ctx, txc, c.readOnly && c.queue == nil, st, claim)
	if c.queue != nil {
		c.queue.unblock() // the head's wait on the server, if any, is over
	}
	if err != nil {
		if st.fenced && fencedOp(err) == OpPublish {
			return stepFailed(ctx, OpPublish, err)
		}
		return c.lockFailed(ctx, err, start, d.statementTimeout)
	}
	if res.standby {
		c.rollbackNow(ctx, d)
		return txOutcome{end: txRefused, op: OpLock, kind: ErrStandby, ctxErr: ctx.Err()}
	}
	if !res.granted {
		if c.queue != nil && st.fenced {
			// Its place in the queue committed with COMMIT AND CHAIN;
			// the chained transaction holds nothing.
			c.rollbackBehind(ctx, d, &txc)
			return txOutcome{end: txLocked}
		}
		if c.queue != nil {
			return c.queue.keep(ctx, d) // its place in the queue commits
		}
		// The loser's answer is known after one round trip; the ROLLBACK
		// that returns the connection runs without making the caller wait.
		c.rollbackBehind(ctx, d, &txc)
		return txOutcome{end: txLocked}
	}
	if c.runOnce {
		if o := c.claimWindow(ctx, d, res); o.end != txCommitted {
			c.rollbackNow(ctx, d)
			return o
		}
	}
	if c.lim != nil {
		switch err := c.lim.checkSlot(); err {
		case nil:
		case errNoSlot:
			c.rollbackBehind(ctx, d, &txc) // as for a lock not granted
			return txOutcome{end: txLocked}
		default:
			c.rollbackNow(ctx, d)
			return txOutcome{end: txFailed, op: OpLock, err: err}
		}
	}
	acquired := time.Now()
	c.granted(acquired.Sub(start), res.token)
	if c.fencing {
		key := d.txKey()
		c.locker.tokens.Store(key, res.token)
		defer c.locker.tokens.Delete(key)
	}

	panicking := true
	defer func() {
		if panicking {
			c.rollbackNow(ctx, d)
			if obs := c.obs; obs != nil {
				obs.held = time.Since(acquired)
			}
		}
	}()
	fnErr := call()
	panicking = false

	if fnErr != nil || ctx.Err() != nil {
		o := txOutcome{end: txFnFailed, err: fnErr, ctxErr: ctx.Err()}
		if ended, rbErr := c.rollbackNow(ctx, d); ended || endedTx(rbErr) {
			o.end, o.ctxErr = txFnEndedTx, ctx.Err()
		}
		if obs := c.obs; obs != nil {
			obs.held = time.Since(acquired)
		}
		return o
	}
	if txc == nil {
		txc = newTxContext(ctx)
	}
	o := commit(ctx, txc, d)
	if obs := c.obs; obs != nil {
		obs.held = time.Since(acquired)
	}
	return o
}

// commit is the COMMIT step. The caller's ctx may end while COMMIT is in
// flight (a synchronous standby that does not answer, say), so COMMIT runs
// under txc linked to ctx, and what the driver returns tells whether COMMIT
// was sent (see commitSent): only then can the outcome be unknown.
func commit(ctx context.Context, txc *txContext, d txDriver) txOutcome {
	stop := txc.link(ctx)
	ended, err := d.commit(txc.or(ctx))
	interrupted := stop()
	switch {
	case ended:
		return txOutcome{end: txFnEndedTx, ctxErr: ctx.Err()}
	case err == nil:
		return txOutcome{}
	case errors.Is(err, sql.ErrTxDone) && !interrupted:
		// database/sql's Tx was ended, and not by its context: by fn.
		return txOutcome{end: txFnEndedTx, ctxErr: ctx.Err()}
	}
	// ErrTxDone with ctx ended during the step means database/sql rolled
	// back on its own, or fn had ended the transaction: no answer says
	// which, so commitSent leaves it unknown.
	return txOutcome{end: txCommitFailed, err: err, sent: commitSent(err), ctxErr: ctx.Err()}
}

// commitSent tells from COMMIT's error whether COMMIT was sent. It was not
// when database/sql refused because the transaction's context was done (it
// returns that context's bare error, which txContext makes distinct from
// anything a driver returns: see txContext), when pgx refused because the
// context was done before it wrote anything (pgconn.SafeToRetry with
// txContext's own error inside), when the driver found the connection
// already closed before COMMIT (errNotSent), or when a driver returns
// driver.ErrBadConn, which database/sql's contract reserves for operations
// the server cannot have performed. Every other failure may have come after
// COMMIT was sent: pgconn.SafeToRetry alone does not say so, since pgx also
// reports a connection that broke while it read COMMIT's answer as "conn
// closed", safe to retry.
func commitSent(err error) bool {
	var notSent *errNotSent
	switch {
	case err == context.Canceled, errors.As(err, &notSent), errors.Is(err, driver.ErrBadConn):
		return false
	case pgconn.SafeToRetry(err) && errors.Is(err, errInterrupted):
		return false
	}
	return true
}

// errNotSent is a driver's error for a statement it did not send.
type errNotSent struct{ err error }

func (e *errNotSent) Error() string { return "not sent: " + e.err.Error() }
func (e *errNotSent) Unwrap() error { return e.err }

// endedTx reports the drivers' errors for a transaction that was already
// ended: by fn, since run ends it only once.
func endedTx(err error) bool {
	return errors.Is(err, sql.ErrTxDone) || errors.Is(err, pgx.ErrTxClosed)
}

// locked is the error of a call whose lock another session holds.
func (c *callState) locked() error {
	return &Error{Op: "lock", LockIDs: c.ids, Name: c.name, Kind: ErrLocked}
}

// rollbackBehind rolls the lock transaction back without making the
// caller wait, and only then releases *txc, which it takes over (*txc
// becomes nil): database/sql's transaction over pgx's driver rolls back
// under the context it began with, and a ROLLBACK interrupted by that
// context's end closes the connection, which database/sql then hands to
// its next callers as a bad one (TestFencedLosersKeepThePoolsConnections).
func (c *callState) rollbackBehind(ctx context.Context, d txDriver, txc **txContext) {
	t := *txc
	*txc = nil
	go func() {
		c.rollbackNow(ctx, d)
		t.release()
	}()
}

// rollbackNow rolls the lock transaction back, even when ctx is done. ended
// and err are the driver's: whether fn had already ended the transaction.
func (c *callState) rollbackNow(ctx context.Context, d txDriver) (ended bool, err error) {
	rctx, cancel := cleanupContext(ctx)
	defer cancel()
	return d.rollback(rctx)
}
