package pgadvisory

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/lockgen/lockgen/keyspace"
)

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
// One statement on a shared connection takes a slot: it tries the slots
// from a random start (pgadvisory.slot_try, session level), passing over
// those that other calls of this Locker hold, takes the first free one
// and reads the lock's registered limit. So a call costs what RunSession
// costs, whatever n: granted, the slot statement and the unlock; with no
// free slot, the slot statement (none when this Locker's calls hold every
// slot); a connection's check before them where RunSession pays one. With [WithWait] the call
// waits as RunLimited's does, holding no connection of its own (its
// release sends no NOTIFY: it wakes its own Locker's first waiter). It needs
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
		return runSessionLimited(ctx, c, p, l.hooks().open, fn)
	})
}

// runSessionLimited is the session protocol of a limited call on the
// shared connections p: take a slot and read the registered limit in one
// statement (trySlot), registering the call's n once when the limit is
// missing or another, then run fn as runSessionMux does.
func runSessionLimited(ctx context.Context, c *callState, p *sessionPool, open func(context.Context) (sessionConn, error),
	fn func(context.Context) error) (err error) {
	s := c.lim
	lockID := c.ids[0]
	start := time.Now()
	poll := newPoller(c)
	w := c.waiters()
	var sub *waitSub
	defer func() { w.leave(sub) }()
	registered := false
	for {
		if err := ctx.Err(); err != nil {
			return c.failure(ctx, "begin", err)
		}
		workCtx, cancel := context.WithCancelCause(ctx)
		l := &muxLock{c: c, open: open, cancel: cancel}
		sc, slot, reg, err := p.trySlot(ctx, l, lockID)
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
			if sub == nil {
				// Woken by this Locker's releases, and by the NOTIFY of
				// transaction-level holders while the Locker listens.
				sub = w.join(lockID, nil)
			}
			if err := poll.sleep(ctx, c, sub.wakeup()); err != nil {
				return err
			}
			continue
		}
		if !reg.Valid || int(reg.Int32) != s.n {
			lost, unreleased := p.release(ctx, sc, l)
			w.wake(lockID)
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
		// Granted: no longer a waiter, so that the next one is the
		// first, whom a release wakes.
		w.leave(sub)
		sub = nil
		return runSessionSlot(ctx, workCtx, c, p, sc, l, lockID, slot, start, fn)
	}
}

// runSessionSlot runs fn holding the slot l took on sc, and releases it,
// waking this Locker's first waiter for lock lockID.
func runSessionSlot(ctx, workCtx context.Context, c *callState, p *sessionPool, sc *sharedConn, l *muxLock, lockID int64,
	slot int, start time.Time, fn func(context.Context) error) (err error) {
	acquired := time.Now()
	c.granted(acquired.Sub(start), 0)
	defer func() {
		lost, unreleased := p.release(ctx, sc, l)
		c.waiters().wake(lockID) // no NOTIFY: this Locker's waiters only
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

// sessionSlotSQL is the slot statement of a session-limited call on a
// shared connection: the columns of a session try statement (granted,
// standby, pid; see lockSQL), guarded by the backend pid in $6, then the
// slot taken (NULL: none free) and the lock's registered limit, read as
// slotSQL reads it (after the grant, and again with a fresh snapshot when
// the version the statement's snapshot sees was changed since).
//
// $1 is the lock's ID, $2 the call's n, $3 the first slot tried and $4 its
// key (keyspace.SlotID), $5 the slots not to try (an int4 array literal:
// $3 and those other calls of this Locker hold, which on this backend
// would be granted again, advisory locks being re-entrant). The first
// slot is tried inline; only when it is taken does pgadvisory.slot_try
// try the others, at session level, from $3+1 on (mod n). OFFSET 0 keeps
// the subquery from being merged into the select list, which would take
// the slot once per reference.
const sessionSlotSQL = `SELECT t.slot IS NOT NULL, pg_catalog.pg_is_in_recovery(), pg_catalog.pg_backend_pid(), t.slot,
       (SELECT CASE WHEN t.slot IS NULL OR l.xmax OPERATOR(pg_catalog.=) '0'::pg_catalog.xid THEN l.n
                    ELSE pgadvisory.slot_registered(l.lock_id) END
          FROM pgadvisory.slot_limit AS l WHERE l.lock_id OPERATOR(pg_catalog.=) $1::pg_catalog.int8)
FROM (SELECT CASE WHEN pg_catalog.pg_backend_pid() OPERATOR(pg_catalog.=) $6::pg_catalog.int4 THEN
        CASE WHEN pg_catalog.pg_try_advisory_lock($4::pg_catalog.int8) THEN $3::pg_catalog.int4
             ELSE pgadvisory.slot_try($1::pg_catalog.int8, $2::pg_catalog.int4, $3::pg_catalog.int4, true,
                                      $5::pg_catalog.text::pg_catalog.int4[]) END
      END AS slot OFFSET 0) AS t`

// slotAnswer is what a session slot statement returned.
type slotAnswer struct {
	granted, standby bool
	pid              int32
	slot, registered pgtype.Int4
}

// slotKeys is the keys of the call's n slots, computed once per call.
func (s *limitState) slotKeys(lockID int64) []int64 {
	if len(s.keys) != s.n {
		s.keys = make([]int64, s.n)
		for i := range s.keys {
			s.keys[i] = keyspace.SlotID(lockID, int32(i))
		}
	}
	return s.keys
}

// freeSlots is the slots among keys that no call of this process holds
// (or is taking, for any other kind of call). Under p.mu.
func (p *sessionPool) freeSlots(keys []int64) []int32 {
	free := make([]int32, 0, len(keys))
	for s, key := range keys {
		if p.held[key] == nil {
			free = append(free, int32(s))
		}
	}
	return free
}

// trySlot takes a free slot of c's limited lock on a shared connection
// with one statement (sessionSlotSQL): the slot granted is held by l (c.ids
// is then its key, counted in the table) and reg is the lock's
// registered limit. None free: a nil connection and no error; when the
// table shows every slot held by calls of this process, without a
// statement.
//
// The slots to pass over are read from the table in the connection's
// turn: a call on the same connection takes its slot in its own turn and
// counts it in the table before it gives the turn up, so no slot this
// backend holds is tried again (re-entrant, it would be granted). Slots
// that calls on other connections are trying are tried too: the server
// grants each to one backend.
func (p *sessionPool) trySlot(ctx context.Context, l *muxLock, lockID int64) (*sharedConn, int, pgtype.Int4, error) {
	c := l.c
	var none pgtype.Int4
	keys := c.lim.slotKeys(lockID)
	for {
		sc, err := p.place(ctx, c, l.open)
		if err != nil {
			return nil, 0, none, err
		}
		if err := sc.admit(ctx, c); err != nil {
			sc.leave()
			return nil, 0, none, err
		}
		if err := sc.acquireSem(ctx); err != nil {
			sc.leave()
			return nil, 0, none, c.failure(ctx, "begin", err)
		}
		if sc.isDead() {
			// Lost while this call waited for its turn: another one.
			sc.releaseSem()
			sc.leave()
			continue
		}
		p.mu.Lock()
		free := p.freeSlots(keys)
		p.mu.Unlock()
		if len(free) == 0 {
			sc.releaseSem()
			sc.leave()
			return nil, 0, none, nil
		}
		start := free[rand.IntN(len(free))]
		// The slots not to try: those not free, and the first one,
		// tried inline.
		skip := make([]int64, 0, len(keys)-len(free)+1)
		f := 0
		for slot := range int32(len(keys)) {
			if f < len(free) && free[f] == slot {
				f++
				if slot != start {
					continue
				}
			}
			skip = append(skip, int64(slot))
		}
		args := []any{lockID, int32(c.lim.n), start, keys[start], arrayLiteral(skip), sc.pid}
		a, abandoned, err := sc.trySlotLocked(ctx, l, lockID, free, args)
		if abandoned {
			// ctx ended while the slot statement ran: it ends in the
			// background, which gives back the slot it granted.
			return nil, 0, none, c.failure(ctx, "lock", err)
		}
		sc.releaseSem()
		if !a.granted {
			sc.leave()
			return nil, 0, none, err
		}
		if ctx.Err() != nil {
			// Granted, but the caller gave up meanwhile.
			_, _ = p.release(ctx, sc, l) // unregisters the key
			return nil, 0, none, c.failure(ctx, "lock", ctx.Err())
		}
		return sc, int(a.slot.Int32), a.registered, nil
	}
}

// trySlotLocked sends the slot statement (args) on sc, whose turn the
// caller holds, and makes of its answer what slotTried does. If ctx ends
// first, the call is abandoned (see call): once the statement has
// answered, the slot it granted is released in the background, in the
// turn, which is then given up, and sc left.
func (sc *sharedConn) trySlotLocked(ctx context.Context, l *muxLock, lockID int64, free []int32, args []any) (slotAnswer, bool, error) {
	c := l.c
	keys := c.lim.slotKeys(lockID)
	a := new(slotAnswer)
	abandoned, err := sc.call(ctx, l, c.checkTimeout, func(err error) {
		// In the background: c.ids is the caller's again, so the slot's
		// key is unlocked here without counting it in the table.
		switch {
		case err != nil:
			sc.slotFailed(bgCtx, c.checkTimeout, keys, free, err)
		case a.pid != sc.pid || a.standby:
			_ = sc.answeredBy(a.pid, a.standby) // closes sc
		case a.granted:
			query, qargs := unlockIDsSQL([]int64{keys[a.slot.Int32]}, false)
			var released int64
			if err := sc.run(bgCtx, c.checkTimeout, query, qargs, &released); err == nil && released != 1 {
				sc.fail(fmt.Errorf("the release of an abandoned slot found %d locks held", released))
			}
		}
		sc.releaseSem()
		sc.leave()
	}, sessionSlotSQL, args, &a.granted, &a.standby, &a.pid, &a.slot, &a.registered)
	if abandoned {
		return slotAnswer{}, true, err
	}
	err = sc.slotTried(ctx, l, lockID, free, err, a)
	return *a, false, err
}

// slotTried is what the slot statement's answer a (or its error err)
// makes of l on sc, in the turn: a slot granted is counted in the table
// under its key (c.ids) and added to sc's locks, as tried does for a
// lock.
func (sc *sharedConn) slotTried(ctx context.Context, l *muxLock, lockID int64, free []int32, err error, a *slotAnswer) error {
	c := l.c
	if err != nil {
		a.granted = false
		if pooled := sc.slotFailed(ctx, c.checkTimeout, c.lim.slotKeys(lockID), free, err); pooled != nil {
			return c.refusal(ctx, "lock", ErrTransactionPooler, pooled)
		}
		return c.failure(ctx, "lock", err)
	}
	if !a.granted || a.pid != sc.pid || a.standby {
		a.granted = false
		_, err = sc.tried(ctx, l, nil, false, a.standby, a.pid, 0) // refuses a changed pid, a standby
		return err
	}
	c.ids = []int64{c.lim.slotKeys(lockID)[a.slot.Int32]}
	sc.p.mu.Lock()
	sc.p.register(c)
	sc.p.mu.Unlock()
	_, err = sc.tried(ctx, l, nil, true, false, a.pid, 0)
	return err
}

// slotFailed handles a slot statement that failed with err, in the turn,
// and returns the pooler it found (nil: none). It may have taken one of
// the free slots before it failed (a session lock outlives its
// statement's error): what this backend holds of them is given back, by
// pg_locks. No other call on sc holds one of them (see trySlot), so the
// unlock ends no other call's hold.
func (sc *sharedConn) slotFailed(ctx context.Context, timeout time.Duration, keys []int64, free []int32, err error) (pooled error) {
	if pooled := pooledStatementError(err); pooled != nil {
		sc.fail(pooled)
		return pooled
	}
	if !sc.isDead() {
		ids := make([]int64, len(free))
		for i, s := range free {
			ids[i] = keys[s]
		}
		query, args := (&callState{ids: ids}).unlockHeldSQL()
		var released int64
		if err := sc.run(ctx, timeout, query, args, &released); err != nil {
			sc.fail(fmt.Errorf("releasing the slots of a failed slot statement: %w", err))
		}
	}
	return nil
}
