package doctor

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/lockgen/lockgen/pgadvisory"
)

// The conformance checks of waiting: a wait that ends in a timeout or a
// cancel must leave nothing held, and a waiter whose session dies must
// return.
const (
	TimeoutLeavesNothing = "conformance.timeout_leaves_nothing"
	WaiterSessionDies    = "conformance.waiter_session_dies"
)

func init() {
	ConformanceNames = append(ConformanceNames, TimeoutLeavesNothing, WaiterSessionDies)
	checks[TimeoutLeavesNothing] = checkTimeoutLeavesNothing
	checks[WaiterSessionDies] = checkWaiterSessionDies
}

// raceTimeout is the timeout of the waits that the holder's release races.
const raceTimeout = 40 * time.Millisecond

// raceDelays are when the holder releases, as fractions of raceTimeout:
// before the timeout fires, as it fires, and after.
var raceDelays = []float64{0.7, 1.0, 1.3}

// waitEnd is how a wait is made to end early.
type waitEnd int

const (
	endLockTimeout      waitEnd = iota // WithWait(raceTimeout): the lock statement's lock_timeout
	endStatementTimeout                // WithWait(0) in a transaction under statement_timeout = raceTimeout
	endCancel                          // WithWait(0) under a ctx that ends after raceTimeout
)

func (w waitEnd) String() string {
	return [...]string{"lock_timeout", "statement_timeout", "a cancel"}[w]
}

// waitFunc runs one of lockgen's calls, waiting for lock, its wait ended
// by end, and reports whether fn ran, how often fn saw the lock held
// (look says, for fns that cannot look themselves), and the call's error.
type waitFunc func(ctx context.Context, lock pgadvisory.Lock, end waitEnd, look func() (int, error)) (ran bool, held int, err error)

// waiter is one of lockgen's calls on a driver, as the timeout races run
// it. open makes its Locker (and a pool of its own, if it needs one);
// done closes what open opened. open's error says why it is not tried.
type waiter struct {
	name    string // the call and its driver, for the messages
	session bool   // a session lock: the holder holds one too
	ends    []waitEnd
	open    func(ctx context.Context) (wait waitFunc, done func(), err error)
}

// checkTimeoutLeavesNothing: lockgen's own calls wait for a lock another
// session holds, their waits ended by lock_timeout (WithWait with a
// timeout), statement_timeout or a cancel of ctx while the holder releases
// the lock before, as or after that fires: RunExclusive over database/sql
// and over pgx (when the path's driver is pgx's), and RunSession unless
// transaction pooling was proven. Whatever the race, a call that returned
// nil ran fn holding the lock, and once a call that returned an error is
// done (lockgen rolls back or closes the connection), the lock is held
// nowhere: a path that grants a lock while reporting the timeout and keeps
// it fails here. A call that fails for another reason than its wait's end
// (ErrLockTimeout, the ctx's deadline) fails the check too: lockgen's
// waiting calls do not work on that path.
//
// It uses two connections at a time, the holder's and the waiter's: a
// session-mode pooler gives every client connection a server connection
// of its own, so the idle connections of e.DB are closed before a waiter
// with a pool of its own starts.
func checkTimeoutLeavesNothing(ctx context.Context, e *env) Check {
	a, err := e.DB.Conn(ctx)
	if err != nil {
		return unanswered("a connection", err)
	}
	defer a.Close()
	p := e.poolerProbe(ctx)
	granted, refused := 0, 0
	var tried, notTried []string
	for _, w := range e.timeoutWaiters(p.err == nil && p.txPooler(), p.err == nil && p.proxied(), &notTried) {
		closeIdle(ctx, e.DB)
		wait, done, err := w.open(ctx)
		if err != nil {
			notTried = append(notTried, fmt.Sprintf("%s (%v)", w.name, err))
			continue
		}
		tried = append(tried, w.name)
		for _, end := range w.ends {
			for _, f := range raceDelays {
				key := conformanceKey("timeout")
				r, err := race(ctx, e.DB, a, key, w.session, wait, end, time.Duration(f*float64(raceTimeout)))
				if err != nil {
					done()
					return unanswered(fmt.Sprintf("the %s race of %s", end, w.name), err)
				}
				unsafe := []Use{UseExclusive}
				if w.session {
					unsafe = sessionUses
				}
				switch {
				case r.err == nil && (!r.ran || r.held != 1):
					done()
					return Check{Status: Fail,
						Detail: fmt.Sprintf("%s, its wait for the lock %d ended by %s, returned nil while fn saw the lock held %d times, not once: lockgen reported a lock its backend did not hold; %s",
							w.name, key, end, r.held, meaning(unsafe...)),
						Fix: "use a server whose advisory locks are PostgreSQL's, and a path that answers each statement from the backend that ran it"}
				case r.leaked:
					done()
					return Check{Status: Fail,
						Detail: fmt.Sprintf("%s, its wait for the lock %d ended by %s, returned an error (%v), and %v later the lock was still held: granted as the timeout fired, and kept by a server session although lockgen rolled back or closed its connection; %s",
							w.name, key, end, firstLine(r.err), orphanWait, meaning(unsafe...)),
						Fix: "use a server whose advisory locks are PostgreSQL's and a path that ends (or resets, PgBouncer's server_reset_query) a server session whose client left; until then do not bound waits (WithWait with a timeout, statement_timeout, a ctx deadline)"}
				case r.err != nil && !end.explains(r.err):
					done()
					return Check{Status: Fail,
						Detail: fmt.Sprintf("%s, its wait for the lock %d ended by %s, failed with an error that the wait's end does not explain (%v): lockgen's waiting calls do not work on this path; %s",
							w.name, key, end, firstLine(r.err), meaning(unsafe...)),
						Fix: "connect directly to PostgreSQL or through PgBouncer: lockgen needs PostgreSQL's advisory locks and settings (lock_timeout, statement_timeout)"}
				case r.err == nil:
					granted++
				default:
					refused++
				}
			}
		}
		done()
	}
	if len(tried) == 0 {
		return unanswered("a Locker on the path", fmt.Errorf("none could be made: %s", strings.Join(notTried, "; ")))
	}
	detail := fmt.Sprintf("%d calls of lockgen (%s) waited for a lock another session held, each wait ended by lock_timeout (WithWait(%v)), statement_timeout or a cancel of ctx after %v while the holder released the lock before, as or after that: %d returned nil and ran fn holding the lock, %d returned an error and left the lock held nowhere",
		granted+refused, strings.Join(tried, ", "), raceTimeout, raceTimeout, granted, refused)
	if len(notTried) > 0 {
		detail += "; not tried: " + strings.Join(notTried, "; ")
	}
	return Check{Status: Pass, Detail: detail}
}

// closeIdle closes db's idle connections (a pool reopens what it needs).
func closeIdle(ctx context.Context, db *sql.DB) {
	for range db.Stats().Idle {
		c, err := db.Conn(ctx)
		if err != nil {
			return
		}
		_ = c.Raw(func(any) error { return driver.ErrBadConn })
		_ = c.Close()
	}
}

// timeoutWaiters are the calls the timeout races run, in order:
// RunExclusive over database/sql (e.DB); RunSession over e.DB unless
// txPooler (declaring a session-mode pooler when proxied); when e.DB's
// driver is pgx's, RunExclusive under statement_timeout (a database/sql
// pool of the same configuration whose transactions set it) and over a
// pgx pool of the same configuration. What it leaves out, it adds to
// notTried.
func (e *env) timeoutWaiters(txPooler, proxied bool, notTried *[]string) []waiter {
	none := func() {}
	ws := []waiter{{name: "RunExclusive (database/sql)", ends: []waitEnd{endLockTimeout, endCancel},
		open: func(ctx context.Context) (waitFunc, func(), error) {
			l, err := pgadvisory.New(pgadvisory.Stdlib(e.DB))
			if err != nil {
				return nil, nil, err
			}
			return stdlibWait(l), none, nil
		}}}
	if txPooler {
		*notTried = append(*notTried, "RunSession (transaction pooling was proven)")
	} else {
		ws = append(ws, waiter{name: "RunSession (database/sql)", session: true, ends: []waitEnd{endLockTimeout, endCancel},
			open: func(ctx context.Context) (waitFunc, func(), error) {
				var opts []pgadvisory.LockerOption
				if proxied {
					// A pooler the probe could not prove to pool
					// transactions: a service here declares session mode, as
					// lockgen requires.
					opts = append(opts, pgadvisory.WithSessionModePooler())
				}
				l, err := pgadvisory.New(pgadvisory.Stdlib(e.DB), opts...)
				if err != nil {
					return nil, nil, err
				}
				return func(ctx context.Context, lock pgadvisory.Lock, end waitEnd, look func() (int, error)) (ran bool, held int, err error) {
					ctx, opts, cancel := end.call(ctx)
					defer cancel()
					err = l.RunSession(ctx, lock, func(context.Context) error {
						ran = true
						held, err = look() // the holder released it: the only holder is this call
						return err
					}, opts...)
					return ran, held, err
				}, none, nil
			}})
	}
	ws = append(ws, waiter{name: "RunExclusive (database/sql, under statement_timeout)", ends: []waitEnd{endStatementTimeout},
		open: func(ctx context.Context) (waitFunc, func(), error) {
			cfg := pgxConfig(ctx, e.DB)
			if cfg == nil {
				return nil, nil, errNotPgx
			}
			db := sql.OpenDB(stmtTimeoutConnector{stdlib.GetConnector(*cfg), fmt.Sprintf("%dms", raceTimeout.Milliseconds())})
			db.SetMaxOpenConns(1)
			l, err := pgadvisory.New(pgadvisory.Stdlib(db))
			if err != nil {
				_ = db.Close()
				return nil, nil, err
			}
			return stdlibWait(l), func() { _ = db.Close() }, nil
		}})
	ws = append(ws, waiter{name: "RunExclusive (pgx)", ends: []waitEnd{endLockTimeout, endCancel},
		open: func(ctx context.Context) (waitFunc, func(), error) {
			cfg := pgxConfig(ctx, e.DB)
			if cfg == nil {
				return nil, nil, errNotPgx
			}
			pcfg, err := pgxpool.ParseConfig("")
			if err != nil {
				return nil, nil, err
			}
			pcfg.ConnConfig, pcfg.MaxConns = cfg, 1
			pool, err := pgxpool.NewWithConfig(ctx, pcfg)
			if err != nil {
				return nil, nil, err
			}
			l, err := pgadvisory.New(pgadvisory.Pgx(pool))
			if err != nil {
				pool.Close()
				return nil, nil, err
			}
			return func(ctx context.Context, lock pgadvisory.Lock, end waitEnd, _ func() (int, error)) (ran bool, held int, err error) {
				ctx, opts, cancel := end.call(ctx)
				defer cancel()
				err = l.RunExclusive(ctx, lock, func(tx pgx.Tx) error {
					ran = true
					return tx.QueryRow(ctx, holdsSQL, lock.ID, true).Scan(&held)
				}, opts...)
				return ran, held, err
			}, pool.Close, nil
		}})
	return ws
}

var errNotPgx = errors.New("the driver is not pgx's")

// stdlibWait is RunExclusive on l, a Locker over database/sql.
func stdlibWait(l *pgadvisory.Locker[*sql.Tx]) waitFunc {
	return func(ctx context.Context, lock pgadvisory.Lock, end waitEnd, _ func() (int, error)) (ran bool, held int, err error) {
		ctx, opts, cancel := end.call(ctx)
		defer cancel()
		err = l.RunExclusive(ctx, lock, func(tx *sql.Tx) error {
			ran = true
			held, err = holds(ctx, tx, lock.ID, true)
			return err
		}, opts...)
		return ran, held, err
	}
}

// explains reports whether err is what a wait ended by w returns:
// ErrLockTimeout, or the ctx's deadline. A statement_timeout set for the
// transaction alone (as stmtTimeoutConnector sets it) may come back as
// the server's own 57014: lockgen names the setting only when it can read
// it on another connection (a role's, a database's, a session's setting).
func (w waitEnd) explains(err error) bool {
	return errors.Is(err, pgadvisory.ErrLockTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		w == endStatementTimeout && pgadvisory.SQLState(err) == "57014"
}

// call is the context and options of a call whose wait end ends.
func (w waitEnd) call(ctx context.Context) (context.Context, []pgadvisory.Option, context.CancelFunc) {
	switch w {
	case endLockTimeout:
		return ctx, []pgadvisory.Option{pgadvisory.WithWait(raceTimeout)}, func() {}
	case endCancel:
		ctx, cancel := context.WithTimeout(ctx, raceTimeout)
		return ctx, []pgadvisory.Option{pgadvisory.WithWait(0)}, cancel
	}
	return ctx, []pgadvisory.Option{pgadvisory.WithWait(0)}, func() {}
}

// raceResult is what one race found: the call's error, what its fn saw,
// and whether the lock was still held orphanWait after a call that
// returned an error.
type raceResult struct {
	err    error
	ran    bool
	held   int
	leaked bool
}

// race holds key on a (a session lock for a session waiter, else a
// transaction lock in an open transaction) and releases it after delay,
// while wait waits for it, its wait ended by end; a, once the holder
// released, is where it looks at pg_locks. It returns an error only when
// the race could not be run.
func race(ctx context.Context, db *sql.DB, a *sql.Conn, key int64, session bool, wait waitFunc, end waitEnd, delay time.Duration) (raceResult, error) {
	var r raceResult
	var tx *sql.Tx
	if session {
		ok, _, err := tryLock(ctx, a, key)
		if err != nil || !ok {
			return r, orNotGranted(err, key)
		}
	} else {
		var err error
		if tx, err = a.BeginTx(ctx, nil); err != nil {
			return r, err
		}
		defer tx.Rollback()
		var ok bool
		if err := tx.QueryRowContext(ctx, `SELECT pg_catalog.pg_try_advisory_xact_lock($1)`, key).Scan(&ok); err != nil || !ok {
			return r, orNotGranted(err, key)
		}
	}
	released := make(chan struct{})
	var releaseErr error
	go func() {
		defer close(released)
		time.Sleep(delay)
		if session {
			_, releaseErr = a.ExecContext(context.WithoutCancel(ctx), `SELECT pg_catalog.pg_advisory_unlock($1)`, key)
			return
		}
		releaseErr = tx.Commit()
	}()
	look := func() (int, error) {
		<-released
		return holds(context.WithoutCancel(ctx), a, key, false)
	}
	r.ran, r.held, r.err = wait(ctx, pgadvisory.ID(key), end, look)
	<-released
	if releaseErr != nil {
		return r, fmt.Errorf("the holder's release: %w", releaseErr)
	}
	if r.err != nil && ctx.Err() != nil {
		return r, ctx.Err()
	}
	if r.err == nil {
		return r, nil
	}
	// lockgen rolled back, or closed the connection of a lock statement
	// that failed, before it returned; a backend whose client left may
	// take a moment to exit.
	for deadline := time.Now().Add(orphanWait); ; {
		n, err := holds(ctx, a, key, false)
		if err != nil {
			return r, err
		}
		if n == 0 {
			return r, nil
		}
		if time.Now().After(deadline) {
			unlockAnywhere(ctx, db, a, key)
			r.leaked = true
			return r, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pgxConfig is the pgx configuration of db's connections, or nil when
// db's driver is not pgx's stdlib.
func pgxConfig(ctx context.Context, db *sql.DB) *pgx.ConnConfig {
	c, err := db.Conn(ctx)
	if err != nil {
		return nil
	}
	defer c.Close()
	var cfg *pgx.ConnConfig
	_ = c.Raw(func(dc any) error {
		if pc, ok := dc.(interface{ Conn() *pgx.Conn }); ok {
			cfg = pc.Conn().Config()
		}
		return nil
	})
	return cfg
}

// stmtTimeoutConnector makes connections of pgx's stdlib driver whose
// transactions run under statement_timeout (SET LOCAL after BEGIN), as a
// role's or database's setting would put them, without leaving the
// setting on a pooled server session.
type stmtTimeoutConnector struct {
	driver.Connector
	timeout string
}

func (c stmtTimeoutConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	sc, ok := dc.(*stdlib.Conn)
	if !ok {
		_ = dc.Close()
		return nil, fmt.Errorf("doctor: pgx's stdlib connector made a %T", dc)
	}
	return stmtTimeoutConn{sc, c.timeout}, nil
}

// stmtTimeoutConn is a connection of stmtTimeoutConnector: pgx's, with
// BeginTx setting statement_timeout for the transaction.
type stmtTimeoutConn struct {
	*stdlib.Conn
	timeout string
}

func (c stmtTimeoutConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := c.Conn.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	if _, err := c.Conn.ExecContext(ctx, `SELECT pg_catalog.set_config('statement_timeout', $1, true)`,
		[]driver.NamedValue{{Ordinal: 1, Value: c.timeout}}); err != nil {
		_ = tx.Rollback()
		return nil, err
	}
	return tx, nil
}

// orphanWait bounds how long the backend of a wait that ended in an error
// may keep the lock: the time it takes to notice that its client left.
const orphanWait = time.Second

// diesWait bounds how long a waiter whose session was terminated may take
// to return.
const diesWait = 2 * time.Second

// checkWaiterSessionDies: a second session waits, without a timeout, for
// a transaction lock the first holds; its backend is terminated; the wait
// must return, with an error, within diesWait, as a pooler must pass the
// loss on rather than hold the client.
func checkWaiterSessionDies(ctx context.Context, e *env) Check {
	s, c, done := e.twoSessions(ctx, "waiter-dies", xactLocksOnly)
	if done {
		return c
	}
	defer s.close()
	txA, _, err := s.xactLockFirst(ctx)
	if err != nil {
		return unanswered("pg_try_advisory_xact_lock", err)
	}
	defer txA.Rollback()
	// The waiter's own context: a waiter the path holds is let go when
	// the check has its answer.
	wctx, letGo := context.WithCancel(ctx)
	defer letGo()
	waited := make(chan error, 1)
	go func() {
		tx, err := s.b.BeginTx(wctx, nil)
		if err != nil {
			waited <- err
			return
		}
		defer tx.Rollback()
		_, err = tx.ExecContext(wctx, `SELECT pg_catalog.pg_advisory_xact_lock($1)`, s.key)
		waited <- err
	}()
	giveUp := func() {
		letGo()
		_ = txA.Rollback()
		<-waited
	}
	var pid int32
	for deadline := time.Now().Add(diesWait); ; {
		err := txA.QueryRowContext(ctx, `SELECT COALESCE((SELECT pid FROM pg_catalog.pg_locks
			WHERE locktype = 'advisory' AND objsubid = 1 AND NOT granted
			  AND ((classid::bigint << 32) | objid::bigint) = $1 LIMIT 1), 0)`, s.key).Scan(&pid)
		if err != nil {
			giveUp()
			return unanswered("looking for the waiter in pg_locks", err)
		}
		if pid != 0 {
			break
		}
		select {
		case err := <-waited:
			return Check{Status: Fail,
				Detail: fmt.Sprintf("a wait for the transaction lock %d held by another transaction returned (%v) instead of waiting; %s", s.key, err, meaning(UseExclusive, UseSession, UseLead)),
				Fix:    xactFix}
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			giveUp()
			return Check{Status: Warn, Detail: fmt.Sprintf("not tested: no waiter for the lock %d appeared in pg_locks within %v", s.key, diesWait),
				Fix: "give the pool at least two server connections"}
		}
	}
	var signalled bool
	if err := txA.QueryRowContext(ctx, `SELECT pg_catalog.pg_terminate_backend($1)`, pid).Scan(&signalled); err != nil || !signalled {
		giveUp()
		return Check{Status: Warn,
			Detail: fmt.Sprintf("not tested: the role may not terminate the waiting backend %d (%v)", pid, err),
			Fix:    "run the conformance checks as a role that may signal its own backends (the same role, or pg_signal_backend)"}
	}
	start := time.Now()
	select {
	case err := <-waited:
		if err == nil {
			return Check{Status: Fail,
				Detail: fmt.Sprintf("the waiter on backend %d was terminated, yet its wait for the lock %d reported success while the lock was still held by another transaction; %s", pid, s.key, meaning(UseExclusive, UseSession, UseLead)),
				Fix:    xactFix}
		}
		return Check{Status: Pass,
			Detail: fmt.Sprintf("a waiter for the transaction lock %d whose backend (%d) was terminated returned after %v with an error (%v)", s.key, pid, time.Since(start).Round(time.Millisecond), firstLine(err))}
	case <-time.After(diesWait):
		giveUp()
		return Check{Status: Fail,
			Detail: fmt.Sprintf("a waiter for the transaction lock %d whose backend (%d) was terminated had not returned %v later: the path holds the client instead of passing the loss on, so a waiter (WithWait) or a campaigning leader hangs; %s", s.key, pid, diesWait, meaning(UseExclusive, UseSession, UseLead)),
			Fix:    "connect directly or through PgBouncer, which closes the client's connection when its server connection dies"}
	}
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
