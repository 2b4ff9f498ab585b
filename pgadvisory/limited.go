package pgadvisory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/lockgen/lockgen/keyspace"
)

// MaxLimit is the largest n of a limited lock ([Locker.RunLimited]).
const MaxLimit = 1024

// limitState is a limited call's state: the lock's declared limit
// (WithLimit), the call's n, and what its slot statement returned.
type limitState struct {
	declared int // WithLimit's n; 0: none declared
	n        int // the call's n; 0 before RunLimited or RunSessionLimited set it
	pool     any // the Locker's pool, for slot_register

	start      int32         // the first slot tried
	slot       sql.NullInt32 // the slot taken (NULL: none free)
	registered sql.NullInt32 // the lock's registered limit (NULL: none)
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
// pgadvisory.slot_id, so a SQL job can take a slot too). One statement,
// pgadvisory.slot_acquire, tries them from a random start, so that callers
// spread over the slots, and takes the first free one; [Locker.Slot] tells
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
// With [WithWait] the call waits for any slot: it polls, a slot statement
// at a time, from 1ms doubling to 50ms apart with jitter, and holds no
// connection in between. Waiters are not served in arrival order, and the
// server does not see them (pgadvisory.slot_status counts waiters in the
// server's queue only): the server has no queue for "any of n locks", and
// a waiter in a server queue would hold a connection. A timeout ends the
// wait with [ErrLockTimeout].
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

// slotAcquireSQL is the slot statement of a transaction-limited call: the
// columns of a lock statement (granted, standby), then the slot and the
// registered limit. "Granted" is true when a slot was taken, and when the
// registered limit is not the call's: checkRegistered then tells.
const slotAcquireSQL = `SELECT s.slot IS NOT NULL OR s.registered IS DISTINCT FROM $2, pg_catalog.pg_is_in_recovery(), s.slot, s.registered
FROM pgadvisory.slot_acquire($1, $2, $3, false, NULL) AS s`

// statement is the call's slot statement, trying the slots from a random
// start.
func (s *limitState) statement(c *callState) lockStatement {
	s.start = int32(rand.IntN(s.n))
	s.slot, s.registered = sql.NullInt32{}, sql.NullInt32{}
	return lockStatement{sql: slotAcquireSQL, args: []any{c.ids[0], int32(s.n), s.start},
		extra: []any{&s.slot, &s.registered}}
}

// errUnregistered is checkRegistered's answer when the registered limit is
// missing or another: the call registers its n (slot_register) and tries
// again.
var errUnregistered = errors.New("pgadvisory: the limit is not registered as this call's n")

// checkRegistered runs after the slot statement: the registered limit must
// be the call's n.
func (s *limitState) checkRegistered() error {
	if !s.registered.Valid || int(s.registered.Int32) != s.n {
		return errUnregistered
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

// Polling bounds of a waiting limited call.
const (
	limitedPollMin = time.Millisecond
	limitedPollMax = 50 * time.Millisecond
)

// runLimited is the transaction-lock protocol of a limited call, between
// its observers' start and end: runTx with the slot statement, registering
// the call's n when the lock has no limit or another one, and polling for a
// free slot with WithWait. Each try runs on a new driver state from attempt
// (a loser's ROLLBACK finishes in the background on the previous one).
func runLimited(ctx context.Context, c *callState, attempt func() (txDriver, func() error)) error {
	return c.observed(ctx, CallLimited, "", 0, func(ctx context.Context) error {
		s := c.lim
		lockID := c.ids[0]
		p := newPoller(c)
		registered := false
		for {
			d, call := attempt()
			withSlot := func() error {
				key := d.txKey()
				txSlots.Store(key, int(s.slot.Int32))
				defer txSlots.Delete(key)
				return call()
			}
			o := runTx(ctx, c, d, withSlot)
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
				if err := p.sleep(ctx, c); err != nil {
					return err
				}
				continue
			}
			return c.txError(o)
		}
	})
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
// doubled up to limitedPollMax. It returns the call's error once ctx is
// done or the wait's timeout passed.
func (p *poller) sleep(ctx context.Context, c *callState) error {
	d := p.next/2 + rand.N(p.next/2+1)
	p.next = min(2*p.next, limitedPollMax)
	if !p.deadline.IsZero() {
		left := time.Until(p.deadline)
		if left <= 0 {
			return c.refusal(ctx, "lock", ErrLockTimeout, fmt.Errorf("no slot of %d was free within %v (WithWait)", c.lim.n, c.timeout))
		}
		d = min(d, left)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return c.failure(ctx, "lock", ctx.Err())
	}
}

// RunSessionLimited runs fn while holding one of the n slots of lock at
// session level, for work that spans many transactions: at most n calls
// for one lock run fn at once, across processes. It is
// [Locker.RunSession] with a counted lock: the slot is the session-level
// advisory lock of its slot key (see [Locker.RunLimited] for the slots,
// the limit's registration and its refusals), taken on one of the Locker's
// shared session connections, and fn's context is canceled with a cause
// wrapping [ErrLockLost] when the periodic check finds the slot's
// connection dead or the slot gone ([WithCheckInterval],
// [WithCheckTimeout]); the release verifies the slot as RunSession's does.
// [Slot] reads the slot from fn's context. Errors name the slot's key in
// LockIDs once a slot is held.
//
// The slots are tried one statement each, from a random start, on a
// shared connection, passing over the slots that other calls of this
// Locker hold without a round trip: an uncontended call costs what
// RunSession costs plus one statement that reads the registered limit, a
// call with no free slot up to n statements. With [WithWait] the call
// polls as RunLimited's does, holding no connection of its own. It needs
// the shared session connections: a Locker made with WithSessionConns(0)
// refuses it with [ErrInvalidArgument]. Poolers and standbys are refused
// as RunSession refuses them.
func (l *Locker[TTx]) RunSessionLimited(ctx context.Context, lock Lock, n int, fn func(context.Context) error, opts ...Option) error {
	c, err := l.call(lock, opts, famSessionLimited, fn == nil)
	if err != nil {
		return err
	}
	pool, _, _ := l.d.handle()
	if err := c.setLimit(n, pool); err != nil {
		return err
	}
	c.session = true
	return c.observed(ctx, CallSessionLimited, "", 0, func(ctx context.Context) error {
		p := l.s.sessionPool()
		if p == nil {
			return c.invalid("options", errors.New("RunSessionLimited holds its slot on the Locker's shared session "+
				"connections, and this Locker has none (WithSessionConns(0))"))
		}
		return runSessionLimited(ctx, c, p, l.d.sessions(), fn)
	})
}

// registeredLimitSQL reads a lock's registered limit (NULL: none).
const registeredLimitSQL = `SELECT (SELECT l.n FROM pgadvisory.slot_limit AS l WHERE l.lock_id OPERATOR(pg_catalog.=) $1)`

// runSessionLimited is the session protocol of a limited call on the
// shared connections p: take a slot (trySlot), read the registered limit
// on the slot's connection (registering the call's n once when it is
// missing or another), then run fn as runSessionMux does.
func runSessionLimited(ctx context.Context, c *callState, p *sessionPool, open func(context.Context) (sessionConn, error),
	fn func(context.Context) error) (err error) {
	s := c.lim
	lockID := c.ids[0]
	start := time.Now()
	poll := newPoller(c)
	registered := false
	for {
		if err := ctx.Err(); err != nil {
			return c.failure(ctx, "begin", err)
		}
		workCtx, cancel := context.WithCancelCause(ctx)
		l := &muxLock{c: c, open: open, cancel: cancel}
		sc, slot, err := p.trySlot(ctx, l, lockID)
		if err != nil {
			cancel(nil)
			c.ids = []int64{lockID}
			return err
		}
		if sc == nil {
			cancel(nil)
			c.ids = []int64{lockID}
			if !c.wait {
				return c.locked()
			}
			if err := poll.sleep(ctx, c); err != nil {
				return err
			}
			continue
		}
		var reg sql.NullInt32
		if err := (muxQuerier{sc: sc, c: c}).queryRow(ctx, registeredLimitSQL, []any{lockID}, &reg); err != nil {
			_, _ = p.release(ctx, sc, l)
			cancel(nil)
			c.ids = []int64{lockID}
			return c.failure(ctx, "lock", err)
		}
		if !reg.Valid || int(reg.Int32) != s.n {
			lost, unreleased := p.release(ctx, sc, l)
			cancel(nil)
			c.ids = []int64{lockID}
			if lost != nil || unreleased != nil {
				return c.sessionOutcome(ctx, lost, unreleased, nil)
			}
			if registered {
				return s.mismatch(ctx, c, int(reg.Int32))
			}
			if err := s.register(ctx, c, lockID); err != nil {
				return err
			}
			registered = true
			continue
		}
		return runSessionSlot(ctx, workCtx, c, p, sc, l, slot, start, fn)
	}
}

// runSessionSlot runs fn holding the slot l took on sc, and releases it.
func runSessionSlot(ctx, workCtx context.Context, c *callState, p *sessionPool, sc *sharedConn, l *muxLock, slot int,
	start time.Time, fn func(context.Context) error) (err error) {
	acquired := time.Now()
	c.granted(acquired.Sub(start), 0)
	defer func() {
		lost, unreleased := p.release(ctx, sc, l)
		l.cancel(nil)
		if obs := c.obs; obs != nil {
			obs.held = time.Since(acquired)
		}
		if r := recover(); r != nil {
			panic(r)
		}
		err = c.sessionOutcome(ctx, lost, unreleased, err)
	}()
	return fn(context.WithValue(workCtx, slotKey{}, slot))
}

// trySlot tries the slots of c's limited lock on the shared connections,
// one at a time from a random start: the first granted one is held by l
// (c.ids is then its key). A slot another call of this process holds is
// passed over without a round trip (see sessionPool.try). None free: a nil
// connection and no error.
func (p *sessionPool) trySlot(ctx context.Context, l *muxLock, lockID int64) (*sharedConn, int, error) {
	c := l.c
	n := c.lim.n
	first := rand.IntN(n)
	for k := range n {
		slot := (first + k) % n
		c.ids = []int64{keyspace.SlotID(lockID, int32(slot))}
		c.idsText = ""
		sc, granted, err := p.try(ctx, l)
		if err != nil {
			return nil, 0, err
		}
		if granted {
			return sc, slot, nil
		}
	}
	return nil, 0, nil
}
