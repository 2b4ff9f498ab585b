package pgadvisory

import (
	"context"
	"fmt"
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
		if err := c.onLocked(ctx, muxQuerier{sc: sc, c: c}); err != nil {
			lost, unreleased := p.release(ctx, sc, l)
			cancel(nil)
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

// acquire takes l's locks. They are tried on a shared connection
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
	sc, granted, err := p.try(ctx, l)
	if err != nil || granted {
		return sc, err
	}
	if !c.wait {
		return nil, c.locked()
	}
	return p.wait(ctx, l, start)
}

// try places l on a shared connection and, unless the table shows one of
// its keys held by another call of this process, reserves them there and
// tries its locks; the keys are given up unless granted. Not granted
// without an error: contended.
func (p *sessionPool) try(ctx context.Context, l *muxLock) (*sharedConn, bool, error) {
	c := l.c
	for {
		sc, err := p.place(ctx, c, l.open)
		if err != nil {
			return nil, false, err
		}
		if err := sc.admit(ctx, c); err != nil {
			sc.leave()
			return nil, false, err
		}
		p.mu.Lock()
		free := p.reserve(c)
		p.mu.Unlock()
		if !free {
			sc.leave()
			return nil, false, nil
		}
		unreserve := func() {
			p.mu.Lock()
			p.unregister(c)
			p.mu.Unlock()
		}
		if err := sc.acquireSem(ctx); err != nil {
			unreserve()
			sc.leave()
			return nil, false, c.failure(ctx, "begin", err)
		}
		if sc.isDead() {
			// Lost while this call waited for its turn: another one.
			sc.releaseSem()
			unreserve()
			sc.leave()
			continue
		}
		granted, err := sc.tryLocked(ctx, l)
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
}

// tryLocked sends the try statement of l's locks on sc, whose turn the
// caller holds, and adds them to sc's locks if granted.
func (sc *sharedConn) tryLocked(ctx context.Context, l *muxLock) (bool, error) {
	c := l.c
	query, args := c.trySessionSQL(sc.pid)
	var granted, standby bool
	var pid int32
	if err := sc.run(ctx, c.checkTimeout, query, args, &granted, &standby, &pid); err != nil {
		if pooled := pooledStatementError(err); pooled != nil {
			sc.fail(pooled)
			return false, c.refusal(ctx, "lock", ErrTransactionPooler, pooled)
		}
		if !sc.isDead() {
			// A set may be partly taken: give back what this backend holds
			// of it (none of it is another call's: the keys are reserved).
			sc.unlockHeld(ctx, c)
		}
		return false, c.failure(ctx, "lock", err)
	}
	if pid != sc.pid {
		err := fmt.Errorf("backend changed from pid %d to %d", sc.pid, pid)
		sc.fail(err)
		return false, c.refusal(ctx, "lock", ErrTransactionPooler, err)
	}
	if !granted {
		if len(c.ids) > 1 {
			sc.unlockHeld(ctx, c) // the locks before the first one held elsewhere
		}
		return false, nil
	}
	sc.p.mu.Lock()
	sc.locks[l] = struct{}{}
	if c.interval < sc.armed {
		sc.armed = c.interval
		sc.timer.Reset(c.interval)
	}
	sc.p.mu.Unlock()
	return true, nil
}

// unlockHeld releases what the backend holds of c's set after a try that
// was not granted whole; if that fails, the connection is lost.
func (sc *sharedConn) unlockHeld(ctx context.Context, c *callState) {
	query, args := c.unlockHeldSQL()
	var released int64
	if err := sc.run(ctx, c.checkTimeout, query, args, &released); err != nil {
		sc.fail(fmt.Errorf("releasing a set not granted whole: %w", err))
	}
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
// lock on it lost).
func (p *sessionPool) release(ctx context.Context, sc *sharedConn, l *muxLock) (lost, unreleased error) {
	c := l.c
	defer func() {
		p.mu.Lock()
		p.unregister(c)
		p.mu.Unlock()
		sc.leave()
	}()
	p.mu.Lock()
	lost = l.lost
	p.mu.Unlock()
	if lost != nil {
		return lost, nil
	}
	sc.sem <- struct{}{} // statements hold it at most their timeout
	defer sc.releaseSem()
	p.mu.Lock()
	lost = l.lost
	if lost == nil {
		delete(sc.locks, l)
	}
	p.mu.Unlock()
	if lost != nil {
		return lost, nil
	}
	query, args := c.unlockSQL()
	var released int64
	if err := sc.run(ctx, c.checkTimeout, query, args, &released); err != nil {
		sc.fail(fmt.Errorf("an unlock on it failed: %w", err))
		return nil, fmt.Errorf("the unlock failed; the connection was closed, so the server releases the locks: %w", err)
	}
	if int(released) != len(c.ids) {
		err := fmt.Errorf("the unlock found %d of %d locks held", released, len(c.ids))
		sc.fail(fmt.Errorf("its backend lost locks: %w", err))
		return nil, err
	}
	return nil, nil
}

// muxQuerier runs statements on a shared connection in its turn (the
// onLocked hook's querier).
type muxQuerier struct {
	sc *sharedConn
	c  *callState
}

func (q muxQuerier) queryRow(ctx context.Context, query string, args []any, dest ...any) error {
	if err := q.sc.acquireSem(ctx); err != nil {
		return err
	}
	defer q.sc.releaseSem()
	if q.sc.isDead() {
		return errConnGone
	}
	return q.sc.run(ctx, q.c.checkTimeout, query, args, dest...)
}

// trySessionSQL is the try statement of a session lock on a shared
// connection, guarded by its backend pid (see lockSQL): a waiting call
// tries first too.
func (c *callState) trySessionSQL(pid int32) (string, []any) {
	shape := lockShape{set: len(c.ids) > 1, shared: c.shared, session: true}
	s, ok := statementCache.Load(shape)
	if !ok {
		s = buildLockSQL(shape)
		statementCache.Store(shape, s)
	}
	return s.(string), []any{c.idsArg(), pid}
}
