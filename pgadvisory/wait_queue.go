package pgadvisory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Waiting without a connection, in arrival order (migrations/00011_waiting.sql).
//
// A transaction-lock call with WithWait on one lock or a set (RunExclusive,
// RunOnce; shared, fenced or read-only too) does not
// wait in the server's lock queue. Its first try is its lock
// transaction's statement pgadvisory.wait_try with no place in the
// queue: it takes the lock, in the round trips of a call that does not
// wait, when the lock is free and nobody is queued for it. Otherwise the
// same statement puts the call at the end of the lock's queue (a row of
// pgadvisory.waiter), the transaction commits that row, and the
// connection goes back to the pool.
// The call then sleeps until it is woken or its polling interval passes,
// and tries again (wait_try with its place): only the head of the queue
// may take the lock, and it leaves the queue in the lock transaction.
//
// Wake-ups: a call granted at the head of its queue sends NOTIFY
// pgadvisory_wait ("lockID:seq" of the next waiter) from its lock
// transaction when another waiter is queued, delivered when that
// transaction commits, that is when the lock is released; a wait that ends
// without the lock (ctx, timeout, an error) leaves the queue with
// wait_leave, which notifies the head. Only the named waiter wakes.
// One listening connection per Locker (waitHub) receives them while some
// call waits. Where LISTEN cannot work (a pooler between the client and
// the server, or a database/sql driver other than pgx's), and for a holder
// that died or rolled back, the waiters poll: the head of a queue from
// 1ms doubling to waitPollMax, the others at their heartbeat.
//
// A holder that took the lock without queueing sends no NOTIFY (it does
// not know that waiters came after it, and asking would cost every
// uncontended call): the head of the queue, finding the lock held, waits
// for it on the server in its try, for at most blockMS, and is granted as
// the holder's transaction ends. A holder that came through the queue
// never makes anyone wait so: its row, deleted but not committed, still
// comes first for the others until it releases. Such a try holds a pool
// connection while it waits: a Locker lets at most serverWaitBudget of its
// heads wait so at once, and none while its pool has no connection to
// spare besides the try's; the others poll (see serverWaits).
//
// A waiter's row expires on the database's clock (waitTTL of the Locker's
// check interval) unless its tries refresh it (every waitHeartbeat): a
// waiter that went away blocks the queue until its row expires and the
// next waiter's poll sees it, less than one check interval. The polls of
// a Locker's waiters pass its pollGate (poll_gate.go), which bounds how
// many it sends per second; the rows' expiry grows with the number of
// its waiters (rowTTL), and so does how long a gone waiter blocks the queue.

// The polling interval of the head of a queue: from waitPollMin, doubled
// up to waitPollMax (variables for tests).
var (
	waitPollMin = time.Millisecond
	waitPollMax = 50 * time.Millisecond
)

// waitTTL is the expiry of a queue row after each try: 3/4 of the check
// interval, so that with waitHeartbeat a gone waiter blocks the next one
// for less than one check interval.
func waitTTL(interval time.Duration) time.Duration { return interval * 3 / 4 }

// waitHeartbeat is the longest sleep of a waiter that is not at the head.
func waitHeartbeat(interval time.Duration) time.Duration { return interval / 5 }

// The statements of a queued wait. wait_try's third parameter is the row's
// expiry in milliseconds, its fourth how long the head of the queue may
// wait on the server for a holder that did not come through the queue
// (see queueState.blockMS), its sixth whether the call is shared
// (WithShared).
const (
	waitTrySQL = `SELECT g.granted, pg_catalog.pg_is_in_recovery(), g.seq, g.head, g.next ` +
		`FROM pgadvisory.wait_try($1::text::bigint[], $2::bigint, $3::bigint, $4::bigint, true, $5::boolean) AS g`
	// waitTryOnceSQL is waitTrySQL for a run-once call: it sets
	// pgadvisory.granted for the claim that follows (see lockShape.granted).
	waitTryOnceSQL = `SELECT CASE WHEN g.granted THEN pg_catalog.set_config('pgadvisory.granted', 'on', true) = 'on' ELSE false END, ` +
		`pg_catalog.pg_is_in_recovery(), g.seq, g.head, g.next FROM pgadvisory.wait_try($1::text::bigint[], $2::bigint, $3::bigint, $4::bigint, true, $5::boolean) AS g`
	// waitTryReadOnlySQL is waitTrySQL for a read-only call (WithReadOnly):
	// its transaction begins read-write, since wait_try writes the queue,
	// and is made read-only by the same statement once the lock is
	// granted, before fn runs (PostgreSQL lets a transaction turn
	// transaction_read_only on at any point, never off again).
	waitTryReadOnlySQL = `SELECT CASE WHEN g.granted THEN pg_catalog.set_config('transaction_read_only', 'on', true) = 'on' ELSE false END, ` +
		`pg_catalog.pg_is_in_recovery(), g.seq, g.head, g.next FROM pgadvisory.wait_try($1::text::bigint[], $2::bigint, $3::bigint, $4::bigint, true, $5::boolean) AS g`
	waitLeaveSQL = `SELECT pgadvisory.wait_leave($1::text::bigint[], $2::bigint)`
)

// waitChannel is the channel of wait_try's and wait_leave's NOTIFY.
const waitChannel = "pgadvisory_wait"

// queueState is a queued call's place in its lock's queue.
type queueState struct {
	seq  sql.NullInt64 // the call's row; invalid before it joined
	head sql.NullBool  // the last try found the call first in the queue
	// next is the waiter that the granted try's NOTIFY names (invalid:
	// none was sent).
	next  sql.NullInt64
	ttlMS int64
	// commitTimeout bounds the COMMIT of a try that was not granted,
	// which ctx does not interrupt (see keep).
	commitTimeout time.Duration
	// deadline is when WithWait's timeout passes (zero: none).
	deadline time.Time
	// refreshBy is when the call's next try must be sent for its row to
	// stay live: half the expiry of its last try after the try was built
	// (rowTTL), which its poll does not wait past (pollGate.wait).
	refreshBy time.Time
	// block: the call holds one of its Locker's server-wait slots (of
	// slots) for its next try, which may then wait on the server (see
	// blockMS), until that try's lock statement returns (unblock).
	block bool
	slots *serverWaits
	// caller is a fenced call's own random number, which the rows it joins
	// the queue with carry: a fenced try commits its row within its
	// message, and a call whose ctx ends while it reads the answer does
	// not learn the row's place (see fencedLeaveSQL). 0 for other calls.
	caller int64
	// unread: a fenced try failed, so it may have committed a row whose
	// place the call did not read; leave then looks for it by caller.
	unread bool
}

// unblock gives back the call's server-wait slot, if it holds one: its
// try's lock statement returned.
func (q *queueState) unblock() {
	if q.block {
		q.block = false
		q.slots.release()
	}
}

// blockMS is how long the call's next try may wait on the server when it
// is the head of the queue and the lock is held by a holder that did not
// come through the queue, which sends no NOTIFY when it releases: half
// the row's expiry (wait_try caps it there too, so that the row stays
// live meanwhile), within WithWait's timeout. A first try (no place yet)
// never waits: it only joins; nor does a try without a server-wait slot
// (see serverWaits.acquire).
func (q *queueState) blockMS() int64 {
	if !q.seq.Valid || !q.block {
		return 0
	}
	ms := q.ttlMS / 2
	if !q.deadline.IsZero() {
		ms = min(ms, time.Until(q.deadline).Milliseconds())
	}
	return max(0, ms)
}

// queued reports whether c waits in lockgen's queue rather than in the
// server's: a waiting transaction lock on unlimited IDs (one or a set,
// which joins the queue of each with one place), exclusive or shared, on a
// Locker whose database has the queue. A read-only call's lock
// statement makes its transaction read-only once granted
// (waitTryReadOnlySQL); a fenced call's is fence_wait_try (wait_fenced.go).
func (c *callState) queued() bool {
	return c.wait && !c.session && c.lim == nil &&
		c.locker != nil && !c.locker.noQueue.Load()
}

// statement is a queued call's lock statement.
func (q *queueState) statement(c *callState) lockStatement {
	query := waitTrySQL
	switch {
	case c.runOnce:
		query = waitTryOnceSQL
	case c.readOnly:
		query = waitTryReadOnlySQL
	}
	var seq any
	if q.seq.Valid {
		seq = q.seq.Int64
	}
	if c.fencing {
		q.next.Valid = false // set by the hand-over, when it runs
		return q.fencedStatement(c, seq, q.rowTTL(&c.locker.polls), q.blockMS())
	}
	return lockStatement{sql: query, args: []any{c.idsList(), seq, q.rowTTL(&c.locker.polls), q.blockMS(), c.shared}, extra: []any{&q.seq, &q.head, &q.next}}
}

// rowTTL is the expiry of the call's row after its next try: ttlMS, plus
// twice the cycle of the Locker's poll slots (polls), which stretches the
// interval between a waiter's tries when many wait; without it their
// rows would expire between tries and they would lose their turn. Within
// wait_try's bound of an hour. It sets refreshBy for the try it is built
// for.
func (q *queueState) rowTTL(polls *pollGate) int64 {
	ms := min(q.ttlMS+2*polls.cycle().Milliseconds(), 3600000)
	q.refreshBy = time.Now().Add(time.Duration(ms) * time.Millisecond / 2)
	return ms
}

// keep commits a queued call's transaction that was not granted: the
// call's row (joined, refreshed) must outlive it. The COMMIT runs to its
// end even when ctx ends meanwhile (bounded by the check timeout), as
// database/sql's does: a COMMIT that ctx interrupts while it is being
// written leaves the transaction open on the server, holding the row,
// until the connection is gone (pgx over TLS cannot send Terminate after
// an interrupted write, and waits up to 15s for the server to hang up),
// and wait_leave, which must remove that row, waits for it meanwhile.
func (q *queueState) keep(ctx context.Context, d txDriver) txOutcome {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), q.commitTimeout)
	defer cancel()
	if _, err := d.commit(cctx); err != nil {
		return stepFailed(ctx, OpLock, err)
	}
	return txOutcome{end: txLocked}
}

// noQueueSchema reports the errors of a database without lockgen's queue
// (migrations before 00011, a role that may not use it, a server that
// does not support its statement): such a Locker's waiting calls wait in
// the server's queue, as before.
func noQueueSchema(err error) bool {
	switch SQLState(err) {
	case "3F000": // no schema pgadvisory
		return true
	case "42883", "42501", "0A000": // no wait_try, no right to call it, or a server that cannot run it
		msg := err.Error()
		return strings.Contains(msg, "pgadvisory.wait_try") || strings.Contains(msg, "pgadvisory.fence_wait_try")
	}
	return false
}

// waitPath is what a queued wait needs from its driver besides the
// protocol: a statement on any pool connection, and a listening
// connection (nil: the driver cannot listen).
type waitPath struct {
	exec   func(ctx context.Context, query string, args ...any) error
	listen func(ctx context.Context) (notifyConn, error)
}

// serverWaits bounds how many heads of a Locker's queues wait on the
// server at once (each on a pool connection): with many locks held
// by holders that did not queue, their heads would otherwise take every
// connection of the pool, again at each try, and starve the pool's other
// users. A head that gets no slot at once polls as before; it never waits
// for a slot. A slot is held from the try's start until its lock
// statement returns, granted or not, not while fn runs.
type serverWaits struct {
	n atomic.Int32
	// budget overrides serverWaitBudget when positive (tests).
	budget atomic.Int32
	// pool is the Locker's pool (*sql.DB, *pgxpool.Pool), set by New.
	pool any
}

// room reports the pool's size (0: unlimited) and whether it has a
// connection to spare besides the one the next try takes, from the pool's
// own counters (no round trip). Another pool: no spare.
func (w *serverWaits) room() (maxConns int, spare bool) {
	switch p := w.pool.(type) {
	case *pgxpool.Pool:
		st := p.Stat()
		return int(st.MaxConns()), st.IdleConns()+st.MaxConns()-st.TotalConns() >= 2
	case *sql.DB:
		st := p.Stats()
		if st.MaxOpenConnections <= 0 {
			return 0, true
		}
		return st.MaxOpenConnections, st.Idle+st.MaxOpenConnections-st.OpenConnections >= 2
	}
	return 0, false
}

// serverWaitBudget is the number of a Locker's heads that may wait on the
// server at once: a quarter of the pool's connections, at least 1; 4 when
// the pool's size is unlimited (database/sql's MaxOpenConns 0).
func serverWaitBudget(maxConns int) int32 {
	if maxConns <= 0 {
		return 4
	}
	return int32(max(1, maxConns/4))
}

// acquire takes a slot for a head's next try if one is free and the pool
// has a connection to spare; it never waits.
func (w *serverWaits) acquire() bool {
	maxConns, spare := w.room()
	if !spare {
		return false
	}
	budget := serverWaitBudget(maxConns)
	if b := w.budget.Load(); b > 0 {
		budget = b
	}
	for {
		n := w.n.Load()
		if n >= budget {
			return false
		}
		if w.n.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (w *serverWaits) release() { w.n.Add(-1) }

// runQueued is the transaction-lock protocol of a queued call, between its
// observers' start and end: runTx with wait_try until granted, sleeping in
// between without a connection. Each try runs on a new driver state from
// attempt.
func runQueued(ctx context.Context, c *callState, path waitPath, attempt func() (txDriver, func() error)) error {
	return c.observed(ctx, c.callKind(), c.window, 0, func(ctx context.Context) error {
		q := &queueState{ttlMS: max(1, waitTTL(c.locker.interval).Milliseconds()), commitTimeout: c.locker.checkTimeout, slots: &c.locker.serverWaits}
		if c.fencing {
			q.caller = rand.Int64N(math.MaxInt64) + 1
		}
		c.queue = q
		if c.timeout > 0 {
			q.deadline = time.Now().Add(c.timeout)
		}
		var sub *waitSub
		defer func() {
			if sub != nil {
				c.locker.waits.unsubscribe(sub)
				c.locker.polls.exit()
			}
		}()
		next := waitPollMin
		for {
			// The head of the queue, behind a holder that did not queue,
			// may wait for it on the server in this try, if it gets a
			// slot (see serverWaits).
			q.block = q.seq.Valid && q.head.Bool && c.locker.serverWaits.acquire()
			d, call := attempt()
			if c.shared {
				// Granted, a shared call lets the Locker's other shared
				// waiters for the lock try at once: those that no
				// exclusive waiter precedes share it now (their NOTIFY
				// comes only when a holder releases).
				fn := call
				call = func() error { c.locker.waits.wakeShared(c.ids); return fn() }
			}
			o := runTx(ctx, c, d, call)
			q.unread = q.unread || (q.caller != 0 && o.end == txFailed)
			q.unblock() // when runTx did not get as far as the lock statement
			if o.end == txFailed && !q.seq.Valid && noQueueSchema(o.err) {
				// No queue in this database: wait in the server's.
				c.locker.noQueue.Store(true)
				c.queue = nil
				d, call = attempt()
				return c.txError(runTx(ctx, c, d, call))
			}
			if o.end == txFailed && !q.seq.Valid && SQLState(o.err) == "25006" {
				// The session's transactions are read-only by default
				// (default_transaction_read_only): the queue cannot be
				// written, and lockgen does not override the setting.
				// This call waits in the server's queue, as it did
				// before the queue existed.
				c.queue = nil
				d, call = attempt()
				return c.txError(runTx(ctx, c, d, call))
			}
			if o.end != txLocked {
				if o.end != txCommitted {
					q.leave(ctx, c, path)
				}
				// The lock, if this call held it, is released. Its
				// NOTIFY, when it sent one, names the next waiter: that
				// one tries at once if it is this Locker's (the NOTIFY
				// itself comes back through the listener a moment later),
				// and only that one, since the others would only refresh
				// their rows. Otherwise (no NOTIFY: a holder that took
				// the lock without queueing, or a rollback) the Locker's
				// waiters for the lock all try at once.
				if o.end == txCommitted && q.next.Valid && len(c.ids) == 1 {
					c.locker.waits.wakeNamed(c.ids[0], q.next.Int64)
				} else {
					c.locker.waits.wakeAll(c.ids)
				}
				return c.txError(o)
			}
			if sub == nil {
				sub = c.locker.waits.subscribe(c.ids, c.shared, path.listen)
				c.locker.polls.enter()
			}
			sub.seq.Store(q.seq.Int64)
			sleep := waitHeartbeat(c.locker.interval)
			if q.head.Bool || !c.locker.waits.listening() {
				sleep = min(sleep, next/2+rand.N(next/2+1))
				next = min(2*next, waitPollMax)
			}
			woken, err := q.pause(ctx, c, sub, sleep)
			if err != nil {
				q.leave(ctx, c, path)
				return err
			}
			if woken {
				next = waitPollMin
			}
		}
	})
}

// pause is a queued call's wait between two tries, of either kind (a
// transaction or a session lock): sleep, then the Locker's next poll slot
// (pollGate.wait); a wake-up (sub) ends either at once. It returns whether
// the call was woken, or the error that ends its wait: ctx's, or
// WithWait's timeout passing. The caller leaves the queue on an error.
func (q *queueState) pause(ctx context.Context, c *callState, sub *waitSub, sleep time.Duration) (woken bool, err error) {
	timeout := func() error { return q.timedOut(ctx, c) }
	if !q.deadline.IsZero() {
		left := time.Until(q.deadline)
		if left <= 0 {
			return false, timeout()
		}
		sleep = min(sleep, left)
	}
	t := time.NewTimer(sleep)
	defer t.Stop()
	select {
	case <-t.C:
		// A poll: it waits for the Locker's next poll slot.
		switch got, err := c.locker.polls.wait(ctx, q.deadline, q.refreshBy, sub.ch); {
		case err != nil:
			return false, c.failure(ctx, OpLock, err)
		case got == pollDeadline:
			return false, timeout()
		default:
			return got == pollWoken, nil
		}
	case <-sub.ch:
		return true, nil
	case <-ctx.Done():
		return false, c.failure(ctx, OpLock, ctx.Err())
	}
}

// timedOut is the error of a queued wait whose WithWait timeout passed.
func (q *queueState) timedOut(ctx context.Context, c *callState) error {
	return c.refusal(ctx, OpLock, ErrLockTimeout, fmt.Errorf("the lock was not granted within %v (WithWait)", c.timeout))
}

// leave removes the call's row from the queue, if it joined, even when
// ctx is done; a failure leaves the row to expire. A fenced call looks
// for a row it may have joined without learning its place too.
func (q *queueState) leave(ctx context.Context, c *callState, path waitPath) {
	if !q.seq.Valid && !q.unread {
		return
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.locker.checkTimeout)
	defer cancel()
	var err error
	if q.unread {
		var seq any
		if q.seq.Valid {
			seq = q.seq.Int64
		}
		err = path.exec(lctx, fencedLeaveSQL, c.idsList(), seq, q.caller)
	} else {
		err = path.exec(lctx, waitLeaveSQL, c.idsList(), q.seq.Int64)
	}
	if err == nil {
		q.seq.Valid = false
	}
}

// notifyConn is a connection that listens on waitChannel.
type notifyConn interface {
	// wait returns the lock ID and the place in its queue of the waiter
	// that the next notification wakes.
	wait(ctx context.Context) (id, seq int64, err error)
	close()
}

// errCannotListen: the path to the server cannot deliver notifications
// (a pooler, or a driver without them). Waiters poll.
var errCannotListen = errors.New("pgadvisory: cannot listen on this connection")

// waitHub is a Locker's listening connection and the waiters it wakes,
// by lock ID. The connection is opened when the first call waits and
// closed a while after the last one stopped waiting.
type waitHub struct {
	mu        sync.Mutex
	subs      map[int64]map[*waitSub]struct{}
	n         int
	cancel    context.CancelFunc // stops the listener; nil when none runs
	idle      *time.Timer        // closes the listener once nobody waits
	isListen  bool               // LISTEN is in force on the connection
	cannot    bool               // the path cannot listen: waiters poll
	listeners int                // listening connections opened (tests)
}

// waitSub is one waiting call's wake-up.
type waitSub struct {
	ids    []int64      // the call's locks: one, or a set's
	shared bool         // a shared call (WithShared)
	seq    atomic.Int64 // the call's place in the queues, once it joined
	ch     chan struct{}
}

// waitLinger is how long the listening connection stays open once no call
// waits.
const waitLinger = 5 * time.Second

// subscribe registers a waiter of locks ids (a set's waiter is woken by
// a wake-up of any of them; shared: a shared call), and starts the
// listener when none runs and the path may listen.
func (h *waitHub) subscribe(ids []int64, shared bool, listen func(context.Context) (notifyConn, error)) *waitSub {
	s := &waitSub{ids: ids, shared: shared, ch: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs == nil {
		h.subs = map[int64]map[*waitSub]struct{}{}
	}
	for _, id := range ids {
		m := h.subs[id]
		if m == nil {
			m = map[*waitSub]struct{}{}
			h.subs[id] = m
		}
		m[s] = struct{}{}
	}
	h.n++
	if h.idle != nil {
		h.idle.Stop()
		h.idle = nil
	}
	if h.cancel == nil && !h.cannot && listen != nil {
		ctx, cancel := context.WithCancel(context.Background())
		h.cancel = cancel
		h.listeners++
		go h.run(ctx, listen)
	}
	return s
}

// unsubscribe removes s; the listener stops waitLinger after the last
// waiter left, unless another one came.
func (h *waitHub) unsubscribe(s *waitSub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range s.ids {
		if m := h.subs[id]; m != nil {
			delete(m, s)
			if len(m) == 0 {
				delete(h.subs, id)
			}
		}
	}
	h.n--
	if h.n == 0 && h.cancel != nil && h.idle == nil {
		h.idle = time.AfterFunc(waitLinger, func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.n == 0 && h.cancel != nil {
				h.cancel()
				h.cancel = nil
			}
			h.idle = nil
		})
	}
}

// listening reports whether notifications reach this Locker now.
func (h *waitHub) listening() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.isListen
}

// wake wakes the waiter of lock id whose place is seq, or every waiter of
// lock id when none has that place yet (the notification may come before
// the waiter learned its place), or every waiter when all is true.
func (h *waitHub) wake(id, seq int64, all bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if all {
		for _, m := range h.subs {
			for s := range m {
				s.signal()
			}
		}
		return
	}
	h.wakeLocked(id, seq)
}

// wakeLocked is wake of lock id's waiters, under h.mu.
func (h *waitHub) wakeLocked(id, seq int64) {
	m := h.subs[id]
	named := false
	for s := range m {
		named = named || s.seq.Load() == seq
	}
	for s := range m {
		if !named || s.seq.Load() == seq {
			s.signal()
		}
	}
}

// signal wakes s, unless a wake-up is pending already.
func (s *waitSub) signal() {
	select {
	case s.ch <- struct{}{}:
	default:
	}
}

// wakeAll wakes every waiter of each of ids (a released set, or a release
// whose NOTIFY named no waiter this Locker knows), whatever its place:
// wakeLocked with place 0 would wake only the waiters that have not
// learned theirs yet whenever one of them has not, and leave the others
// to their polls.
func (h *waitHub) wakeAll(ids []int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ids {
		for s := range h.subs[id] {
			s.signal()
		}
	}
}

// wakeShared wakes the shared waiters of each of ids (a shared call was
// granted: they may share the lock; the exclusive ones may not take it).
func (h *waitHub) wakeShared(ids []int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ids {
		for s := range h.subs[id] {
			if s.shared {
				s.signal()
			}
		}
	}
}

// wakeNamed wakes the waiter of lock id whose place is seq, if it is
// subscribed with that place now, and no other.
func (h *waitHub) wakeNamed(id, seq int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs[id] {
		if s.seq.Load() == seq {
			select {
			case s.ch <- struct{}{}:
			default:
			}
		}
	}
}

// run keeps a listening connection open until ctx ends. After each
// (re)connection every waiter is woken once, since notifications sent
// while nobody listened are lost.
func (h *waitHub) run(ctx context.Context, listen func(context.Context) (notifyConn, error)) {
	for ctx.Err() == nil {
		conn, err := listen(ctx)
		if errors.Is(err, errCannotListen) {
			h.mu.Lock()
			h.cannot = true
			h.mu.Unlock()
			return
		}
		if err != nil {
			t := time.NewTimer(time.Second)
			select {
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
			continue
		}
		h.setListening(true)
		h.wake(0, 0, true)
		for {
			id, seq, err := conn.wait(ctx)
			if err != nil {
				break
			}
			h.wake(id, seq, false)
		}
		h.setListening(false)
		conn.close()
	}
}

func (h *waitHub) setListening(on bool) {
	h.mu.Lock()
	h.isListen = on
	h.mu.Unlock()
}

// listenSQL starts listening; backendPIDSQL compares the server's pid with
// the one the connection announced (a pooler announces its own).
const (
	listenSQL     = `LISTEN ` + waitChannel
	backendPIDSQL = `SELECT pg_catalog.pg_backend_pid()`
)

// pgxNotifyConn listens on a pgx connection of its own, outside the pool.
type pgxNotifyConn struct{ conn *pgx.Conn }

// pgxListener opens pool's listening connections: new connections with
// the pool's configuration, which never count against its size.
func pgxListener(pool *pgxpool.Pool) func(context.Context) (notifyConn, error) {
	return func(ctx context.Context) (notifyConn, error) {
		return listenWith(ctx, pool.Config().ConnConfig)
	}
}

// listenWith opens a listening connection with a copy of cfg.
func listenWith(ctx context.Context, cfg *pgx.ConnConfig) (notifyConn, error) {
	cfg = cfg.Copy()
	// A configuration read from a connection carries that connection's
	// notification handler: this one must buffer its own.
	cfg.OnNotification = nil
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := startListening(ctx, conn); err != nil {
		cctx, cancel := cleanupContext(ctx)
		_ = conn.Close(cctx)
		cancel()
		return nil, err
	}
	return &pgxNotifyConn{conn: conn}, nil
}

// startListening checks that conn reaches the server directly and listens.
func startListening(ctx context.Context, conn *pgx.Conn) error {
	var pid uint32
	if err := conn.QueryRow(ctx, backendPIDSQL).Scan(&pid); err != nil {
		return err
	}
	if pid != conn.PgConn().PID() {
		return errCannotListen
	}
	_, err := conn.Exec(ctx, listenSQL)
	return err
}

func (p *pgxNotifyConn) wait(ctx context.Context) (int64, int64, error) {
	return waitNotification(ctx, p.conn)
}

func (p *pgxNotifyConn) close() {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_ = p.conn.Close(ctx)
}

// waitNotification returns the lock ID and place ("id:seq") of conn's
// next notification.
func waitNotification(ctx context.Context, conn *pgx.Conn) (id, seq int64, err error) {
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return 0, 0, err
		}
		if n == nil {
			continue
		}
		a, b, _ := strings.Cut(n.Payload, ":")
		id, err1 := strconv.ParseInt(a, 10, 64)
		seq, err2 := strconv.ParseInt(b, 10, 64)
		if err1 == nil && err2 == nil {
			return id, seq, nil
		}
	}
}

// stdlibListener opens db's listening connections when its driver is
// pgx's stdlib: new connections with the configuration of one of the
// pool's, outside the pool, so that a listener never takes a connection
// that the waiters' tries need (other drivers cannot listen:
// errCannotListen).
func stdlibListener(db *sql.DB) func(context.Context) (notifyConn, error) {
	return func(ctx context.Context) (notifyConn, error) {
		conn, err := db.Conn(ctx)
		if err != nil {
			return nil, err
		}
		var cfg *pgx.ConnConfig
		_ = conn.Raw(func(dc any) error {
			if pc, is := dc.(interface{ Conn() *pgx.Conn }); is {
				cfg = pc.Conn().Config()
			}
			return nil
		})
		_ = conn.Close()
		if cfg == nil {
			return nil, errCannotListen
		}
		return listenWith(ctx, cfg)
	}
}
