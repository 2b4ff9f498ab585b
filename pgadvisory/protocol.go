package pgadvisory

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// txDriver is what the transaction-lock protocol needs from a front door
// (database/sql or pgx). Drivers only move statements; every decision about
// what an outcome means lives in run.
type txDriver interface {
	// begin starts a READ COMMITTED transaction and runs the lock statement in
	// it, in as few round trips as the driver allows. On error the driver has
	// already ended whatever transaction it started.
	begin(ctx context.Context, readOnly bool, query string, args []any) (granted, standby bool, err error)
	commit(ctx context.Context) error
	rollback(ctx context.Context) error
}

// cleanupTimeout bounds a ROLLBACK or unlock sent after the caller's context
// is gone.
const cleanupTimeout = 15 * time.Second

// cleanupContext is ctx without its cancelation, bounded by cleanupTimeout.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
}

// run is the transaction-lock protocol shared by RunExclusive and
// RunExclusivePgx.
func run(ctx context.Context, c *config, d txDriver, call func() error) error {
	if err := ctx.Err(); err != nil {
		return c.failure(ctx, "begin", err)
	}
	start := time.Now()
	query, args := c.lockStatement(false)
	granted, standby, err := d.begin(ctx, c.readOnly, query, args)
	if err != nil {
		return c.failure(ctx, "lock", err)
	}
	if standby {
		c.rollbackNow(ctx, d)
		return c.failure(ctx, "lock", ErrStandby)
	}
	if !granted {
		// The loser's answer is known after one round trip; the ROLLBACK
		// that returns the connection runs without making the caller wait.
		go c.rollbackNow(ctx, d)
		c.emit(Event{Kind: EventContended, Err: ErrLocked})
		return ErrLocked
	}
	acquired := time.Now()
	c.emit(Event{Kind: EventAcquired, Wait: acquired.Sub(start)})

	panicking := true
	defer func() {
		if panicking {
			c.rollbackNow(ctx, d)
			c.emit(Event{Kind: EventReleased, Held: time.Since(acquired), Err: errors.New("pgadvisory: fn panicked")})
		}
	}()
	fnErr := call()
	panicking = false

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

func (c *config) rollbackNow(ctx context.Context, d txDriver) {
	rctx, cancel := cleanupContext(ctx)
	defer cancel()
	_ = d.rollback(rctx)
}

// failure builds the error for a failed step (not fn's own error). The
// result wraps ctx.Err() when ctx is done, and the sentinel kind of err.
func (c *config) failure(ctx context.Context, op string, err error) error {
	kind := classify(err)
	if isSentinel(err) {
		kind, err = err, nil
	}
	e := &Error{Op: op, LockIDs: c.ids, Name: c.name, SQLState: SQLState(err), Kind: kind, Err: withContext(ctx, err)}
	c.emitError(e)
	return e
}

// fnFailure is the error for fn's error (or a context canceled during fn):
// fn's error itself when it has no special meaning, else an *Error whose
// kind says what happened (deadlock, connection lost, …) and which still
// unwraps to fn's error.
func (c *config) fnFailure(ctx context.Context, fnErr error) error {
	kind := classify(fnErr)
	if kind == nil && ctx.Err() == nil {
		return fnErr
	}
	if fnErr == nil {
		fnErr = errors.New("fn returned after its context was done; rolled back")
	}
	return &Error{Op: "fn", LockIDs: c.ids, Name: c.name, SQLState: SQLState(fnErr), Kind: kind, Err: withContext(ctx, fnErr)}
}

// commitFailure is the error for a failed COMMIT. A connection lost during
// COMMIT leaves the outcome unknown; a server error means it did not commit.
func (c *config) commitFailure(ctx context.Context, err error) error {
	kind := classify(err)
	if kind == ErrConnLost {
		kind = ErrCommitUnknown
	}
	return &Error{Op: "commit", LockIDs: c.ids, Name: c.name, SQLState: SQLState(err), Kind: kind, Err: withContext(ctx, err)}
}

// withContext makes err wrap ctx's error when ctx is done.
func withContext(ctx context.Context, err error) error {
	ctxErr := ctx.Err()
	switch {
	case ctxErr == nil:
		return err
	case err == nil:
		return ctxErr
	case errors.Is(err, ctxErr):
		return err
	default:
		return fmt.Errorf("%w: %w", ctxErr, err)
	}
}

func isSentinel(err error) bool {
	switch err {
	case ErrStandby, ErrLocked, ErrLockLost, ErrTransactionPooler, ErrInvalidArgument, ErrIsolationLevel:
		return true
	}
	return false
}

func (c *config) emit(e Event) {
	if c.observer == nil {
		return
	}
	e.Name, e.LockIDs, e.Shared, e.Session = c.name, c.ids, c.shared, c.session
	c.observer(e)
}

func (c *config) emitError(err error) {
	kind := EventError
	if errors.Is(err, ErrLockTimeout) {
		kind = EventContended
	}
	c.emit(Event{Kind: kind, Err: err})
}
