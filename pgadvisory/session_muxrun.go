package pgadvisory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// bgCtx is the parent of statements that no call's ctx may interrupt.
var bgCtx = context.Background()

// runSessionMux is the session-lock protocol on a pool's shared
// connections: take the locks (try on a shared connection, or wait on a
// connection of their own), run onLocked and fn while the connection's
// watcher checks them, release and verify.
func runSessionMux(ctx context.Context, c *callState, p *sessionPool, open func(context.Context) (sessionConn, error), fn func(context.Context) error) (err error) {
	if err := ctx.Err(); err != nil {
		return c.failure(ctx, "begin", err)
	}
	start := time.Now()
	workCtx, cancel := context.WithCancelCause(ctx)
	l := &muxLock{c: c, open: open, cancel: cancel}
	sc, err := p.acquire(ctx, l, start)
	if err != nil {
		cancel(nil)
		return err
	}
	if c.onLocked != nil {
		if err := c.onLocked(ctx, muxQuerier{sc: sc, l: l, c: c}); err != nil {
			lost, unreleased := p.release(ctx, sc, l)
			cancel(nil)
			c.wakeQueued()
			if unreleased == nil {
				unreleased = lost
			}
			if unreleased != nil {
				return fmt.Errorf("%w (and the release: %w)", err, unreleased)
			}
			return err
		}
	}
	acquired := time.Now()
	c.granted(acquired.Sub(start), 0)

	defer func() {
		lost, unreleased := p.release(ctx, sc, l)
		cancel(nil)
		c.wakeQueued()
		if r := recover(); r != nil {
			if obs := c.obs; obs != nil {
				obs.held = time.Since(acquired)
			}
			panic(r)
		}
		err = c.sessionOutcome(ctx, lost, unreleased, err)
		if obs := c.obs; obs != nil {
			obs.held = time.Since(acquired)
		}
	}()
	return fn(workCtx)
}

// acquire takes l's locks. A waiting call waits in lockgen's queue
// (queuedAcquire, session_queue.go), unless its database has none or it
// is a limited one. Otherwise they are tried on a shared connection
// (pg_try_advisory_lock) unless another call of this process holds one of
// the keys; locks contended there or on the server return ErrLocked, or
// with WithWait wait on a connection of their own, which joins the shared
// connections once the locks are granted (see wait). So a waiting call
// never blocks the locks that share a connection, and waits in the
// server's queue: the server's lock_timeout and statement_timeout
// handling, the queue's order and all-or-nothing sets are those of a
// dedicated connection. The connection is checked (a pooler, a standby)
// before the key table is consulted, so refusals come first, as on a
// dedicated connection.
func (p *sessionPool) acquire(ctx context.Context, l *muxLock, start time.Time) (*sharedConn, error) {
	c := l.c
	if c.sessionQueued() {
		return p.queuedAcquire(ctx, l, start)
	}
	sc, granted, err := p.try(ctx, l)
	if err != nil || granted {
		return sc, err
	}
	if !c.wait {
		return nil, c.locked()
	}
	return p.wait(ctx, l, start)
}

// claim places l on a shared connection, reserves its keys there in the
// key table and takes the connection's turn (acquireSem), for a try of
// l's locks on it. free is false when the table shows one of the keys held
// or being taken by another call of this process: then nothing is kept.
// Otherwise the caller gives back the turn (releaseSem), the keys
// (unreserve) and the connection (leave) unless its try is granted.
func (p *sessionPool) claim(ctx context.Context, l *muxLock) (sc *sharedConn, free bool, unreserve func(), err error) {
	c := l.c
	for {
		sc, err := p.place(ctx, c, l.open)
		if err != nil {
			return nil, false, nil, err
		}
		if err := sc.admit(ctx, c); err != nil {
			sc.leave()
			return nil, false, nil, err
		}
		p.mu.Lock()
		free := p.reserve(c)
		p.mu.Unlock()
		if !free {
			sc.leave()
			return nil, false, nil, nil
		}
		unreserve := func() {
			p.mu.Lock()
			p.unregister(c)
			p.mu.Unlock()
		}
		if err := sc.acquireSem(ctx); err != nil {
			unreserve()
			sc.leave()
			return nil, false, nil, c.failure(ctx, "begin", err)
		}
		if sc.isDead() {
			// Lost while this call waited for its turn: another one.
			sc.releaseSem()
			unreserve()
			sc.leave()
			continue
		}
		return sc, true, unreserve, nil
	}
}

// try places l on a shared connection and, unless the table shows one of
// its keys held by another call of this process, reserves them there and
// tries its locks; the keys are given up unless granted. Not granted
// without an error: contended.
func (p *sessionPool) try(ctx context.Context, l *muxLock) (*sharedConn, bool, error) {
	c := l.c
	sc, free, unreserve, err := p.claim(ctx, l)
	if err != nil || !free {
		return nil, false, err
	}
	granted, abandoned, err := sc.tryLocked(ctx, l, unreserve)
	if abandoned {
		// ctx ended while the try statement ran: it ends in the
		// background, which gives back whatever it granted.
		return nil, false, c.failure(ctx, "lock", err)
	}
	sc.releaseSem()
	if !granted {
		unreserve()
		sc.leave()
		return nil, false, err
	}
	if ctx.Err() != nil {
		// Granted, but the caller gave up meanwhile.
		_, _ = p.release(ctx, sc, l) // unregisters the keys
		return nil, false, c.failure(ctx, "lock", ctx.Err())
	}
	return sc, true, nil
}

// tryLocked sends the try statement of l's locks on sc, whose turn the
// caller holds, and adds them to sc's locks if granted. If ctx ends
// first, the call is abandoned (see call): once the statement has
// answered, what it granted is released in the background, in the turn,
// which is then given up, the keys unreserved (unreserve) and sc left.
func (sc *sharedConn) tryLocked(ctx context.Context, l *muxLock, unreserve func()) (granted, abandoned bool, err error) {
	c := l.c
	query, args := c.trySessionSQL(sc.pid)
	var ok, standby bool
	var pid int32
	var taken int64 // of a set not granted whole: the locks kept before the one held elsewhere
	dest := []any{&ok, &standby, &pid}
	if len(c.ids) > 1 {
		dest = append(dest, &taken)
	}
	abandoned, err = sc.call(ctx, l, c.checkTimeout, func(err error) {
		if kept, _ := sc.tried(bgCtx, l, err, ok, standby, pid, taken); kept {
			_ = sc.p.unlockLocked(bgCtx, sc, l)
		}
		sc.releaseSem()
		unreserve()
		sc.leave()
	}, query, args, dest...)
	if abandoned {
		return false, true, err
	}
	granted, err = sc.tried(ctx, l, err, ok, standby, pid, taken)
	return granted, false, err
}

// tried is what the try statement's answer (err, granted, whether the
// server is a standby, the backend pid, and for a set not granted whole
// the number of its locks taken) makes of l's locks on sc, in the turn:
// granted, they are added to sc's locks; not granted, the locks the
// statement took are given back.
func (sc *sharedConn) tried(ctx context.Context, l *muxLock, err error, granted, standby bool, pid int32, taken int64) (bool, error) {
	c := l.c
	if err != nil {
		if pooled := pooledStatementError(err); pooled != nil {
			sc.fail(pooled)
			return false, c.refusal(ctx, "lock", ErrTransactionPooler, pooled)
		}
		if !sc.isDead() {
			// A set may be partly taken, and the statement did not say how
			// much: give back what this backend holds of it.
			sc.unlockHeld(ctx, l)
		}
		return false, c.failure(ctx, "lock", err)
	}
	if err := sc.answeredBy(pid, standby); err != nil {
		return false, err(ctx, c)
	}
	if !granted {
		if len(c.ids) > 1 {
			sc.unlockTaken(ctx, c, taken) // the locks before the first one held elsewhere
		}
		return false, nil
	}
	sc.hold(l)
	return true, nil
}

// answeredBy checks the backend pid and the standby flag that a lock
// statement on sc reported. A pid other than sc's is a pooler; a standby
// is reached only by a connection opened without the check (admit refuses
// a checked one), and whatever its statement took there is given up with
// the session. Either way sc is closed, the pool's connections are
// checked again as they open, and the returned function makes the call's
// refusal; nil: sc's backend, on a primary.
func (sc *sharedConn) answeredBy(pid int32, standby bool) func(context.Context, *callState) error {
	if pid == sc.pid && !standby {
		return nil
	}
	sc.p.mu.Lock()
	sc.p.direct = false
	sc.p.mu.Unlock()
	if pid != sc.pid {
		err := fmt.Errorf("backend changed from pid %d to %d", sc.pid, pid)
		if sc.unchecked {
			err = fmt.Errorf("the connection announced backend pid %d but its statements run on pid %d", sc.pid, pid)
		}
		sc.fail(err)
		return func(ctx context.Context, c *callState) error {
			return c.refusal(ctx, "lock", ErrTransactionPooler, err)
		}
	}
	sc.fail(errors.New("its server is a standby"))
	return func(ctx context.Context, c *callState) error { return c.refusal(ctx, "lock", ErrStandby, nil) }
}

// hold records l's granted locks on sc, and re-arms sc's watcher when l
// wants a shorter check interval than the one armed.
func (sc *sharedConn) hold(l *muxLock) {
	sc.p.mu.Lock()
	defer sc.p.mu.Unlock()
	sc.locks[l] = struct{}{}
	if l.c.interval < sc.armed {
		sc.armed = l.c.interval
		sc.timer.Reset(l.c.interval)
	}
}

// unlockTaken releases the first taken locks of c's set, which its try
// statement took before it found one held elsewhere: exactly those, not
// what the backend holds of the set, since another call on the connection
// may hold some of its keys in shared mode, each hold counted by the
// server. If the release fails or finds one of them not held, the
// connection is lost.
func (sc *sharedConn) unlockTaken(ctx context.Context, c *callState, taken int64) {
	if taken <= 0 {
		return
	}
	if taken > int64(len(c.ids)) {
		sc.fail(fmt.Errorf("the try of a set of %d locks reported %d taken", len(c.ids), taken))
		return
	}
	query, args := unlockIDsSQL(c.ids[:taken], c.shared)
	var released int64
	if err := sc.run(ctx, c.checkTimeout, query, args, &released); err != nil {
		sc.fail(fmt.Errorf("releasing a set not granted whole: %w", err))
		return
	}
	if released != taken {
		sc.fail(fmt.Errorf("releasing a set not granted whole found %d of the %d locks taken held", released, taken))
	}
}

// unlockHeld releases what the backend holds of l's set after a try
// statement that failed, which does not say what it took; if that fails,
// the connection is lost. A key that another lock on sc holds too cannot
// be told apart (the server counts the holds of one backend, pg_locks
// shows one row), so then the connection is lost instead: unlocking it
// could end the other call's hold, keeping it could leave this call's hold
// behind.
func (sc *sharedConn) unlockHeld(ctx context.Context, l *muxLock) {
	c := l.c
	if other := sc.sharesKey(l); other {
		sc.fail(errors.New("a set's try failed and may have taken keys that another call on the connection holds"))
		return
	}
	query, args := c.unlockHeldSQL()
	var released int64
	if err := sc.run(ctx, c.checkTimeout, query, args, &released); err != nil {
		sc.fail(fmt.Errorf("releasing a set not granted whole: %w", err))
	}
}

// sharesKey reports whether another lock on sc holds one of l's keys.
func (sc *sharedConn) sharesKey(l *muxLock) bool {
	ids := make(map[int64]struct{}, len(l.c.ids))
	for _, id := range l.c.ids {
		ids[id] = struct{}{}
	}
	sc.p.mu.Lock()
	defer sc.p.mu.Unlock()
	for other := range sc.locks {
		if other == l {
			continue
		}
		for _, id := range other.c.ids {
			if _, ok := ids[id]; ok {
				return true
			}
		}
	}
	return false
}

// wait takes l's locks on a connection of their own, waiting in the
// server's queue as a dedicated session lock does (openSession,
// lockSession), and adopts the connection as a shared one once granted.
func (p *sessionPool) wait(ctx context.Context, l *muxLock, start time.Time) (*sharedConn, error) {
	c := l.c
	conn, err := l.open(ctx)
	if err != nil {
		return nil, c.failure(ctx, "begin", poolWaitError(ctx, err))
	}
	s, err := c.openSession(ctx, conn)
	if err != nil {
		return nil, err
	}
	if err := c.lockSession(ctx, conn, s, start); err != nil {
		return nil, err
	}
	sc := newSharedConn(p, l.open)
	sc.conn, sc.pid = conn, s.pid
	if announced, known := conn.announcedPID(); known && announced != uint32(s.pid) {
		sc.pooled = undeclaredPooler(s.pid, announced)
	}
	close(sc.ready)
	p.mu.Lock()
	p.register(c)
	sc.users = 1
	sc.locks[l] = struct{}{}
	sc.armed = c.interval // armed before other calls can be placed on it
	sc.timer = time.AfterFunc(c.interval, sc.tick)
	p.conns = append(p.conns, sc)
	p.mu.Unlock()
	if ctx.Err() != nil {
		_, _ = p.release(ctx, sc, l)
		return nil, c.failure(ctx, "lock", ctx.Err())
	}
	return sc, nil
}

// release unlocks l's locks on sc and verifies the count, gives its keys
// up in the table and its place on sc. lost is the connection's loss if
// the watcher or another call found it lost first; unreleased what went
// wrong with the unlock (the connection is then closed, and every other
// lock on it lost). If ctx has ended and the release still waits for the
// connection's turn or for the unlock's answer abandonGrace later, it
// returns nil, nil and goes on in the background: the locks are
// released, or the connection closed, never left held. The caller's ctx
// has ended, so its call does not report success.
func (p *sessionPool) release(ctx context.Context, sc *sharedConn, l *muxLock) (lost, unreleased error) {
	c := l.c
	leave := func() {
		p.mu.Lock()
		p.unregister(c)
		p.mu.Unlock()
		sc.leave()
	}
	p.mu.Lock()
	lost = l.lost
	p.mu.Unlock()
	if lost != nil {
		leave()
		return lost, nil
	}
	if !sc.acquireSemGrace(ctx) {
		go func() {
			sc.sem <- struct{}{} // statements hold it at most their timeout
			_ = p.unlockLocked(bgCtx, sc, l)
			sc.releaseSem()
			leave()
		}()
		return nil, nil
	}
	p.mu.Lock()
	lost = l.lost
	closed := sc.dead
	if lost == nil {
		delete(sc.locks, l)
	}
	p.mu.Unlock()
	if lost != nil {
		sc.releaseSem()
		leave()
		return lost, nil
	}
	if closed {
		// Closed after a statement this call gave up on (callAlone), with
		// this lock still on it: the server ends the session and its locks.
		sc.releaseSem()
		leave()
		return nil, nil
	}
	query, args := c.unlockSQL()
	var released int64
	verify := func(ctx context.Context, err error) error {
		if err != nil && c.queuedSession && serializationFailure(err) && !c.lead && !(c.shared && sc.sharesKey(l)) {
			released, err = c.releaseConflicted(func(query string, args []any, dest ...any) error {
				return sc.run(ctx, c.checkTimeout, query, args, dest...)
			})
		}
		return sc.unlocked(c, err, released)
	}
	abandoned, err := sc.call(ctx, l, c.checkTimeout, func(err error) {
		_ = verify(bgCtx, err)
		sc.releaseSem()
		leave()
	}, query, args, &released)
	if abandoned {
		return nil, nil
	}
	unreleased = verify(ctx, err)
	sc.releaseSem()
	leave()
	return nil, unreleased
}

// unlockLocked unlocks l's locks on sc, in the turn, unless the
// connection was lost: release's statement without its caller.
func (p *sessionPool) unlockLocked(ctx context.Context, sc *sharedConn, l *muxLock) error {
	c := l.c
	p.mu.Lock()
	lost := l.lost
	closed := sc.dead
	if lost == nil {
		delete(sc.locks, l)
	}
	p.mu.Unlock()
	if lost != nil {
		return lost
	}
	if closed {
		return nil // closed for this call: see release
	}
	query, args := c.unlockSQL()
	var released int64
	err := sc.run(ctx, c.checkTimeout, query, args, &released)
	return sc.unlocked(c, err, released)
}

// unlocked verifies an unlock of c's locks (err, the count of locks it
// found held), in the turn: a failed unlock or a missing lock closes the
// connection.
func (sc *sharedConn) unlocked(c *callState, err error, released int64) error {
	if err != nil {
		sc.fail(fmt.Errorf("an unlock on it failed: %w", err))
		return fmt.Errorf("the unlock failed; the connection was closed, so the server releases the locks: %w", err)
	}
	if int(released) != len(c.ids) {
		err := fmt.Errorf("the unlock found %d of %d locks held", released, len(c.ids))
		sc.fail(fmt.Errorf("its backend lost locks: %w", err))
		return err
	}
	return nil
}

// muxQuerier runs statements on a shared connection in its turn (the
// onLocked hook's querier).
type muxQuerier struct {
	sc *sharedConn
	l  *muxLock
	c  *callState // l.c
}

func (q muxQuerier) queryRow(ctx context.Context, query string, args []any, dest ...any) error {
	if query == electSQL && len(args) == 3 {
		return q.electInTurns(ctx, args, dest...)
	}
	return q.inTurn(ctx, query, args, dest...)
}

// electTurn is the longest an election on a shared connection waits for
// the fence row in one turn of the connection.
const electTurn = 20 * time.Millisecond

// electInTurns runs an election (electSQL with args, whose third is the
// lock_timeout of its wait for writers of the previous term) on a shared
// connection without holding the connection's turn for that wait: while
// the fence row is held (55P03), it tries again in turns of at most
// electTurn, giving the connection to the statements queued meanwhile
// between them, until the election's own bound (electPublishTimeout) has
// passed; then the last try's 55P03 is its error. A queued unlock, check
// or try of another lock on the connection thus waits one turn, not the
// whole wait.
func (q muxQuerier) electInTurns(ctx context.Context, args []any, dest ...any) error {
	deadline := time.Now().Add(q.c.electPublishTimeout())
	try := slices.Clone(args)
	for {
		wait := min(electTurn, time.Until(deadline))
		try[2] = lockTimeoutSetting(max(wait, time.Millisecond))
		err := q.inTurn(ctx, electSQL, try, dest...)
		if err == nil || SQLState(err) != "55P03" || ctx.Err() != nil || time.Until(deadline) <= 0 {
			return err
		}
	}
}

// inTurn runs one statement in the connection's turn.
func (q muxQuerier) inTurn(ctx context.Context, query string, args []any, dest ...any) error {
	if err := q.sc.acquireSem(ctx); err != nil {
		return err
	}
	if q.sc.isDead() {
		q.sc.releaseSem()
		return errConnGone
	}
	abandoned, err := q.sc.call(ctx, q.l, q.c.checkTimeout, func(err error) {
		if err == nil {
			q.c.abandonedAnswer(query, dest)
		}
		q.sc.releaseSem()
	}, query, args, dest...)
	if !abandoned {
		q.sc.releaseSem()
	}
	return err
}

// abandonedAnswer keeps what a statement of the onLocked hook that its
// caller stopped waiting for (see call) did and the release must undo:
// an election's term, so that the leader resigns as it unlocks (its
// leader row stops naming the backend). In the turn, before the release.
func (c *callState) abandonedAnswer(query string, dest []any) {
	if c.lead && query == electSQL && len(dest) > 0 {
		if term, ok := dest[0].(*int64); ok {
			c.term = *term
		}
	}
}

// trySessionSQL is the try statement of a session lock on a shared
// connection, guarded by its backend pid (see lockSQL): a waiting call
// tries first too. A set's try also returns how many of its locks it kept
// before the one held elsewhere (countedTrySQL).
func (c *callState) trySessionSQL(pid int32) (string, []any) {
	set := len(c.ids) > 1
	shape := lockShape{set: set, shared: c.shared, session: true, counted: set}
	s, ok := statementCache.Load(shape)
	if !ok {
		s = buildLockSQL(shape)
		statementCache.Store(shape, s)
	}
	return s.(string), []any{c.idsArg(), pid}
}
