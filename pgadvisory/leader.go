package pgadvisory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Lead campaigns for the leadership lockID: it waits in the queue of the
// session-level advisory lock lockID until it is granted or ctx ends, then
// publishes a new term and runs fn with a leadership context and the term.
//
// The term is a fencing token drawn from lockgen's token sequence and
// published for lockID (migration 00007, pgadvisory.leader_elect), on the
// lock's own connection, while the lock is held, in one durable commit
// (synchronous_commit is forced on for it). Terms of one lock strictly
// increase. Writes a leader makes with its term through [RunFenced] or
// [SetFencingToken] to tables fenced by lockID are rejected with
// [ErrStaleToken] once a newer leader is elected, so a deposed leader that
// has not noticed yet cannot overwrite its successor's work. The election
// also records the leader (its [WithHolder] name, default
// "<hostname>/<pid>", the term, the server backend and the time) for
// [CurrentLeader] and lockgen status.
//
// The leadership context is canceled, with a cause wrapping [ErrLockLost],
// when the watcher finds the lock's connection dead or the lock gone (see
// [WithCheckInterval] and [WithCheckTimeout]); fn must then stop acting as
// the leader. Leadership ends when fn returns: the lock is released at
// once, so the next candidate in the queue is elected without waiting for
// a timeout, and Lead returns fn's error, or an error of kind ErrLockLost
// (Op "watch" or "release") if leadership was lost first, whatever fn
// returned. A panic in fn releases the lock and goes on to the caller.
//
// Lead follows the rules of [RunSession]: its lock shares db's session
// connections with the pool's other session locks ([SetSessionConns]; a
// candidate that must wait waits on a connection of its own, which joins
// them once elected), and it refuses a connection behind a transaction
// pooler ([ErrTransactionPooler], unless [WithSessionPooler] declares a
// session-mode pooler) or on a hot standby ([ErrStandby]). Give the elector
// a direct connection (a pool of its own) where the application's other
// connections go through a transaction pooler.
//
// Lead always waits for the lock; [WithWait] with a timeout bounds the
// wait ([ErrLockTimeout]). It takes [WithHolder], [WithCheckInterval],
// [WithCheckTimeout], [WithSessionPooler] and [WithObserver]; it refuses
// [WithShared] (two shared holders would both lead), [WithLocks] (one
// leadership, one lock, one term), [WithFencing] (the term already is the
// token) and the transaction options. A failed publish (Op "elect")
// releases the lock before fn runs; the publish waits for writes still in
// flight with the previous term (they hold its fence row) for at most 5s
// or 4/5 of the check timeout, whichever is shorter, and then fails with
// [ErrLockTimeout], so that a connection shared with other locks is never
// cut off in the middle of it. See [Campaign] for a candidate that
// campaigns again after each leadership ends.
func Lead(ctx context.Context, db *sql.DB, lockID int64, fn func(ctx context.Context, term int64) error, opts ...Option) error {
	c, err := newCall(lockID, opts, famLead, "*sql.DB", db == nil, fn == nil)
	if err != nil {
		return err
	}
	if err := c.setLead(); err != nil {
		return err
	}
	return runSession(ctx, c, db, databaseSQLSessions(db), c.leadership(fn))
}

// LeadPgx is [Lead] for a pgx pool.
func LeadPgx(ctx context.Context, pool *pgxpool.Pool, lockID int64, fn func(ctx context.Context, term int64) error, opts ...Option) error {
	c, err := newCall(lockID, opts, famLead, "*pgxpool.Pool", pool == nil, fn == nil)
	if err != nil {
		return err
	}
	if err := c.setLead(); err != nil {
		return err
	}
	return runSession(ctx, c, pool, pgxSessions(pool), c.leadership(fn))
}

// Lead is [Lead] on l.
func (l Lock) Lead(ctx context.Context, db *sql.DB, fn func(ctx context.Context, term int64) error, opts ...Option) error {
	return Lead(ctx, db, l.ID, fn, l.named(opts)...)
}

// LeadPgx is [LeadPgx] on l.
func (l Lock) LeadPgx(ctx context.Context, pool *pgxpool.Pool, fn func(ctx context.Context, term int64) error, opts ...Option) error {
	return LeadPgx(ctx, pool, l.ID, fn, l.named(opts)...)
}

// setLead makes c a leadership: it waits for the lock unless WithWait
// bounds the wait, and names its holder.
func (c *config) setLead() error {
	if c.given&optWait == 0 {
		c.wait, c.timeout = true, 0
	}
	switch {
	case c.holder == "":
		c.holder = defaultHolder()
	case !utf8.ValidString(c.holder) || strings.IndexByte(c.holder, 0) >= 0:
		return c.invalid("options", fmt.Errorf("WithHolder: %q is not valid UTF-8 text without NUL bytes", c.holder))
	}
	return nil
}

// leadership is the session lock's fn for a leadership: the hook that
// publishes the term once the lock is granted, and fn with that term.
func (c *config) leadership(fn func(context.Context, int64) error) func(context.Context) error {
	var term int64
	c.onLocked = func(ctx context.Context, q sessionQuerier) error {
		t, err := c.elect(ctx, q)
		if err != nil {
			return err
		}
		term = t
		return nil
	}
	return func(ctx context.Context) error {
		if term == 0 {
			return errors.New("pgadvisory: internal error: leadership without a term")
		}
		return fn(ctx, term)
	}
}
