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
// standby), once for every lock it will carry; each call then applies its
// own options to what was found (see admit). It runs under the ctx of
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
	var unlifted sql.NullString
	if err := conn.simpleQueryRow(octx, sessionProbeSQL(announced, false), &sc.pid, &sc.standby, &unlifted); err != nil {
		conn.discard()
		fail(func(ctx context.Context, c *callState) error { return c.sessionFailure(ctx, "begin", err) })
		return
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
// An error that is not the server's answer to a statement on a live
// connection makes the connection lost (see fail).
func (sc *sharedConn) run(ctx context.Context, timeout time.Duration, query string, args []any, dest ...any) error {
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	err := sc.conn.queryRow(qctx, query, args, dest...)
	if err != nil && !serverAnswered(err, qctx) {
		if qctx.Err() != nil {
			err = fmt.Errorf("the statement did not answer within %v (WithCheckTimeout), "+
				"as on a half-open link; the connection was closed: %w", timeout, err)
		}
		sc.fail(err)
	}
	return err
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
