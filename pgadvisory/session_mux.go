package pgadvisory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// The session locks of a Locker share a few dedicated connections (see
// WithSessionConns): the Locker's sessionPool keeps at most max shared
// connections, each taken from the pool when the first lock needs it and
// given back once it holds no lock. Statements on a shared connection are
// serialized; one watcher per connection checks all of its locks.
//
// Advisory locks are re-entrant within a server session, so two calls of
// this process for one key placed on the same connection would both be
// granted: the key table (held) makes a key held by a call of the Locker
// contended for every other call of the Locker, before a lock statement
// is sent.

// defaultSessionConns is the number of shared connections of a Locker
// without WithSessionConns.
const defaultSessionConns = 2

// sessionPool is s's sessionPool, made on first use, or nil when each
// lock takes a connection of its own (sessionConns 0).
func (s *lockerState) sessionPool() *sessionPool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sessionConns == 0 {
		return nil
	}
	if s.shared == nil {
		s.shared = &sessionPool{max: s.sessionConns, held: map[int64]*keyHold{}}
	}
	return s.shared
}

// setSessionConns makes n the number of s's shared connections, for the
// calls that start afterwards (SetSessionConns on a package Locker).
func (s *lockerState) setSessionConns(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sessionConns = n
	if p := s.shared; p != nil && n > 0 {
		p.mu.Lock()
		p.max = n
		p.mu.Unlock()
	}
}

// sessionPool is the shared connections and the key table of one pool.
type sessionPool struct {
	mu    sync.Mutex
	max   int
	conns []*sharedConn
	held  map[int64]*keyHold
	// direct: a connection of the pool was checked and found to be a
	// direct one to a primary (its announced pid the server's own). The
	// pool's later connections then skip the check (see openConn).
	direct bool
}

// keyHold counts the calls of this process that hold or are taking a key.
type keyHold struct{ exclusive, shared int }

// reserve takes c's keys in the table if no other call of this process
// holds one of them in a conflicting mode (exclusive against anything,
// shared against exclusive): all of them or none. Under p.mu.
func (p *sessionPool) reserve(c *callState) bool {
	for _, id := range c.ids {
		if h := p.held[id]; h != nil && (h.exclusive > 0 || (!c.shared && h.shared > 0)) {
			return false
		}
	}
	p.register(c)
	return true
}

// register counts c's keys in the table whatever it holds: the server
// granted them. Under p.mu.
func (p *sessionPool) register(c *callState) {
	for _, id := range c.ids {
		h := p.held[id]
		if h == nil {
			h = &keyHold{}
			p.held[id] = h
		}
		if c.shared {
			h.shared++
		} else {
			h.exclusive++
		}
	}
}

// unregister gives c's keys up. Under p.mu.
func (p *sessionPool) unregister(c *callState) {
	for _, id := range c.ids {
		h := p.held[id]
		if h == nil {
			continue
		}
		if c.shared {
			h.shared--
		} else {
			h.exclusive--
		}
		if h.exclusive <= 0 && h.shared <= 0 {
			delete(p.held, id)
		}
	}
}

// place picks the shared connection for one more lock, opening one while
// there are fewer than max (least-loaded otherwise), and waits until it
// is open. The caller ends with sc.leave.
func (p *sessionPool) place(ctx context.Context, c *callState, open func(context.Context) (sessionConn, error)) (*sharedConn, error) {
	for {
		p.mu.Lock()
		var sc *sharedConn
		opening := len(p.conns) < max(p.max, 1)
		if opening && c.poolRoom != nil && !c.poolRoom() {
			// The pool has no connection to give now: a shared connection
			// already open takes one more lock rather than wait for one.
			for _, o := range p.conns {
				if o.conn != nil && !o.dead && (sc == nil || o.users < sc.users) {
					sc = o
				}
			}
			opening = sc == nil
		}
		if opening {
			sc = newSharedConn(p, open)
			sc.opener = c
			p.conns = append(p.conns, sc)
		} else if sc == nil {
			for _, o := range p.conns {
				if sc == nil || o.users < sc.users {
					sc = o
				}
			}
		}
		sc.users++
		p.mu.Unlock()
		if opening {
			sc.openConn(ctx) // others placed on it meanwhile wait for ready
		}
		select {
		case <-sc.ready:
		case <-ctx.Done():
			sc.leave()
			return nil, c.failure(ctx, "begin", ctx.Err())
		}
		if sc.openErr == nil {
			return sc, nil
		}
		sc.leave()
		if sc.opener == c {
			return nil, sc.openErr(ctx, c)
		}
		// Another call's open failed: try again with one of our own.
	}
}

// poolWaitError is err, from taking a connection from the pool, saying so
// when ctx ended meanwhile: the call waited for a pool connection (every
// one in use up to the pool's limit, or one being opened).
func poolWaitError(ctx context.Context, err error) error {
	if ctx.Err() == nil {
		return err
	}
	return fmt.Errorf("waiting for a connection from the pool: %w", err)
}

// sharedConn is one shared connection of a session pool.
type sharedConn struct {
	p    *sessionPool
	open func(context.Context) (sessionConn, error) // takes conn from the pool
	conn sessionConn
	// sem serializes the statements on the connection.
	sem chan struct{}
	// ready is closed once the connection is open and checked (or failed
	// to open: openErr).
	ready   chan struct{}
	opener  *callState
	openErr func(ctx context.Context, c *callState) error

	// What the check when it was opened found (see openSession).
	pid     int32
	pooled  error // a pooler in transaction or session mode, else nil
	standby bool
	// unchecked: opened without the check, its pid the announced one (see
	// sessionPool.direct); the first statement's answer confirms it.
	unchecked bool

	// Under p.mu.
	users int                   // calls placed on it, holding a lock or taking one
	locks map[*muxLock]struct{} // the granted locks it holds
	dead  bool
	// broken: lost after it was given up (a last check failed); leave
	// closes it instead of giving it back.
	broken bool
	// The watcher: a timer whose function checks the connection (see
	// watch); armed is its current interval. Under p.mu.
	timer *time.Timer
	armed time.Duration

	stop chan struct{} // closed when the connection is given back
}

func newSharedConn(p *sessionPool, open func(context.Context) (sessionConn, error)) *sharedConn {
	return &sharedConn{p: p, open: open, sem: make(chan struct{}, 1), ready: make(chan struct{}),
		locks: map[*muxLock]struct{}{}, stop: make(chan struct{})}
}

// muxLock is one call's lock set on a shared connection.
type muxLock struct {
	c      *callState
	open   func(context.Context) (sessionConn, error) // the pool's connections
	cancel context.CancelCauseFunc
	lost   error // under p.mu: the connection's loss, which canceled the work
}

// openConn takes a connection from the pool and checks it as openSession
// does (the backend pid against the announced one, a pooler's mode, a
// standby), once for every lock it will carry, unless the pool was found
// direct (see sessionPool.direct); each call then applies its own options
// to what was found (see admit). It runs under the ctx of
// the call that asked for it (opener), as a dedicated connection's
// acquisition does; other calls waiting for it open another if that ctx
// ends first (see place).
func (sc *sharedConn) openConn(octx context.Context) {
	defer close(sc.ready)
	fail := func(f func(ctx context.Context, c *callState) error) {
		sc.openErr = f
		sc.p.mu.Lock()
		sc.dead = true
		sc.p.remove(sc)
		sc.p.mu.Unlock()
	}
	conn, err := sc.open(octx)
	if err != nil {
		err = poolWaitError(octx, err)
		fail(func(ctx context.Context, c *callState) error { return c.failure(ctx, "begin", err) })
		return
	}
	announced, known := conn.announcedPID()
	if !known {
		announced = 0
	}
	sc.p.mu.Lock()
	direct := sc.p.direct
	sc.p.mu.Unlock()
	if known && direct {
		// Another connection of the pool was found direct to a primary:
		// take the announced pid as the backend's without a round trip.
		// Every statement of a lock on a shared connection is guarded by
		// that pid and reports the server's pid and whether it is a
		// standby, so a pooler or a standby behind the same address is
		// still refused, by the first statement (see tried and queueTry).
		sc.pid = int32(announced)
		sc.unchecked = true
		sc.finishOpen(conn)
		return
	}
	var unlifted sql.NullString
	if err := conn.simpleQueryRow(octx, sessionProbeSQL(announced, false), &sc.pid, &sc.standby, &unlifted); err != nil {
		conn.discard()
		fail(func(ctx context.Context, c *callState) error { return c.sessionFailure(ctx, "begin", err) })
		return
	}
	if known && announced == uint32(sc.pid) && !sc.standby {
		sc.p.mu.Lock()
		sc.p.direct = true
		sc.p.mu.Unlock()
	}
	if known && announced != uint32(sc.pid) {
		kind, detail, err := probePooler(octx, conn, sc.pid, announced)
		switch {
		case err != nil:
			conn.discard()
			fail(func(ctx context.Context, c *callState) error { return c.failure(ctx, "begin", err) })
			return
		case kind == ErrStatementPooler:
			conn.discard()
			fail(func(ctx context.Context, c *callState) error { return c.refusal(ctx, "begin", kind, detail) })
			return
		}
		sc.pooled = detail
	}
	sc.finishOpen(conn)
}

// finishOpen makes conn, opened and checked, sc's connection and arms its
// watcher, or gives it back if every call placed on sc gave up meanwhile.
func (sc *sharedConn) finishOpen(conn sessionConn) {
	sc.p.mu.Lock()
	sc.conn = conn
	abandoned := sc.users == 0 // every call placed on it gave up meanwhile
	if abandoned {
		sc.dead = true
		sc.p.remove(sc)
	}
	sc.p.mu.Unlock()
	if abandoned {
		conn.release()
		return
	}
	sc.watch()
}

// admit applies c's options to what the connection's check found: a
// standby and an undeclared pooler are refused.
func (sc *sharedConn) admit(ctx context.Context, c *callState) error {
	if sc.pooled != nil && !c.sessionPooler {
		return c.refusal(ctx, "begin", ErrTransactionPooler, c.poolerHint(sc.pooled))
	}
	if sc.standby {
		return c.refusal(ctx, "begin", ErrStandby, nil)
	}
	return nil
}

// remove takes sc out of p's connections. Under p.mu.
func (p *sessionPool) remove(sc *sharedConn) {
	if i := slices.Index(p.conns, sc); i >= 0 {
		p.conns = slices.Delete(p.conns, i, i+1)
	}
}

// leave ends a call placed on sc; the last one gives the connection back
// to the pool, once no lock is left on it.
func (sc *sharedConn) leave() {
	p := sc.p
	p.mu.Lock()
	sc.users--
	last := sc.users == 0 && !sc.dead && sc.conn != nil
	if last {
		sc.dead = true // no call can be placed on it any more
		p.remove(sc)
	}
	p.mu.Unlock()
	if last {
		close(sc.stop)
		sc.sem <- struct{}{} // a check in flight ends first
		p.mu.Lock()
		if sc.timer != nil {
			sc.timer.Stop()
		}
		broken := sc.broken
		p.mu.Unlock()
		if broken {
			sc.conn.discard()
		} else {
			sc.conn.release()
		}
	}
}

// acquireSem waits for the connection's turn, or ctx.
func (sc *sharedConn) acquireSem(ctx context.Context) error {
	select {
	case sc.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (sc *sharedConn) releaseSem() { <-sc.sem }

// run runs one statement on the connection, holding its turn: bounded by
// timeout and not by ctx, because a statement interrupted by a canceled
// context closes the connection (pgx, database/sql) and every lock on it.
// A statement still running at the bound is not yet a half-open link:
// the server is asked on another connection of the pool whether the
// backend is still running it (see bound), as it does while it waits for
// a durable commit (a synchronous standby) or for a row lock, and each
// yes extends the bound by timeout. An error that is not the server's
// answer to a statement on a live connection makes the connection lost
// (see fail).
func (sc *sharedConn) run(ctx context.Context, timeout time.Duration, query string, args []any, dest ...any) error {
	qctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	_, err := sc.runIn(qctx, cancel, nil, timeout, query, args, dest...)
	return err
}

// runIn is run under qctx, which cancel ends: by the bound, or when the
// caller gives up (giveUp, then gaveUp is whether it did before the
// statement answered). A statement given up on is left to the caller,
// which closes the connection (see callAlone).
func (sc *sharedConn) runIn(qctx context.Context, cancel context.CancelFunc, giveUp *graceCancel, timeout time.Duration, query string, args []any, dest ...any) (gaveUp bool, err error) {
	b := sc.bound(cancel, timeout, query)
	err = sc.conn.queryRow(qctx, query, args, dest...)
	expired := b.stop()
	if giveUp != nil {
		gaveUp = giveUp.stop() && err != nil
		if gaveUp {
			return true, err
		}
	}
	if err != nil && (expired || !serverAnswered(err, qctx)) {
		if expired {
			err = fmt.Errorf("the statement did not answer within %v (WithCheckTimeout), "+
				"as on a half-open link; the connection was closed: %w", timeout, err)
		}
		sc.fail(err)
	}
	return false, err
}

// statementBound ends a statement on a shared connection that neither
// answers nor is seen running by the server within its timeout.
type statementBound struct {
	timer  *time.Timer
	ctx    context.Context // ends when the statement answers (stop)
	end    context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	closed bool // stop was called
	// expired: the statement was canceled for want of an answer
	expired bool
}

// bound arms the bound of a statement (query) that started now: a
// quarter timeout in, and every quarter timeout after, while the
// statement runs, the server is asked whether the connection's backend
// still runs it (runningSQL, on a connection of the pool); the bound is
// timeout after the last question answered yes, or after the start. Past
// it, cancel ends the statement (closing the connection). A link that
// went silent gets no yes: its statement never reached the backend, or
// its answer never came back (the backend is idle), or the pool's
// connection does not get through either. Each question has until the
// bound to be answered: three quarters of a timeout at least.
func (sc *sharedConn) bound(cancel context.CancelFunc, timeout time.Duration, query string) *statementBound {
	b := &statementBound{}
	b.ctx, b.end = context.WithCancel(bgCtx)
	deadline := time.Now().Add(timeout)
	b.wg.Add(1)
	b.timer = time.AfterFunc(timeout/4, func() {
		defer b.wg.Done()
		for {
			asked := time.Now()
			pctx, pcancel := context.WithDeadline(b.ctx, deadline)
			running := sc.stillRunning(pctx, query)
			pcancel()
			if running {
				deadline = asked.Add(timeout)
			}
			next := asked.Add(timeout / 4)
			if deadline.Before(next) {
				next = deadline
			}
			t := time.NewTimer(time.Until(next))
			select {
			case <-b.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			if time.Now().Before(deadline) {
				continue
			}
			b.mu.Lock()
			if !b.closed {
				b.expired = true
				cancel()
			}
			b.mu.Unlock()
			return
		}
	})
	return b
}

// stop disarms the bound once the statement has answered; expired if it
// was canceled for want of an answer first.
func (b *statementBound) stop() (expired bool) {
	b.mu.Lock()
	b.closed = true
	expired = b.expired
	b.mu.Unlock()
	if b.timer.Stop() {
		b.wg.Done()
	}
	b.end()
	b.wg.Wait()
	return expired
}

// runningSQL reports whether backend $1 runs statement $2 now (the text
// pg_stat_activity shows may be cut short at track_activity_query_size).
const runningSQL = `SELECT EXISTS (SELECT FROM pg_catalog.pg_stat_activity AS a
  WHERE a.pid OPERATOR(pg_catalog.=) $1::pg_catalog.int4 AND a.state OPERATOR(pg_catalog.=) 'active'
    AND a.query OPERATOR(pg_catalog.<>) '' AND pg_catalog.starts_with($2::pg_catalog.text, a.query))`

// stillRunning asks the server, on a connection of the pool, whether the
// connection's backend runs query now.
func (sc *sharedConn) stillRunning(ctx context.Context, query string) bool {
	conn, err := sc.open(ctx)
	if err != nil {
		return false
	}
	var running bool
	if err := conn.queryRow(ctx, runningSQL, []any{sc.pid, query}, &running); err != nil {
		conn.discard()
		return false
	}
	conn.release()
	return running
}

// call runs one statement of l's call on the connection, whose turn the
// caller holds, as run does, but waits for it only until abandonGrace
// after ctx ends: run does not let ctx interrupt a statement (that would
// close the connection and every lock on it), so the caller stops waiting
// instead. abandoned is then true and err ctx's error; after runs with
// the statement's result, in the connection's turn, and must give the
// turn up. An abandoned caller neither gives the turn up nor reads dest.
//
// Where the connection carries no other call's lock (alone), the
// statement runs on the caller's goroutine (callAlone); otherwise it runs
// on a goroutine of its own and ends in the background once its caller
// has stopped waiting, so that the other locks on the connection live
// on.
func (sc *sharedConn) call(ctx context.Context, l *muxLock, timeout time.Duration, after func(error), query string, args []any, dest ...any) (abandoned bool, err error) {
	if ctx.Done() == nil {
		return false, sc.run(ctx, timeout, query, args, dest...)
	}
	if sc.alone(l) {
		return sc.callAlone(ctx, l, timeout, after, query, args, dest...)
	}
	done := make(chan error, 1)
	go func() { done <- sc.run(ctx, timeout, query, args, dest...) }()
	select {
	case err := <-done:
		return false, err
	case <-ctx.Done():
	}
	grace := time.NewTimer(abandonGrace)
	defer grace.Stop()
	select {
	case err := <-done:
		return false, err
	case <-grace.C:
	}
	go func() { after(<-done) }()
	return true, ctx.Err()
}

// alone reports whether no lock of a call other than l's is on the
// connection. Only a statement in the connection's turn adds one, so
// while the caller holds the turn that stays so.
func (sc *sharedConn) alone(l *muxLock) bool {
	sc.p.mu.Lock()
	defer sc.p.mu.Unlock()
	for o := range sc.locks {
		if o != l {
			return false
		}
	}
	return true
}

// callAlone is call on a connection that carries no other call's lock:
// the statement runs on the caller's goroutine, without a hand-off to
// another one (the hot path of a leader's hand-off: its resignation, its
// successor's election). If it has not answered abandonGrace after ctx
// ends, the caller gives up on it: the connection is closed, which loses
// no other call's lock and ends the statement's session on the server
// with every lock it holds (its backend notices at the statement's end at
// the latest), so nothing is left held, and after runs with the error.
// l's own lock on it then counts as released, not lost (see release).
func (sc *sharedConn) callAlone(ctx context.Context, l *muxLock, timeout time.Duration, after func(error), query string, args []any, dest ...any) (abandoned bool, err error) {
	qctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	giveUp := afterGrace(ctx, cancel)
	gaveUp, err := sc.runIn(qctx, cancel, giveUp, timeout, query, args, dest...)
	if !gaveUp {
		return false, err
	}
	sc.p.mu.Lock()
	delete(sc.locks, l)
	sc.p.mu.Unlock()
	sc.fail(fmt.Errorf("its statement had not answered %v after its call's ctx ended; the connection, "+
		"which carried no other call's lock, was closed: %w", abandonGrace, err))
	after(err)
	return true, ctx.Err()
}

// graceCancel ends a statement's context abandonGrace after its caller's
// ctx ends (afterGrace), unless stopped first: no goroutine and no timer
// while ctx lives.
type graceCancel struct {
	unregister func() bool
	mu         sync.Mutex
	timer      *time.Timer
	stopped    bool
	fired      bool
}

// afterGrace calls cancel abandonGrace after ctx ends, until stopped.
func afterGrace(ctx context.Context, cancel context.CancelFunc) *graceCancel {
	g := &graceCancel{}
	g.unregister = context.AfterFunc(ctx, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.stopped {
			return
		}
		g.timer = time.AfterFunc(abandonGrace, func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if !g.stopped {
				g.fired = true
				cancel()
			}
		})
	})
	return g
}

// stop disarms g; fired reports whether it had canceled.
func (g *graceCancel) stop() (fired bool) {
	g.unregister()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopped = true
	if g.timer != nil {
		g.timer.Stop()
	}
	return g.fired
}

// abandonGrace is how long a call whose ctx has ended still waits for its
// statement on a shared connection (its turn and its answer) before it
// leaves the statement to the background (see call): an unlock answers in
// well under a millisecond, so a call canceled during fn has released its
// locks when it returns, while a statement stuck behind a slow one (a
// commit waiting for a synchronous standby) no longer holds the caller.
const abandonGrace = 100 * time.Millisecond

// acquireSemGrace waits for the connection's turn until abandonGrace
// after ctx ends; false if it did not get it.
func (sc *sharedConn) acquireSemGrace(ctx context.Context) bool {
	select {
	case sc.sem <- struct{}{}:
		return true
	case <-ctx.Done():
	}
	grace := time.NewTimer(abandonGrace)
	defer grace.Stop()
	select {
	case sc.sem <- struct{}{}:
		return true
	case <-grace.C:
		return false
	}
}

// serverAnswered reports an error the server sent on a connection that is
// still usable: a statement's failure, which in autocommit changes
// nothing else on the session.
func serverAnswered(err error, qctx context.Context) bool {
	if qctx.Err() != nil || SQLState(err) == "" {
		return false
	}
	switch classify(err) {
	case ErrConnLost, ErrConnect:
		return false
	}
	return true
}

// fail closes the connection after err and cancels the work of every lock
// on it with an *Error of kind ErrLockLost. The caller holds the
// connection's turn (sem), so no statement is running on it.
func (sc *sharedConn) fail(err error) {
	p := sc.p
	p.mu.Lock()
	wasDead := sc.dead
	sc.dead, sc.broken = true, true
	p.remove(sc)
	locks := make([]*muxLock, 0, len(sc.locks))
	for l := range sc.locks {
		locks = append(locks, l)
	}
	clear(sc.locks)
	if kind := classify(err); kind != nil && kind != ErrConnLost {
		err = fmt.Errorf("%w: %w", kind, err)
	}
	for _, l := range locks {
		l.lost = err
	}
	p.mu.Unlock()
	if !wasDead {
		sc.conn.discard()
	} // else leave discards it once a check in flight has ended
	for _, l := range locks {
		cause := &Error{Op: "watch", LockIDs: l.c.ids, Name: l.c.name, SQLState: SQLState(err), Kind: ErrLockLost, Err: err}
		l.c.emit(Event{Kind: EventError, Err: cause})
		l.cancel(cause)
	}
}

// isDead reports whether the connection was lost or given back.
func (sc *sharedConn) isDead() bool {
	sc.p.mu.Lock()
	defer sc.p.mu.Unlock()
	return sc.dead
}

// errConnGone is the cause of a statement not sent because its shared
// connection was lost meanwhile.
var errConnGone = errors.New("the shared session connection was lost")
