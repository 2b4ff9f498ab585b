package pgadvisory

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed reports a call on a [Locker] after its Close. Nothing was sent.
var ErrClosed = errors.New("pgadvisory: the Locker is closed")

// Locker is lockgen's front door on one connection pool: every verb
// (RunExclusive, RunOnce, RunSession, Lead, Campaign, CurrentLeader,
// RunFenced, SetFencingToken, FencingToken, LockTx) as a method, and what
// belongs to the pool (its shared session connections, the check defaults,
// the observer, the holder name; see [LockerOption]) as its state. TTx is
// the transaction type of its [Driver]: [*sql.Tx] for [Stdlib], [pgx.Tx]
// for [Pgx].
//
// Make one per pool with [New] and share it; its methods are safe for
// concurrent use. Per-call settings are [Option]s, checked at each call.
type Locker[TTx any] struct {
	d Driver[TTx]
	s *lockerState
	h *sessionHooks // nil: made per call (a package Locker)
}

// sessionHooks are what a session-lock call takes from its Locker's
// driver: made once in New, so that a call does not allocate them.
type sessionHooks struct {
	open     func(context.Context) (sessionConn, error)
	listen   func(context.Context) (notifyConn, error)
	poolRoom func() bool
}

func newSessionHooks[TTx any](d Driver[TTx]) sessionHooks {
	pool, _, _ := d.handle()
	return sessionHooks{open: d.sessions(), listen: queuedSessionListener(pool), poolRoom: d.poolRoom}
}

// hooks are l's session hooks.
func (l *Locker[TTx]) hooks() sessionHooks {
	if l.h != nil {
		return *l.h
	}
	return newSessionHooks(l.d)
}

// lockerState is what a Locker owns: its settings, checked once in New,
// the shared connections of its session locks, its leases and the tokens
// of its fenced lock transactions.
type lockerState struct {
	// legacy marks a package Locker, the Locker of a pool's package-level
	// functions (deprecated; package_lockers.go): its observers are
	// SetObserver's and SetObserverFor's.
	legacy bool

	closed atomic.Bool

	sessionConns  int // shared connections of session locks; 0: one per call
	sessionPooler bool
	interval      time.Duration
	checkTimeout  time.Duration
	holder        string // "" : "<hostname>/<pid>"
	observer      Observer
	lockSet       map[string]Observer // WithLockSetObserver, by declared name

	mu     sync.Mutex
	shared *sessionPool // made when the first session lock needs it

	lease leaseState // the leases of WithLease (lease.go)

	// waits wakes the Locker's queued waiting calls; noQueue: the
	// database has no queue for them (wait_queue.go)
	waits   waitHub
	noQueue atomic.Bool
	// serverWaits: the heads of its queues waiting on the server now
	serverWaits serverWaits
	// polls bounds the rate of its waiters' poll statements (poll_gate.go)
	polls pollGate

	// limited: the Locker's waiting limited calls (limited.go)
	limited limitedWaiters

	// tokens maps an open fenced lock transaction (the value fn receives)
	// to its token, while fn runs (see FencingToken).
	tokens sync.Map

	// releaseSQL, set only by tests before the Locker is used, rewrites
	// the release statement of a session lock taken through the queue
	// (unlockSQL): the tests of a release that the server fails.
	releaseSQL func(query string) string
}

// newLockerState is the state of a Locker with the default settings.
func newLockerState() *lockerState {
	return &lockerState{sessionConns: defaultSessionConns, interval: defaultCheckInterval, checkTimeout: defaultCheckTimeout}
}

// New returns the Locker of d's pool. The options are checked here, once:
// a bad one is refused with an error of kind [ErrInvalidArgument] (Op
// "options"). Nothing is sent to the server; a nil pool is refused.
//
// A Locker's state is its own: its settings, shared session connections,
// leases and the tokens of its fenced transactions. The package-level
// SetSessionConns, SetObserver and SetObserverFor (deprecated) concern
// only the package-level functions' Lockers and do not change it.
func New[TTx any](d Driver[TTx], opts ...LockerOption) (*Locker[TTx], error) {
	if d == nil {
		return nil, &Error{Op: OpOptions, Kind: ErrInvalidArgument, Err: errors.New("New: nil Driver")}
	}
	pool, name, isNil := d.handle()
	if isNil {
		return nil, &Error{Op: OpOptions, Kind: ErrInvalidArgument, Err: errors.New("New: nil " + name)}
	}
	s := newLockerState()
	s.serverWaits.pool = pool
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(s); err != nil {
			return nil, &Error{Op: OpOptions, Kind: ErrInvalidArgument, Err: err}
		}
	}
	h := newSessionHooks(d)
	return &Locker[TTx]{d: d, s: s, h: &h}, nil
}

// Close ends l: calls that start afterwards fail with an error matching
// [ErrClosed]. Calls in progress run to their end. The shared session
// connections go back to the pool as soon as they hold no lock: at once
// when no session lock is held. Close does not close the pool itself. A
// second Close does nothing.
func (l *Locker[TTx]) Close() error {
	l.s.closed.Store(true)
	return nil
}

// closedErr is the error of a call on a closed Locker.
func closedErr(op Op, lock Lock) error {
	return &Error{Op: op, LockIDs: []int64{lock.ID}, Name: lock.Name, Kind: ErrClosed}
}

// call resolves a call of family fam on lock: the Locker's defaults, then
// the lock's declared options, then the call's.
func (l *Locker[TTx]) call(lock Lock, opts []Option, fam family, nilFn bool) (*callState, error) {
	if l.s.closed.Load() {
		return nil, closedErr(OpBegin, lock)
	}
	_, name, isNil := l.d.handle()
	return newCall(l.s, lock.ID, lock.named(opts), fam, name, isNil, nilFn)
}

// RunExclusive runs fn inside a transaction that holds the
// transaction-scoped advisory lock of lock (pg_try_advisory_xact_lock),
// and commits fn's work and releases the lock together.
//
// It begins a READ COMMITTED transaction and takes the lock in its own
// statement, so fn's statements see everything the previous holder
// committed. If the lock is held elsewhere it returns an error matching
// [ErrLocked] (Op "lock") without calling fn. If fn returns an error the
// transaction is rolled back and that error returned (wrapped in an
// [*Error] with Op "fn" when it has a known kind, such as [ErrDeadlock], or
// matches ErrLocked or ErrAlreadyDone). If fn panics, the transaction is
// rolled back and the panic continues. If fn ends the transaction itself,
// the call reports [ErrTxEnded]. If ctx is done before COMMIT is sent, the
// error wraps ctx.Err() and nothing is committed. Otherwise the
// transaction commits; a COMMIT the server rejected is reported as rolled
// back, and one that was sent without a definite answer (the connection
// broke, ctx ended while it waited, the server ended the session) as
// [ErrCommitUnknown]. A failure to connect is [ErrConnect] (Op "connect").
//
// Round trips: on [Stdlib], BEGIN, the lock statement, COMMIT, as in a
// hand-written version; on [Pgx], BEGIN and the lock statement travel in
// one pipelined round trip, so an uncontended call costs two and a
// contended one returns ErrLocked after one (the ROLLBACK that returns the
// loser's connection finishes in the background). Options add none.
//
// All writes that must be protected by the lock go through tx: work done
// on other connections is not covered (see [WithFencing]). On pgx, fn must
// not call tx.Begin expecting a separate transaction: pgx implements it as
// a savepoint inside the lock transaction.
func (l *Locker[TTx]) RunExclusive(ctx context.Context, lock Lock, fn func(TTx) error, opts ...Option) error {
	c, err := l.call(lock, opts, famExclusive, fn == nil)
	if err != nil {
		return err
	}
	return l.d.runTx(ctx, c, fn)
}

// RunOnce runs fn at most once successfully per (lock, window), however
// the callers' timing falls: the daily report that three replicas fire, or
// that one replica fires again two seconds after another one finished.
//
// It is [Locker.RunExclusive] plus the run-once ledger pgadvisory.run_once
// (created by [Migrate]). Once the lock is granted it claims the window
// with a ledger row (lock, window, token, holder, start), in the lock
// transaction and before fn runs; if the window already has a run it
// returns an error matching [ErrAlreadyDone] without calling fn. The row
// commits with fn's work or not at all: a failed run leaves no row and can
// be retried, and a fn that ends the transaction itself ([ErrTxEnded])
// commits the claim with its work, so a window's work never runs twice.
// The table's primary key makes a second run impossible even for code that
// bypasses this method. window is any non-empty text, such as
// [DailyWindow]'s "2026-12-02". Contention still returns [ErrLocked].
//
// RunOnce refuses [WithShared] (two shared holders would both run fn for
// one window) and [WithReadOnly] (the claim is a write) with
// [ErrInvalidArgument], before anything is sent.
//
// At most once applies to what fn writes through tx. An external side
// effect (sending an e-mail) is at most once only if it happens after
// everything that can fail, and may then be lost if COMMIT fails.
//
// Round trips: on [Stdlib] those of RunExclusive plus one for the claim
// (four); on [Pgx] the claim travels in the lock's round trip (two), and a
// window already done costs one.
func (l *Locker[TTx]) RunOnce(ctx context.Context, lock Lock, window string, fn func(TTx) error, opts ...Option) error {
	c, err := l.call(lock, opts, famOnce, fn == nil)
	if err != nil {
		return err
	}
	if err := c.setRunOnce(lock.ID, window); err != nil {
		return err
	}
	return l.d.runTx(ctx, c, fn)
}

// RunSession runs fn while holding the session-level advisory lock of
// lock, for work that spans many transactions (long batch jobs; see
// [Locker.Lead] for leadership).
//
// The session locks of a Locker share a few server connections
// ([WithSessionConns], 2 by default): a call's locks are taken with
// pg_try_advisory_lock on the least-loaded shared connection, taken from
// the pool when the first lock needs it and given back as soon as it holds
// no lock. A key held by another call of this Locker counts as held
// elsewhere ([ErrLocked], or a wait with [WithWait]) before a lock
// statement is sent. A waiting call ([WithWait]), on one lock or a set,
// exclusive or shared, waits in lockgen's queue without a connection and
// takes its locks on a shared connection when its turn comes (see
// WithWait).
//
// fn gets a context that is canceled, with a cause wrapping
// [ErrLockLost], as soon as a periodic check ([WithCheckInterval],
// [WithCheckTimeout]) finds the lock's connection dead or the lock gone.
// The lock is released when fn returns (or panics), and the release
// verifies what it releases: if it finds fewer locks than were taken, or
// the connection is dead or does not answer, the call returns an error of
// kind ErrLockLost (Op "release"), whatever fn returned, because fn may
// have run without the lock.
//
// Session locks must not go through a pooler that hands the server
// connection to other clients (PgBouncer in transaction or statement
// mode): a pooler is detected by its backend pid and refused with
// [ErrTransactionPooler] or [ErrStatementPooler], unless
// [WithSessionPooler] declares session mode. A hot standby is refused with
// [ErrStandby].
//
// fn's own database work uses other connections and is not covered by
// the lock the way RunExclusive's transaction is: use fencing for
// correctness.
//
// With [WithLease] the lock is a lease instead, which works through any
// pooler and holds no connection while fn runs (see WithLease).
func (l *Locker[TTx]) RunSession(ctx context.Context, lock Lock, fn func(context.Context) error, opts ...Option) error {
	c, err := l.call(lock, opts, famSession, fn == nil)
	if err != nil {
		return err
	}
	if c.given&optLease != 0 {
		if c.holder == "" {
			c.holder = defaultHolder()
		}
		pool, _, _ := l.d.handle()
		return leadLease(ctx, c, l.s, pool, func(ctx context.Context, _ int64) error { return fn(ctx) })
	}
	h := l.hooks()
	c.poolRoom, c.listen = h.poolRoom, h.listen
	return runSession(ctx, c, l.s, h.open, fn)
}

// Lead campaigns for the leadership lock: it waits in the lock's queue
// (lockgen's, holding no connection, on a Locker with shared session
// connections: see [WithWait]) until it is granted or ctx ends, then
// publishes a new term and runs fn with a leadership context and the term.
//
// The term is a fencing token drawn from lockgen's token sequence and
// published for the lock, on the lock's own connection, while the lock is
// held, in one durable commit. Terms of one lock strictly increase. Writes
// a leader makes with its term through [Locker.RunFenced] or
// [Locker.SetFencingToken] to tables fenced by the lock are rejected with
// [ErrStaleToken] once a newer leader is elected. The election also
// records the leader (its holder name, [WithHolder] or
// [WithDefaultHolder], default "<hostname>/<pid>") for
// [Locker.CurrentLeader] and lockgen status.
//
// The leadership context is canceled, with a cause wrapping
// [ErrLockLost], when the watcher finds the lock's connection dead or the
// lock gone; fn must then stop acting as the leader. Leadership ends when
// fn returns: the lock is released at once, so the next candidate is
// elected without waiting for a timeout. Lead returns fn's error, or an
// error of kind ErrLockLost (Op "watch" or "release") if leadership was
// lost first. A panic in fn releases the lock and goes on to the caller.
//
// Lead follows the rules of [Locker.RunSession] (shared connections,
// poolers, standbys). It always waits for the lock; [WithWait] with a
// timeout bounds the wait ([ErrLockTimeout]). It refuses [WithShared],
// [WithLocks], [WithFencing] (the term already is the token) and
// [WithReadOnly]. With [WithLease] the leadership is a lease, a row with an
// expiry on the database's clock, which works through any pooler and holds
// no connection while fn runs (see WithLease). A failed publish (Op "elect") releases the lock before
// fn runs. On shared connections the statement that takes the lock also
// elects, in one durable commit: an uncontended Lead costs 2 round trips
// (that statement and the resignation). Observers see the call as [CallLead].
func (l *Locker[TTx]) Lead(ctx context.Context, lock Lock, fn func(ctx context.Context, term int64) error, opts ...Option) error {
	c, err := l.call(lock, opts, famLead, fn == nil)
	if err != nil {
		return err
	}
	if err := c.setLead(); err != nil {
		return err
	}
	pool, _, _ := l.d.handle()
	if c.given&optLease != 0 {
		return leadLease(ctx, c, l.s, pool, fn)
	}
	h := l.hooks()
	c.poolRoom, c.listen = h.poolRoom, h.listen
	return runSession(ctx, c, l.s, h.open, c.leadership(fn))
}

// Campaign keeps campaigning for the leadership lock until ctx ends: it
// calls [Locker.Lead] with fn and opts, and when a leadership ends, or an
// attempt fails in a way that a retry can cure, it campaigns again.
//
//   - fn returns nil: the leader resigned; Campaign queues again at once,
//     behind the candidates already waiting, who are elected first.
//   - the leadership was lost ([ErrLockLost]), or the attempt failed
//     (connection lost or refused, a hot standby during a failover, a lock
//     or publish timeout): Campaign waits a backoff, from 100ms doubling
//     to 5s, with jitter, and campaigns again. A leadership that ran
//     resets it.
//   - fn returns an error while still the leader, or the call is refused
//     for good (a bad option, a transaction pooler, lockgen's schema
//     missing, the Locker closed): Campaign returns that error.
//
// Campaign returns nil once ctx ends. With [WithLease] each leadership
// is a lease, and Campaign polls for it while another holds it, holding
// no connection (see WithLease).
func (l *Locker[TTx]) Campaign(ctx context.Context, lock Lock, fn func(ctx context.Context, term int64) error, opts ...Option) error {
	return campaign(ctx, fn, func(ctx context.Context, fn func(context.Context, int64) error, resigned bool) error {
		return l.Lead(ctx, lock, fn, append(opts[:len(opts):len(opts)], inCampaign(resigned))...)
	})
}

// inCampaign marks a Lead called by Campaign, right after its leader
// resigned or not.
func inCampaign(resigned bool) Option {
	return optionFunc(func(c *callState) { c.campaign, c.resigned = true, resigned })
}

// CurrentLeader reports who leads lock now, or an error matching
// [ErrNoLeader]. A leader whose backend is gone is never reported: the
// leader recorded by the last election ([Locker.Lead]) is returned only
// while its server backend is alive, is the same backend (its pid, started
// before the election, so a reused pid is not mistaken for it), holds the
// lock in exclusive mode, and its term is the lock's published token. The
// check runs on the server in one statement (pgadvisory.current_leader),
// which needs no privilege on lockgen's tables. A lease leader
// ([WithLease]) is reported, with PID 0 and its lease's expiry (Expires),
// while its lease is held, has not expired on the database's clock and its
// term is the published token.
//
// The answer can be out of date by the time it arrives: use it to show or
// route, never as permission to act as the leader (that is what the term
// and fencing are for).
func (l *Locker[TTx]) CurrentLeader(ctx context.Context, lock Lock) (Leader, error) {
	if l.s.closed.Load() {
		return Leader{}, closedErr(OpCurrentLeader, lock)
	}
	return l.d.currentLeader(ctx, lock.ID, lock.Name)
}

// RunFenced runs fn in a new READ COMMITTED transaction that carries token
// (see [Locker.SetFencingToken]) and commits it: a write under the token
// of a lock held elsewhere (a term of [Locker.Lead], a token of
// [WithFencing]). A write rejected as stale returns an error matching
// [ErrStaleToken]: the token's holder lost its lock and must stop.
//
// If fn returns an error the transaction is rolled back and that error
// returned, wrapped in an [*Error] with Op "fenced write" when it has a
// dedicated kind (such as ErrStaleToken) or ctx is done. Every other
// failure is such an *Error. COMMIT's outcome is told as
// [Locker.RunExclusive] tells it: nothing committed when ctx ended before
// COMMIT was sent or the server answered with an error, [ErrCommitUnknown]
// once COMMIT was sent without a definite answer, [ErrTxEnded] when fn
// ended the transaction itself. Round trips: BEGIN, the token, fn's,
// COMMIT.
func (l *Locker[TTx]) RunFenced(ctx context.Context, token int64, fn func(TTx) error) error {
	if l.s.closed.Load() {
		return &Error{Op: OpFencedWrite, Token: token, Kind: ErrClosed}
	}
	if _, name, isNil := l.d.handle(); isNil || fn == nil {
		what := "nil fn"
		if isNil {
			what = "nil " + name
		}
		return fencedInvalid(token, what)
	}
	c := &callState{locker: l.s}
	return l.d.runFenced(ctx, c, token, fn)
}

// SetFencingToken makes tx carry token: fenced tables then accept tx's
// writes only while token is the published one. Use it for writes that a
// lock holder makes in a transaction of its own (or hands to other
// processes with the token). The setting ends with tx. A failure is an
// [*Error] with Op "fenced write". One round trip.
func (l *Locker[TTx]) SetFencingToken(ctx context.Context, tx TTx, token int64) error {
	if l.s.closed.Load() {
		return &Error{Op: OpFencedWrite, Token: token, Kind: ErrClosed}
	}
	if l.d.nilTx(tx) {
		return fencedInvalid(token, "nil tx")
	}
	return l.d.setFencingToken(ctx, tx, token)
}

// FencingToken returns the fencing token of the lock transaction tx while
// fn of a [WithFencing] call runs, and false when tx is not a fenced lock
// transaction. It sends nothing.
func (l *Locker[TTx]) FencingToken(tx TTx) (int64, bool) {
	return l.s.token(any(tx))
}
