package pgadvisory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Option adjusts one call of a [Locker] (or of the deprecated
// package-level functions and [Lock] methods), or a [Lock]'s defaults
// ([Lock.With]): what belongs to the call, where [LockerOption] holds what
// belongs to the pool. Options are applied in order, so a later one wins;
// a nil Option is ignored.
//
// An option that does not apply to the call, or a combination that cannot
// work, is refused with [ErrInvalidArgument] (Op "options") before anything
// is sent, whether it was passed to the call or declared with the lock
// (the message says which):
//
//   - [WithHolder] applies to RunOnce and Lead only; [WithCheckInterval],
//     [WithCheckTimeout] and [WithSessionPooler] to RunSession and Lead
//     only; [WithReadOnly] and [WithFencing] to the calls that run a
//     transaction of their own (RunExclusive, RunOnce).
//   - [Locker.LockTx] takes [WithWait], [WithShared], [WithLocks] and the
//     observers only.
//   - Lead (and Campaign) with [WithShared] (two shared holders would both
//     lead) or [WithLocks] (one leadership, one lock, one term).
//   - RunOnce with [WithShared]: two shared holders would both run fn for
//     one window.
//   - RunOnce or [WithFencing] with a read-only transaction: the claim of
//     the window, the publish of the token, is a write.
type Option interface {
	apply(*callState)
}

// optionFunc is an [Option] that is a function.
type optionFunc func(*callState)

func (f optionFunc) apply(c *callState) { f(c) }

// callState is a call's state: its resolved options and, once it runs,
// its observers. (Its flags are kept together, so that the struct stays
// small: one is allocated per call.)
type callState struct {
	ids      []int64 // sorted, deduplicated
	name     string
	timeout  time.Duration // with wait: 0 means until ctx is done
	observer Observer      // the call's own (WithObserver, WithCallObserver)
	obs      *observation  // the call's observers, once it started; nil when none
	interval time.Duration // session locks: liveness check period
	err      error         // first invalid option
	errKind  error         // its kind

	given    optionSet // the options applied, by the call or declared with the lock
	declared optionSet // those of them that the lock declared (Lock.With)

	shared    bool
	wait      bool
	readOnly  bool
	session   bool
	fencing   bool
	declaring bool // applying a Lock's declared options
	// sessionPooler: session locks go through a declared session-mode
	// pooler (WithSessionPooler)
	sessionPooler bool
	runOnce       bool // a run-once call
	lead          bool // a leadership (Lead, Campaign)
	campaign      bool // Lead called by Campaign
	resigned      bool // Campaign's attempt right after its leader resigned
	// poolRoom: whether the driver's pool can hand out a connection now
	// (see sessionPool.place); nil: not asked
	poolRoom func() bool
	// term: a session-lock leadership's term once elected; its release
	// resigns it (see unlockSQL)
	term int64

	// session locks: the bound of one check and of the release
	// (WithCheckTimeout)
	checkTimeout time.Duration
	// lease: a leadership held as a lease (WithLease), with this ttl
	lease time.Duration
	// lim: a limited call's state, or a lock declared with WithLimit
	// (limited.go); nil otherwise
	lim *limitState
	// queue: a waiting call's place in lockgen's queue (wait_queue.go);
	// nil when the call does not wait there
	queue *queueState
	// queuedSession: a session lock taken through lockgen's queue
	// (session_queue.go), whose release wakes the queue's head; listen
	// opens the Locker's listening connection for such waits (nil: poll)
	queuedSession bool
	listen        func(context.Context) (notifyConn, error)
	// serverQueue: this waiting session lock waits in the server's
	// queue, its session's transactions being read-only by default
	// (readOnlyByDefault).
	serverQueue bool

	// session locks: runs on the lock's connection once the lock is
	// granted, before fn (Lead publishes its term there); an error, already
	// an *Error, ends the call after the lock is released
	onLocked func(ctx context.Context, q sessionQuerier) error

	// ids as the text of a bigint array, once built (idsArg)
	idsText string

	// locker is the state of the call's Locker: its observers and the
	// tokens of its fenced lock transactions
	locker *lockerState

	// run-once calls
	ledgerLockID int64 // the lock ID the run-once ledger is keyed by
	window       string
	holder       string
}

// WithWait makes the call wait for the lock instead of giving up at once.
// An expired wait returns [ErrLockTimeout]; a timeout of 0 waits until ctx
// is done, even where the database, the role or the session sets a
// lock_timeout.
//
// [Locker.RunExclusive] and [Locker.RunOnce] on one lock or a set
// ([WithLocks]; [WithShared], [WithReadOnly] and [WithFencing] too) wait
// without a connection, in arrival order, once lockgen's schema has
// migration 00011 (see [Migrate]): the call tries first, in the round trips
// of a call that does not wait; when the lock is held it joins the lock's
// queue (pgadvisory.waiter), gives its connection back, and tries again
// when the holder's release wakes it (LISTEN/NOTIFY on one connection per
// [Locker], over pgx or pgx's database/sql driver on a direct connection)
// or at its polling interval (behind a pooler, or when the holder took
// the lock without queueing or died). Among the calls waiting for one
// lock, across processes, the one that joined first is granted first (a
// set joins the queue of each of its locks with one place, and is granted
// all of them once it is first in each)
// (shared calls that joined one after the other are granted together); a
// waiter that went away (its process died) no longer blocks the queue
// once its row expires, within its Locker's check interval
// ([WithDefaultCheckInterval]). A call without WithWait that finds the
// lock free takes it, ahead of the queue. The timeout is the call's own
// (its error carries no SQLSTATE), and a wait that ends without the lock
// removes its row. [Locker.RunSession] (on one lock or a set, exclusive
// or shared), [Locker.Lead] and [Locker.Campaign] wait the same way, and
// take their locks on a shared connection when their turn comes (on a
// connection of their own with [WithSessionConns](0)).
//
// Every other waiting call ([Locker.LockTx], any call on a database
// without migration 00011) waits
// in the server's lock queue, holding a connection: the server enforces
// timeout as lock_timeout, set for the lock statement only (fn's
// statements run under the caller's settings). Several locks are taken in
// ascending ID order, so callers that wait for overlapping sets cannot
// deadlock each other.
//
// The server's statement_timeout bounds every statement, the waiting one
// too, and is armed when a statement starts, so only a statement before the
// lock statement can lift it. Where that costs no round trip, the wait is
// not cut short by statement_timeout: [Locker.RunExclusive] on [Pgx] (and the other pgx
// transaction calls) send a statement that lifts it in the round trip of
// BEGIN and the lock statement, and session locks lift it in the statement
// that checks the connection (over pgx or pgx's database/sql driver, on a
// direct connection; behind a declared [WithSessionPooler] in one more
// round trip). The lock statement puts the caller's value back once the
// locks are granted, so fn's statements run under it. [Locker.RunExclusive] on
// [Stdlib] sends BEGIN and the lock statement in separate round trips
// and does not lift it: a statement_timeout shorter than the wait ends the
// wait with an error of kind [ErrLockTimeout] that names the setting and
// its value (SQLSTATE 57014), never a bare 57014.
func WithWait(timeout time.Duration) Option {
	return optionFunc(func(c *callState) {
		c.mark(optWait)
		if timeout < 0 {
			c.setErr(ErrInvalidArgument, fmt.Errorf("WithWait: negative timeout %v", timeout))
			return
		}
		c.wait, c.timeout = true, timeout
	})
}

// WithShared takes the locks in shared (reader) mode: shared holders exclude
// exclusive holders but not each other.
func WithShared() Option {
	return optionFunc(func(c *callState) { c.mark(optShared); c.shared = true })
}

// WithLocks adds more lock IDs to the call; all of them are taken in one
// statement, in ascending order, or none is. Duplicates are ignored.
func WithLocks(ids ...int64) Option {
	return optionFunc(func(c *callState) { c.mark(optLocks); c.ids = append(c.ids, ids...) })
}

// WithReadOnly makes the lock transaction of [Locker.RunExclusive]
// read-only (BEGIN READ ONLY; a call that waits in lockgen's queue, see
// [WithWait], begins read-write, since its lock statement writes the
// queue, and that statement makes the transaction read-only once the lock
// is granted, before fn runs). It is refused where it cannot apply: for
// session locks and leaderships (no transaction of their own), LockTx (the
// transaction is the caller's), RunOnce (its claim is a write) and
// [WithFencing] (publishing the token is a write).
func WithReadOnly() Option {
	return optionFunc(func(c *callState) { c.mark(optReadOnly); c.readOnly = true })
}

// WithTxOptions sets the transaction options for the database/sql and pgx
// front doors alike. Only the default isolation level and
// [sql.LevelReadCommitted] are accepted (others return [ErrIsolationLevel]):
// the lock transaction always runs at READ COMMITTED. ReadOnly is honoured.
//
// Deprecated: the lock transaction runs at READ COMMITTED whatever is
// asked; the one option that remains is [WithReadOnly].
func WithTxOptions(opts sql.TxOptions) Option {
	return optionFunc(func(c *callState) {
		c.mark(optTxOptions)
		switch opts.Isolation {
		case sql.LevelDefault, sql.LevelReadCommitted:
		default:
			c.setErr(ErrIsolationLevel, fmt.Errorf("asked for %v", opts.Isolation))
			return
		}
		c.readOnly = opts.ReadOnly
	})
}

// WithPgxTxOptions is [WithTxOptions] in pgx's terms. IsoLevel must be empty
// or [pgx.ReadCommitted]; BeginQuery, CommitQuery and DeferrableMode are
// refused with [ErrInvalidArgument].
//
// Deprecated: use [WithReadOnly], the one setting it carries.
func WithPgxTxOptions(opts pgx.TxOptions) Option {
	return optionFunc(func(c *callState) {
		c.mark(optPgxTxOptions)
		switch opts.IsoLevel {
		case "", pgx.ReadCommitted:
		default:
			c.setErr(ErrIsolationLevel, fmt.Errorf("asked for %s", opts.IsoLevel))
			return
		}
		if opts.BeginQuery != "" || opts.CommitQuery != "" || opts.DeferrableMode != "" {
			c.setErr(ErrInvalidArgument, errors.New("WithPgxTxOptions: only AccessMode is supported (BeginQuery, CommitQuery and DeferrableMode are not)"))
			return
		}
		c.readOnly = opts.AccessMode == pgx.ReadOnly
	})
}

// WithObserver calls observe for every lock event of the call: acquired,
// contended, released and errors. observe runs synchronously on the calling
// goroutine and must be quick. See [SlogObserver], and [WithCallObserver]
// for observers that follow whole calls (spans). It takes the place of an
// earlier WithObserver or WithCallObserver; the Locker's observers
// ([WithLockerObserver], [WithLockSetObserver]) run in addition.
//
// Deprecated: use [WithCallObserver], which takes any [Observer]:
// [SlogObserver]'s, or a function as an [EventFunc].
func WithObserver(observe func(Event)) Option {
	return optionFunc(func(c *callState) { c.mark(optObserver); c.observer = ObserverFunc(observe) })
}

// WithCheckInterval sets how often a session lock ([Locker.RunSession],
// a leadership of [Locker.Lead]) checks that its connection is alive and still holds the
// lock: the pause between the end of one check and the start of the next.
// A lock lost in a way the server reports (its backend terminated, the
// connection closed or reset) cancels the work's context within about one
// interval; a link that goes silent (half-open) within about one interval
// plus the check timeout ([WithCheckTimeout]). The default is 1s. Locks
// that share a connection ([WithSessionConns]) are checked together, in one
// query, at the smallest interval among them.
func WithCheckInterval(d time.Duration) Option {
	return optionFunc(func(c *callState) {
		c.mark(optCheckInterval)
		if d <= 0 {
			c.setErr(ErrInvalidArgument, fmt.Errorf("WithCheckInterval: interval must be positive, got %v", d))
			return
		}
		c.interval = d
	})
}

// WithCheckTimeout bounds each check of a session lock ([WithCheckInterval])
// and its release when fn returns: a check that has not answered after d
// counts as a lost connection (the connection is closed, which ends the
// session and its locks on the server), because a link that stays silent
// cannot be told from a dead one. A check that is merely slow (a busy
// server or client, a long garbage-collection pause) is not a loss, so d
// is independent of the interval and generous by default: 5s. Lower it to
// notice a half-open link sooner, at the risk of dropping a healthy lock
// when a check takes longer than d. With the defaults, a silent link
// cancels the work within about 6s (interval plus check timeout). Locks
// that share a connection ([WithSessionConns]) are checked together, bounded
// by the smallest check timeout among them, and a check that does not
// answer in time ends all of them.
func WithCheckTimeout(d time.Duration) Option {
	return optionFunc(func(c *callState) {
		c.mark(optCheckTimeout)
		if d <= 0 {
			c.setErr(ErrInvalidArgument, fmt.Errorf("WithCheckTimeout: timeout must be positive, got %v", d))
			return
		}
		c.checkTimeout = d
	})
}

// WithSessionPooler declares that the connections of a session lock
// ([Locker.RunSession], [Locker.Lead]) go through a pooler in session mode
// (PgBouncer with pool_mode=session), which keeps one server connection
// per client connection for as long as the client is connected: session
// locks are safe there.
//
// Without it, a session lock refuses every pooler it detects (a pooler
// announces a backend pid of its own) with [ErrTransactionPooler], because
// no client can tell session mode from transaction mode: a transaction
// pooler with few clients keeps giving a client the same server connection,
// exactly as session mode does, until another client takes it. A pooler in
// statement mode is told apart (it refuses transactions) and is refused
// with [ErrStatementPooler] either way. With the declaration, the later
// defences stay on: the lock statement takes its locks only on the backend
// just checked, the watcher counts the locks the answering backend holds,
// and the release verifies what it releases; they catch a transaction
// pooler that moves the session, but not one that lends the server
// connection to another client while this one is idle.
func WithSessionPooler() Option {
	return optionFunc(func(c *callState) { c.mark(optSessionPooler); c.sessionPooler = true })
}

// newCall resolves the options of a call of family fam and checks its
// arguments: the database handle (what names it, e.g. "*sql.DB") and fn
// must not be nil, and the options must fit the call (see checkOptions).
func newCall(s *lockerState, lockID int64, opts []Option, fam family, handle string, nilHandle, nilFn bool) (*callState, error) {
	c, err := newConfig(s, lockID, opts)
	if err != nil {
		return nil, err
	}
	switch {
	case nilHandle:
		return nil, c.invalid("begin", errors.New("nil "+handle))
	case nilFn:
		return nil, c.invalid("begin", errors.New("nil fn"))
	}
	if err := c.checkOptions(fam); err != nil {
		return nil, c.invalid("options", err)
	}
	return c, nil
}

// withName records the declared name of a [Lock] for errors and events.
func withName(name string) Option {
	return optionFunc(func(c *callState) { c.name = name })
}

// setErr records the first invalid option: its kind (ErrInvalidArgument or
// ErrIsolationLevel) and what was wrong.
func (c *callState) setErr(kind, err error) {
	if c.err == nil {
		c.errKind, c.err = kind, err
	}
}

// defaultCheckInterval is a session lock's check period without
// WithCheckInterval.
const defaultCheckInterval = time.Second

// defaultCheckTimeout bounds a session lock's check and release without
// WithCheckTimeout.
const defaultCheckTimeout = 5 * time.Second

// newConfig resolves the options of a call on lockID, over the defaults
// of its Locker's state s.
func newConfig(s *lockerState, lockID int64, opts []Option) (*callState, error) {
	c := &callState{ids: []int64{lockID}, interval: s.interval, checkTimeout: s.checkTimeout,
		sessionPooler: s.sessionPooler, holder: s.holder, locker: s}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		opt.apply(c)
	}
	if c.err != nil {
		return nil, c.invalidAs("options", c.errKind, c.err)
	}
	if len(c.ids) > 1 {
		slices.Sort(c.ids)
		c.ids = slices.Compact(c.ids)
	}
	return c, nil
}
