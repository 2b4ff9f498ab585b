package pgadvisory

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/lockgen/lockgen/keyspace"
)

// MaxLimit is the largest n of a limited lock ([Locker.RunLimited]).
const MaxLimit = 1024

// limitState is a limited call's state: the lock's declared limit
// (WithLimit), the call's n, and what its slot statement returned.
type limitState struct {
	declared int     // WithLimit's n; 0: none declared
	n        int     // the call's n; 0 before RunLimited or RunSessionLimited set it
	pool     any     // the Locker's pool, for slot_register
	keys     []int64 // the slots' keys (slotKeys), computed once per call

	start      int32       // the first slot tried
	slot       pgtype.Int4 // the slot taken (NULL: none free)
	registered pgtype.Int4 // the lock's registered limit (NULL: none)

	// A waiting call's tries (WithWait) use slotWaitSQL: waited tells it
	// that the call has slept, notified whether its statement queued the
	// NOTIFY that wakes a waiter at commit.
	waits    bool
	waited   bool
	notified pgtype.Bool
}

// WithLimit declares that the lock is limited to n holders at once: it is
// taken with [Locker.RunLimited] or [Locker.RunSessionLimited] only, whose
// n must then be n, and the other verbs refuse it with
// [ErrInvalidArgument] (a holder they let in would be one that no slot
// counts). Generated code declares it for locks with limit: in locks.yaml.
func WithLimit(n int) Option {
	return optionFunc(func(c *callState) {
		c.mark(optLimit)
		if n < 1 || n > MaxLimit {
			c.setErr(ErrInvalidArgument, fmt.Errorf("WithLimit(%d): a limit is 1 to %d", n, MaxLimit))
			return
		}
		if c.lim == nil {
			c.lim = &limitState{}
		}
		c.lim.declared = n
	})
}

// setLimit records the call's n and checks it against the lock's declared
// limit.
func (c *callState) setLimit(n int, pool any) error {
	if c.lim == nil {
		c.lim = &limitState{}
	}
	if n == 0 && c.lim.declared != 0 {
		n = c.lim.declared
	}
	if n < 1 || n > MaxLimit {
		return c.invalid("options", fmt.Errorf("n = %d: a limited lock has 1 to %d slots "+
			"(0 takes the limit the lock declares with WithLimit, and this lock declares none)", n, MaxLimit))
	}
	if d := c.lim.declared; d != 0 && d != n {
		return c.invalid("options", fmt.Errorf("n = %d, but the lock is declared with limit %d (%s): "+
			"every caller of a limited lock must agree on its n", n, d, c.optionName(optLimit)))
	}
	c.lim.n, c.lim.pool = n, pool
	return nil
}

// RunLimited runs fn inside a transaction that holds one of the n slots of
// lock: at most n calls for one lock run fn at once, across processes. It
// is [Locker.RunExclusive] with a counted lock: fn's writes and the slot
// commit together, a rolled-back or broken transaction frees its slot at
// once, and it works through a transaction pooler (PgBouncer in
// transaction mode).
//
// The slots are the transaction-level advisory locks of the keys
// keyspace.SlotID(lock.ID, s) for s in 0..n-1 (the SQL twin is
// pgadvisory.slot_id, so a SQL job can take a slot too). One statement
// tries them from a random start, so that callers spread over the slots
// and an uncontended call's first try succeeds, takes the first free one
// and reads the lock's registered limit; [Locker.Slot] tells
// fn which. Without a free slot the call returns an error matching
// [ErrLocked] (Op "lock") without calling fn. Round trips are those of
// RunExclusive: on [Pgx] BEGIN and the slot statement travel together, so
// an uncontended call costs two and a contended one returns after one.
//
// n is part of the lock's identity. The lock's limit is registered in
// pgadvisory.slot_limit by its first call (one more round trip, once per
// lock and database), and the slot statement reads it with the slot: a
// call whose n differs is refused with [ErrInvalidArgument] naming both
// values while any slot of the registered limit is held, so callers that
// disagree never run past the smaller limit. When no slot is held, such a
// call changes the registered limit to its n (pgadvisory.slot_register
// takes every slot of the old limit while it does), which is how a
// deployment changes a lock's limit; callers with the old n are refused
// from then on.
//
// With [WithWait] the call waits for any slot, holding no connection: it
// tries a slot statement at a time and sleeps in between until a release
// wakes it or its polling interval passes (1ms doubling to 50ms, with
// jitter). A waiting call that took its slot after sleeping, or past its
// first slot, sends NOTIFY pgadvisory_wait with its release (delivered at
// commit), which wakes one waiter of each Locker listening for it (the
// Locker's listening connection, as for waits in lockgen's queue; direct
// connections only); every release wakes the first waiter of its own
// Locker directly, and other Lockers find a release without NOTIFY by
// polling (at 50ms while they listen). Waiters are not served
// in arrival order, and the server does not see them
// (pgadvisory.slot_status counts waiters in the server's queue only): the
// server has no queue for "any of n locks", and a waiter in a server queue
// would hold a connection. A timeout ends the wait with [ErrLockTimeout].
//
// n 0 takes the limit the lock declares with [WithLimit] (generated code
// declares it for limit: in locks.yaml, so that callers need not repeat
// it). RunLimited refuses, with [ErrInvalidArgument] before anything is
// sent, n outside 1..[MaxLimit], an n that differs from the lock's WithLimit,
// [WithShared] (slots are exclusive, so n slots are n holders),
// [WithFencing] (the n holders run at once by design, and one published
// token per lock would make the others' writes stale), [WithLocks] and
// [WithHolder]. A lock declared with WithLimit is refused by RunOnce (and
// every other verb): at most once per window needs a single holder.
// Errors, fn's panics and COMMIT's outcome are as for RunExclusive.
func (l *Locker[TTx]) RunLimited(ctx context.Context, lock Lock, n int, fn func(TTx) error, opts ...Option) error {
	c, err := l.call(lock, opts, famLimited, fn == nil)
	if err != nil {
		return err
	}
	pool, _, _ := l.d.handle()
	if err := c.setLimit(n, pool); err != nil {
		return err
	}
	return l.d.runTx(ctx, c, fn)
}

// Slot returns which of the n slots (0 to n-1) the limited call whose
// transaction is tx holds, while fn of [Locker.RunLimited] runs, and false
// for any other transaction. It sends nothing.
func (l *Locker[TTx]) Slot(tx TTx) (int, bool) {
	v, ok := txSlots.Load(any(tx))
	if !ok {
		return 0, false
	}
	return v.(int), true
}

// Slot returns which of the n slots (0 to n-1) the call holds, from the
// context that fn of [Locker.RunSessionLimited] receives, and false for any
// other context. (RunLimited's fn receives a transaction: see
// [Locker.Slot].)
func Slot(ctx context.Context) (int, bool) {
	s, ok := ctx.Value(slotKey{}).(int)
	return s, ok
}

// slotKey is the context key of a session-limited call's slot.
type slotKey struct{}

// txSlots maps the transaction of a running RunLimited call to its slot.
var txSlots sync.Map

// slotSQL is the slot statement of a transaction-limited call. Its
// columns are those of a lock statement (granted, standby), then the slot
// taken (NULL: none free) and the lock's registered limit (NULL: none).
// "Granted" is always true: checkSlot tells from the slot and the limit
// whether the call holds a slot, none is free, or the limit is not the
// call's (which is refused even when no slot is free).
//
// $1 is the lock's ID, $2 the call's n, $3 the first slot tried and $4 its
// key, computed here (keyspace.SlotID). An uncontended call costs one
// pg_try_advisory_xact_lock and a read of one row by its primary key: no
// function call, whose cost (a PL/pgSQL or SQL function with a pinned
// search_path) would exceed the lock's. Only when that slot is taken does
// pgadvisory.slot_try try the others, from $3+1 on (mod n).
//
// The limit is read after the slot was granted (the subquery on
// slot_limit refers to g.slot, so it runs once g is computed), but with
// the statement's snapshot, taken before: a change of the limit committed
// in between is not in it. Such a change updated the row, so the version
// this snapshot sees has a nonzero xmax then, and the statement asks
// pgadvisory.slot_registered, which reads it with a fresh snapshot; a
// version with xmax 0 is the newest (see migrations/00010_semaphore.sql).
const slotSQL = slotSelectSQL + slotFromSQL

// slotSelectSQL and slotFromSQL are the slot statement's parts; a waiting
// call's statement (slotWaitSQL) has one more column between them.
const (
	slotSelectSQL = `SELECT true, pg_catalog.pg_is_in_recovery(), g.slot,
       (SELECT CASE WHEN g.slot IS NULL OR l.xmax OPERATOR(pg_catalog.=) '0'::pg_catalog.xid THEN l.n
                    ELSE pgadvisory.slot_registered(l.lock_id) END
          FROM pgadvisory.slot_limit AS l WHERE l.lock_id OPERATOR(pg_catalog.=) $1::pg_catalog.int8)`
	slotFromSQL = `
FROM (SELECT CASE WHEN pg_catalog.pg_try_advisory_xact_lock($4::pg_catalog.int8) THEN $3::pg_catalog.int4
                  ELSE pgadvisory.slot_try($1::pg_catalog.int8, $2::pg_catalog.int4, $3::pg_catalog.int4, false,
                                           ARRAY[$3::pg_catalog.int4]) END AS slot) AS g`
)

// slotWaitSQL is the slot statement of a waiting call (WithWait). Its last
// column tells whether it queued NOTIFY pgadvisory_wait with "lockID:0",
// which PostgreSQL delivers when the transaction commits, that is when the
// slot is released: it does when the call took a slot after it had slept
// ($5) or past its first one (the first was taken), so that other callers
// are waiting, likely. The listening connection of each Locker whose calls
// wait for the lock wakes one of them (limitedWaiters). Every release
// also wakes the first waiter of its own Locker directly; other Lockers'
// waiters find a release that sends no NOTIFY (a call that did not wait,
// a rollback) by polling.
const slotWaitSQL = slotSelectSQL + `,
       (CASE WHEN g.slot IS NOT NULL AND ($5::pg_catalog.bool OR g.slot OPERATOR(pg_catalog.<>) $3::pg_catalog.int4)
             THEN pg_catalog.pg_notify('` + waitChannel + `', $1::pg_catalog.int8::pg_catalog.text OPERATOR(pg_catalog.||) ':0')
        END) IS NOT NULL` + slotFromSQL

// statement is the call's slot statement, trying the slots from a random
// start: uncontended, the first try succeeds.
func (s *limitState) statement(c *callState) lockStatement {
	s.start = int32(rand.IntN(s.n))
	s.slot, s.registered, s.notified = pgtype.Int4{}, pgtype.Int4{}, pgtype.Bool{}
	id := c.ids[0]
	if s.waits {
		return lockStatement{sql: slotWaitSQL, args: []any{id, int32(s.n), s.start, keyspace.SlotID(id, s.start), s.waited},
			extra: []any{&s.slot, &s.registered, &s.notified}}
	}
	return lockStatement{sql: slotSQL, args: []any{id, int32(s.n), s.start, keyspace.SlotID(id, s.start)},
		extra: []any{&s.slot, &s.registered}}
}

// errUnregistered is checkSlot's answer when the registered limit is
// missing or another: the call registers its n (slot_register) and tries
// again.
var errUnregistered = errors.New("pgadvisory: the limit is not registered as this call's n")

// errNoSlot is checkSlot's answer when no slot was free.
var errNoSlot = errors.New("pgadvisory: no slot is free")

// checkSlot runs after the slot statement: the registered limit must be
// the call's n, and a slot must have been taken.
func (s *limitState) checkSlot() error {
	if !s.registered.Valid || int(s.registered.Int32) != s.n {
		return errUnregistered
	}
	if !s.slot.Valid {
		return errNoSlot
	}
	return nil
}

// register registers the call's n for the lock (pgadvisory.slot_register,
// in a transaction of its own) and returns nil when it is the registered
// limit afterwards, else an error of kind ErrInvalidArgument naming both.
func (s *limitState) register(ctx context.Context, c *callState, lockID int64) error {
	var reg int32
	if err := leaseQuery(ctx, s.pool, `SELECT pgadvisory.slot_register($1, $2)`, []any{lockID, int32(s.n)}, &reg); err != nil {
		return c.failure(ctx, "lock", err)
	}
	if int(reg) != s.n {
		return s.mismatch(ctx, c, int(reg))
	}
	return nil
}

// mismatch is the refusal of a call whose n is not the lock's registered
// limit reg.
func (s *limitState) mismatch(ctx context.Context, c *callState, reg int) error {
	return c.refusal(ctx, "lock", ErrInvalidArgument, fmt.Errorf(
		"this call's n is %d, but the lock is limited to %d by callers that hold its slots now: "+
			"every caller of a limited lock must agree on n (a limit changes once no slot of the old one is held)", s.n, reg))
}

// Polling bounds of a waiting limited call (variables for tests).
var (
	limitedPollMin = time.Millisecond
	limitedPollMax = 50 * time.Millisecond
)

// runLimited is the transaction-lock protocol of a limited call, between
// its observers' start and end: runTx with the slot statement, registering
// the call's n when the lock has no limit or another one, and with
// WithWait sleeping until a release wakes the call (limitedWaiters, by
// NOTIFY through the Locker's listening connection opened with listen, or
// directly by a release of the same Locker) or its polling interval
// passes. Each try runs on a new driver state from attempt (a loser's
// ROLLBACK finishes in the background on the previous one).
func runLimited(ctx context.Context, c *callState, listen func(context.Context) (notifyConn, error),
	attempt func() (txDriver, func() error)) error {
	return c.observed(ctx, CallLimited, "", 0, func(ctx context.Context) error {
		s := c.lim
		s.waits = c.wait
		lockID := c.ids[0]
		p := newPoller(c)
		w := c.waiters()
		var sub *waitSub
		defer func() { w.leave(sub) }()
		registered := false
		for {
			d, call := attempt()
			withSlot := func() error {
				// Granted: no longer a waiter, so that the next one is
				// the first, whom a release wakes.
				w.leave(sub)
				sub = nil
				key := d.txKey()
				txSlots.Store(key, int(s.slot.Int32))
				defer txSlots.Delete(key)
				return call()
			}
			o := runTx(ctx, c, d, withSlot)
			if s.slot.Valid {
				// The slot is released: this Locker's first waiter tries
				// at once, without waiting for the NOTIFY (if any) to
				// come back through the server and the listener.
				w.wake(lockID)
			}
			switch {
			case o.end == txFailed && o.err == errUnregistered:
				if registered {
					// Changed again since this call registered it.
					return s.mismatch(ctx, c, int(s.registered.Int32))
				}
				if err := s.register(ctx, c, lockID); err != nil {
					return err
				}
				registered = true
				continue
			case o.end == txLocked && c.wait:
				if sub == nil {
					sub = w.join(lockID, listen)
				}
				w.pace(p)
				if err := p.sleep(ctx, c, sub.wakeup()); err != nil {
					return err
				}
				s.waited = true
				continue
			}
			return c.txError(o)
		}
	})
}

// limitedWaiters are a Locker's waiting limited calls (transaction and
// session level), by lock, in the order they began to wait. Each is
// subscribed to the Locker's waitHub under the lock's ID; the first of a
// lock has place 0 there, the others -1, so that a notification
// "lockID:0" (slotWaitSQL), or a release in this Locker (wake), wakes
// the first one only: one slot was freed, and one waiter per Locker
// tries for it instead of all of them.
type limitedWaiters struct {
	mu   sync.Mutex
	byID map[int64][]*waitSub
}

// lockerWaiters is a Locker's limited waiters with its waitHub and its
// poll gate, which a waiter passes from its join to its leave; the zero
// value (a call without a Locker state) has none, and its methods do
// nothing.
type lockerWaiters struct {
	w     *limitedWaiters
	hub   *waitHub
	polls *pollGate
}

// waiters is the limited waiters of c's Locker.
func (c *callState) waiters() lockerWaiters {
	if c.locker == nil {
		return lockerWaiters{}
	}
	return c.locker.limitedWaiters()
}

// limitedWaiters is the Locker's limited waiters.
func (s *lockerState) limitedWaiters() lockerWaiters {
	return lockerWaiters{w: &s.limited, hub: &s.waits, polls: &s.polls}
}

// join registers a waiter of lock id, last in line.
func (lw lockerWaiters) join(id int64, listen func(context.Context) (notifyConn, error)) *waitSub {
	if lw.w == nil {
		return nil
	}
	sub := lw.hub.subscribe([]int64{id}, false, listen)
	lw.polls.enter()
	w := lw.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byID == nil {
		w.byID = map[int64][]*waitSub{}
	}
	place := int64(-1)
	if len(w.byID[id]) == 0 {
		place = 0
	}
	sub.seq.Store(place)
	w.byID[id] = append(w.byID[id], sub)
	return sub
}

// leave removes sub; the next waiter of its lock becomes the first.
func (lw lockerWaiters) leave(sub *waitSub) {
	if lw.w == nil || sub == nil {
		return
	}
	w := lw.w
	w.mu.Lock()
	subs := w.byID[sub.ids[0]]
	for i, s := range subs {
		if s == sub {
			subs = append(subs[:i:i], subs[i+1:]...)
			break
		}
	}
	if len(subs) == 0 {
		delete(w.byID, sub.ids[0])
	} else {
		w.byID[sub.ids[0]] = subs
		subs[0].seq.Store(0)
	}
	w.mu.Unlock()
	lw.hub.unsubscribe(sub)
	lw.polls.exit()
}

// wake wakes the first waiter of lock id, if this Locker has one.
func (lw lockerWaiters) wake(id int64) {
	if lw.w == nil {
		return
	}
	lw.w.mu.Lock()
	waiting := len(lw.w.byID[id]) > 0
	lw.w.mu.Unlock()
	if waiting {
		lw.hub.wake(id, 0, false)
	}
}

// pace sets a waiter's polling interval to limitedPollMax while the
// Locker listens: releases then wake it, and a poll is needed only for a
// release that sends no NOTIFY in another Locker, while polling from 1ms
// would add tries that find no slot free.
func (lw lockerWaiters) pace(p *poller) {
	if lw.hub != nil && lw.hub.listening() {
		p.next = max(p.next, limitedPollMax)
	}
}

// count is the number of this Locker's calls waiting for lock id.
func (lw lockerWaiters) count(id int64) int {
	if lw.w == nil {
		return 0
	}
	lw.w.mu.Lock()
	defer lw.w.mu.Unlock()
	return len(lw.w.byID[id])
}

// wakeup is the channel that wakes sub's call; nil (never ready) for none.
func (s *waitSub) wakeup() <-chan struct{} {
	if s == nil {
		return nil
	}
	return s.ch
}

// poller spaces a waiting limited call's tries.
type poller struct {
	next     time.Duration
	deadline time.Time // zero: until ctx is done
}

func newPoller(c *callState) *poller {
	p := &poller{next: limitedPollMin}
	if c.wait && c.timeout > 0 {
		p.deadline = time.Now().Add(c.timeout)
	}
	return p
}

// sleep waits before the next try: the current interval with jitter,
// doubled up to limitedPollMax, then the next poll slot of the call's
// Locker (pollGate), or until woken. It returns the call's error once ctx
// is done or the wait's timeout passed.
func (p *poller) sleep(ctx context.Context, c *callState, woken <-chan struct{}) error {
	d := p.next/2 + rand.N(p.next/2+1)
	p.next = min(2*p.next, limitedPollMax)
	timeout := func() error {
		return c.refusal(ctx, "lock", ErrLockTimeout, fmt.Errorf("no slot of %d was free within %v (WithWait)", c.lim.n, c.timeout))
	}
	if !p.deadline.IsZero() {
		left := time.Until(p.deadline)
		if left <= 0 {
			return timeout()
		}
		d = min(d, left)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		if c.locker == nil {
			return nil
		}
		// A poll: it waits for the Locker's next poll slot.
		switch got, err := c.locker.polls.wait(ctx, p.deadline, time.Time{}, woken); {
		case err != nil:
			return c.failure(ctx, "lock", err)
		case got == pollDeadline:
			return timeout()
		}
		return nil
	case <-woken:
		return nil
	case <-ctx.Done():
		return c.failure(ctx, "lock", ctx.Err())
	}
}
