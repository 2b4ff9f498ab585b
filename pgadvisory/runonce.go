package pgadvisory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// RunOnce runs fn at most once successfully per (lockID, window), however
// the callers' timing falls: the daily report that three replicas fire, or
// that one replica fires again two seconds after another one finished.
//
// It is [RunExclusive] plus the run-once ledger pgadvisory.run_once (created
// by [Migrate]). Once the lock is granted it claims the window with a
// ledger row (lock, window, token, holder, start), in the lock transaction
// and before fn runs; if the window already has a run it returns an error
// matching [ErrAlreadyDone] without calling fn. The row commits with fn's
// work or not at all: a failed run leaves no row and can be retried, and a
// fn that ends the transaction itself ([ErrTxEnded]) commits the claim with
// its work, so a window's work never runs twice. The table's primary key
// makes a second run impossible even for code that bypasses this function.
// window is any non-empty text, such as [DailyWindow]'s "2026-12-02".
// Contention still returns [ErrLocked]. finished_at is set when the run
// commits (by a trigger of the migrations).
//
// RunOnce refuses [WithShared] (two shared holders would both run fn for
// one window) and a read-only transaction (the claim is a write) with
// [ErrInvalidArgument], before anything is sent.
//
// At most once applies to what fn writes through tx. An external side effect
// (sending an e-mail) is at most once only if it happens after everything
// that can fail, and may then be lost if COMMIT fails; see the README.
//
// Round trips: those of RunExclusive plus one for the claim (four);
// [RunOncePgx] sends the claim in the lock's round trip (two).
func RunOnce(ctx context.Context, db *sql.DB, lockID int64, window string, fn func(*sql.Tx) error, opts ...Option) error {
	c, err := newCall(lockID, opts, famOnce, "*sql.DB", db == nil, fn == nil)
	if err != nil {
		return err
	}
	if err := c.setRunOnce(lockID, window); err != nil {
		return err
	}
	d := &databaseSQLTx{db: db}
	return run(ctx, c, d, func() error { return fn(d.tx) })
}

// RunOncePgx is [RunOnce] for a pgx pool. BEGIN, the lock statement and
// the claim travel in one pipelined round trip, so a run costs two round
// trips (that one and COMMIT) and a window already done one.
func RunOncePgx(ctx context.Context, pool *pgxpool.Pool, lockID int64, window string, fn func(pgx.Tx) error, opts ...Option) error {
	c, err := newCall(lockID, opts, famOnce, "*pgxpool.Pool", pool == nil, fn == nil)
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

// WithHolder names the caller: in the run-once ledger's holder column
// ([RunOnce]), or as the leader ([Lead]: [Leader].Holder, lockgen status).
// The default is "<hostname>/<pid>".
func WithHolder(holder string) Option {
	return optionFunc(func(c *config) { c.mark(optHolder); c.holder = holder })
}

// setRunOnce makes c a run-once call of window, keyed in the ledger by
// lockID.
func (c *config) setRunOnce(lockID int64, window string) error {
	switch {
	case window == "":
		return c.invalid("begin", errors.New("empty run-once window"))
	case !utf8.ValidString(window) || strings.IndexByte(window, 0) >= 0:
		return c.invalid("begin", fmt.Errorf("run-once window %q is not valid UTF-8 text without NUL bytes", window))
	}
	c.runOnce, c.ledgerLockID, c.window = true, lockID, window
	if c.holder == "" {
		c.holder = defaultHolder()
	}
	return nil
}

// runClaim is the claim of a run-once window: the ledger row that RunOnce
// writes before fn (queries/runonce.sql, ClaimRun).
type runClaim struct {
	lockID int64
	window string
	holder string
}

// runClaim is c's claim.
func (c *config) runClaim() *runClaim {
	return &runClaim{lockID: c.ledgerLockID, window: c.window, holder: c.holder}
}

// claimWindow is the step between the grant and fn that claims the window
// (or reads the claim that came with the grant): an error matching
// ErrAlreadyDone when the window already has a run.
func (c *config) claimWindow(ctx context.Context, d txDriver, res lockResult) error {
	claimed := res.claimed
	if res.claimErr != nil {
		return c.failure(ctx, "run-once", res.claimErr)
	}
	if !res.claimSent {
		var err error
		if claimed, err = d.claim(ctx, c.runClaim()); err != nil {
			return c.failure(ctx, "run-once", err)
		}
	}
	if !claimed {
		return &Error{Op: "run-once", LockIDs: c.ids, Name: c.name, Kind: ErrAlreadyDone, Err: fmt.Errorf("window %q", c.window)}
	}
	return nil
}

// defaultHolder is the ledger's holder without WithHolder: "<hostname>/<pid>".
var defaultHolder = sync.OnceValue(func() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return fmt.Sprintf("%s/%d", host, os.Getpid())
})
