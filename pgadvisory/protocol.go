package pgadvisory

import (
	"context"
	"errors"
	"time"
)

// txDriver is what the transaction-lock protocol needs from a front door
// (database/sql or pgx). Drivers only move statements; every decision about
// what an outcome means lives in run.
type txDriver interface {
	// begin starts a READ COMMITTED transaction and runs the lock statement in
	// it, in as few round trips as the driver allows. On error the driver has
	// already ended whatever transaction it started.
	begin(ctx context.Context, readOnly bool, st lockStatement) (lockResult, error)
	// txKey identifies the open transaction (the value fn receives).
	txKey() any
	// publish makes token the published fencing token of lockID on another
	// connection, in its own committed statement; false means a newer token
	// is already published.
	publish(ctx context.Context, lockID, token int64, timeout string) (bool, error)
	// runOnceDone and recordRun read and write the run-once ledger inside
	// the lock transaction.
	runOnceDone(ctx context.Context, lockID int64, window string) (bool, error)
	recordRun(ctx context.Context, r runRecord) error
	commit(ctx context.Context) error
	rollback(ctx context.Context) error
	// maxConns is the most connections the pool may open (0: no limit).
	maxConns() int
}

// lockStatement is the lock statement of a transaction-scoped call, bound
// to its arguments (see config.txLockStatement); a fenced statement returns
// a token column too.
type lockStatement struct {
	sql    string
	args   []any
	fenced bool
}

// lockResult is what the lock statement returned.
type lockResult struct {
	granted, standby bool
	token            int64 // fenced statements only
}

// cleanupTimeout bounds a ROLLBACK or unlock sent after the caller's context
// is gone.
const cleanupTimeout = 15 * time.Second

// cleanupContext is ctx without its cancelation, bounded by cleanupTimeout.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
}

// run is the transaction-lock protocol shared by RunExclusive and
// RunExclusivePgx (and RunOnce, RunOncePgx).
func run(ctx context.Context, c *config, d txDriver, call func() error) error {
	if err := ctx.Err(); err != nil {
		return c.failure(ctx, "begin", err)
	}
	if c.fencing && d.maxConns() == 1 {
		// The publish needs a second connection while the lock transaction
		// holds the only one: refuse now instead of waiting for the publish
		// step's timeout on every call.
		return c.invalid("publish", errors.New("WithFencing publishes the token on a second pool connection "+
			"while the lock transaction holds one, and this pool allows only 1; allow at least 2"))
	}
	start := time.Now()
	res, err := d.begin(ctx, c.readOnly, c.txLockStatement())
	if err != nil {
		return c.failure(ctx, "lock", err)
	}
	if res.standby {
		c.rollbackNow(ctx, d)
		return c.refusal(ctx, "lock", ErrStandby, nil)
	}
	if !res.granted {
		// The loser's answer is known after one round trip; the ROLLBACK
		// that returns the connection runs without making the caller wait.
		go c.rollbackNow(ctx, d)
		c.emit(Event{Kind: EventContended, Err: ErrLocked})
		return ErrLocked
	}
	if err := c.afterGrant(ctx, d, res.token); err != nil {
		c.rollbackNow(ctx, d)
		if err == ErrAlreadyDone {
			c.emit(Event{Kind: EventContended, Err: err})
		}
		return err
	}
	acquired := time.Now()
	c.emit(Event{Kind: EventAcquired, Wait: acquired.Sub(start)})
	if c.fencing {
		key := d.txKey()
		tokens.Store(key, res.token)
		defer tokens.Delete(key)
	}

	panicking := true
	defer func() {
		if panicking {
			c.rollbackNow(ctx, d)
			c.emit(Event{Kind: EventReleased, Held: time.Since(acquired), Err: errors.New("pgadvisory: fn panicked")})
		}
	}()
	fnErr := call()
	panicking = false

	if fnErr == nil && ctx.Err() == nil && c.runOnce {
		if err := c.recordRun(ctx, d, res.token, acquired); err != nil {
			c.rollbackNow(ctx, d)
			c.emit(Event{Kind: EventReleased, Held: time.Since(acquired), Err: err})
			return err
		}
	}
	if fnErr != nil || ctx.Err() != nil {
		c.rollbackNow(ctx, d)
		err := c.fnFailure(ctx, fnErr)
		c.emit(Event{Kind: EventReleased, Held: time.Since(acquired), Err: err})
		return err
	}
	if err := d.commit(ctx); err != nil {
		err = c.commitFailure(ctx, err)
		c.emit(Event{Kind: EventReleased, Held: time.Since(acquired), Err: err})
		return err
	}
	c.emit(Event{Kind: EventReleased, Held: time.Since(acquired)})
	return nil
}

// afterGrant runs the steps between the grant and fn, in order: publishing
// the fencing token (fencing.go) and checking the run-once ledger
// (runonce.go).
func (c *config) afterGrant(ctx context.Context, d txDriver, token int64) error {
	if c.fencing {
		if err := c.publishToken(ctx, d, token); err != nil {
			return err
		}
	}
	if c.runOnce {
		return c.checkLedger(ctx, d)
	}
	return nil
}

// rollbackNow rolls the lock transaction back, even when ctx is done.
func (c *config) rollbackNow(ctx context.Context, d txDriver) {
	rctx, cancel := cleanupContext(ctx)
	defer cancel()
	_ = d.rollback(rctx)
}
