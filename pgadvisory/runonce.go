package pgadvisory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// RunOnce runs fn at most once successfully per (lockID, window), however
// the callers' timing falls: the daily report that three replicas fire, or
// that one replica fires again two seconds after another one finished.
//
// It is [RunExclusive] plus the run-once ledger pgadvisory.run_once (created
// by [Migrate]): after the lock is granted it checks the ledger and returns
// [ErrAlreadyDone] without calling fn if the window already has a successful
// run; after fn succeeds it records the run (token, start, end, holder) in
// the same transaction, so a failed run leaves no row and can be retried, and
// the table's primary key makes a second success impossible even for code
// that bypasses this function. window is any key, such as [DailyWindow]'s
// "2026-12-02". Contention still returns [ErrLocked].
//
// At most once applies to what fn writes through tx. An external side effect
// (sending an e-mail) is at most once only if it happens after everything
// that can fail, and may then be lost if COMMIT fails; see the README.
//
// Round trips: those of RunExclusive plus one for the ledger check and one
// for the ledger row.
func RunOnce(ctx context.Context, db *sql.DB, lockID int64, window string, fn func(*sql.Tx) error, opts ...Option) error {
	c, err := newCall(lockID, opts, "*sql.DB", db == nil, fn == nil)
	if err != nil {
		return err
	}
	if err := c.setRunOnce(lockID, window); err != nil {
		return err
	}
	d := &databaseSQLTx{db: db}
	return run(ctx, c, d, func() error { return fn(d.tx) })
}

// RunOncePgx is [RunOnce] for a pgx pool.
func RunOncePgx(ctx context.Context, pool *pgxpool.Pool, lockID int64, window string, fn func(pgx.Tx) error, opts ...Option) error {
	c, err := newCall(lockID, opts, "*pgxpool.Pool", pool == nil, fn == nil)
	if err != nil {
		return err
	}
	if err := c.setRunOnce(lockID, window); err != nil {
		return err
	}
	d := &pgxTx{pool: pool}
	return run(ctx, c, d, func() error { return fn(d.tx) })
}

// RunOnce is [RunOnce] on l.
func (l Lock) RunOnce(ctx context.Context, db *sql.DB, window string, fn func(*sql.Tx) error, opts ...Option) error {
	return RunOnce(ctx, db, l.ID, window, fn, l.named(opts)...)
}

// RunOncePgx is [RunOncePgx] on l.
func (l Lock) RunOncePgx(ctx context.Context, pool *pgxpool.Pool, window string, fn func(pgx.Tx) error, opts ...Option) error {
	return RunOncePgx(ctx, pool, l.ID, window, fn, l.named(opts)...)
}

// WithHolder names the caller in the run-once ledger's holder column. The
// default is "<hostname>/<pid>".
func WithHolder(holder string) Option {
	return optionFunc(func(c *config) { c.holder = holder })
}

// setRunOnce makes c a run-once call of window, keyed in the ledger by
// lockID.
func (c *config) setRunOnce(lockID int64, window string) error {
	if window == "" {
		return c.invalid("begin", errors.New("empty run-once window"))
	}
	c.runOnce, c.ledgerLockID, c.window = true, lockID, window
	if c.holder == "" {
		c.holder = defaultHolder()
	}
	return nil
}

// checkLedger is the step between the grant and fn that looks the window up
// in the run-once ledger: ErrAlreadyDone when it has a successful run.
func (c *config) checkLedger(ctx context.Context, d txDriver) error {
	done, err := d.runOnceDone(ctx, c.ledgerLockID, c.window)
	if err != nil {
		return c.failure(ctx, "run-once", err)
	}
	if done {
		return ErrAlreadyDone
	}
	return nil
}

// runRecord is one row of the run-once ledger.
type runRecord struct {
	lockID    int64
	window    string
	token     int64 // 0: not fenced
	holder    string
	startedAt time.Time
}

// recordRun is the step between fn and COMMIT that writes the ledger row; a
// row already there (a success that bypassed the lock) turns into
// ErrAlreadyDone. Like fn's own error, a failure is reported with the
// release event, not as an error event.
func (c *config) recordRun(ctx context.Context, d txDriver, token int64, started time.Time) error {
	err := d.recordRun(ctx, runRecord{lockID: c.ledgerLockID, window: c.window, token: token, holder: c.holder, startedAt: started})
	switch {
	case err == nil:
		return nil
	case SQLState(err) == "23505":
		return ErrAlreadyDone
	}
	return &Error{Op: "run-once", LockIDs: c.ids, Name: c.name, SQLState: SQLState(err), Kind: classify(err), Err: withContext(ctx, err)}
}

// defaultHolder is the ledger's holder without WithHolder: "<hostname>/<pid>".
var defaultHolder = sync.OnceValue(func() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return fmt.Sprintf("%s/%d", host, os.Getpid())
})
