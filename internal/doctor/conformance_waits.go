package doctor

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"time"
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
type waitEnd struct {
	name string
	set  string // the setting set for the wait's transaction, "" for a cancel
}

var waitEnds = []waitEnd{
	{"lock_timeout", "lock_timeout"},
	{"statement_timeout", "statement_timeout"},
	{"cancel", ""},
}

// checkTimeoutLeavesNothing: a second session waits for a lock the first
// holds, its wait ended by lock_timeout, statement_timeout or a cancel
// while the first releases the lock before, as or after it fires. Whatever
// the race, a wait that reported an error holds nothing on its backend,
// and one that succeeded holds the lock: never granted while reporting
// failure. Transaction locks are tried on every path, session locks
// unless transaction pooling was proven.
func checkTimeoutLeavesNothing(ctx context.Context, e *env) Check {
	p := e.poolerProbe(ctx)
	kinds := []bool{false} // session lock?
	if p.err != nil || !p.txPooler() {
		kinds = append(kinds, true)
	}
	a, err := e.DB.Conn(ctx)
	if err != nil {
		return unanswered("a connection", err)
	}
	defer a.Close()
	granted, timedOut, orphans := 0, 0, 0
	for _, session := range kinds {
		for _, end := range waitEnds {
			for _, f := range raceDelays {
				key := conformanceKey("timeout")
				got, errB, orphaned, leaked, err := raceOnce(ctx, e.DB, a, key, session, end, time.Duration(f*float64(raceTimeout)))
				if err != nil {
					return unanswered(fmt.Sprintf("the %s race (%s)", end.name, lockKind(session)), err)
				}
				if leaked {
					unsafe := []Use{UseExclusive}
					if session {
						unsafe = sessionUses
					}
					return Check{Status: Fail,
						Detail: fmt.Sprintf("a %s wait ended by %s reported an error (%v), and the lock %d was still held %v after its connection was closed (as lockgen closes it after a lock statement that failed): granted as the timeout fired and kept by a server session nobody will unlock; %s",
							lockKind(session), end.name, errB, key, orphanWait, meaning(unsafe...)),
						Fix: "use a server whose advisory locks are PostgreSQL's; until then do not bound waits with lock_timeout, statement_timeout or cancels"}
				}
				switch {
				case got:
					granted++
				case orphaned:
					orphans++
				default:
					timedOut++
				}
			}
		}
	}
	var tried []string
	for _, s := range kinds {
		tried = append(tried, lockKind(s)+" locks")
	}
	detail := fmt.Sprintf("%d waits for a held lock (%s), ended by lock_timeout, statement_timeout or a cancel of %v while the holder released it before, as or after that: %d got the lock and held it, %d reported an error and held nothing",
		granted+timedOut+orphans, strings.Join(tried, " and "), raceTimeout, granted, timedOut)
	if orphans > 0 {
		detail += fmt.Sprintf(", %d reported an error while their session held the lock (granted as the timeout fired, as PostgreSQL can), and closing the connection, as lockgen does then, released it", orphans)
	}
	if len(kinds) == 1 {
		detail += "; session locks not tried: transaction pooling was proven"
	}
	return Check{Status: Pass, Detail: detail}
}

func lockKind(session bool) string {
	if session {
		return "session"
	}
	return "transaction"
}

// raceOnce holds key on a (a session lock, or a transaction lock in an
// open transaction) and releases it after delay, while b, a connection of
// db's of its own, waits for it in a transaction whose wait end fires at
// raceTimeout. It reports whether b got the lock; else b's error, whether
// b's session held the lock despite it (orphaned), and whether the lock
// was still held a while after b's connection was closed (leaked).
func raceOnce(ctx context.Context, db *sql.DB, a *sql.Conn, key int64, session bool, end waitEnd, delay time.Duration) (got bool, errB error, orphaned, leaked bool, err error) {
	b, err := db.Conn(ctx)
	if err != nil {
		return false, nil, false, false, err
	}
	defer b.Close()
	var txA *sql.Tx
	if session {
		ok, _, err := tryLock(ctx, a, key)
		if err != nil || !ok {
			return false, nil, false, false, orNotGranted(err, key)
		}
	} else {
		if txA, err = a.BeginTx(ctx, nil); err != nil {
			return false, nil, false, false, err
		}
		defer txA.Rollback()
		var ok bool
		if err := txA.QueryRowContext(ctx, `SELECT pg_catalog.pg_try_advisory_xact_lock($1)`, key).Scan(&ok); err != nil || !ok {
			return false, nil, false, false, orNotGranted(err, key)
		}
	}
	released := make(chan error, 1)
	go func() {
		time.Sleep(delay)
		if session {
			_, err := a.ExecContext(context.WithoutCancel(ctx), `SELECT pg_catalog.pg_advisory_unlock($1)`, key)
			released <- err
			return
		}
		released <- txA.Commit()
	}()
	txB, err := b.BeginTx(ctx, nil)
	if err != nil {
		<-released
		return false, nil, false, false, err
	}
	defer txB.Rollback()
	wctx := ctx
	if end.set != "" {
		if _, err := txB.ExecContext(ctx, `SELECT pg_catalog.set_config($1, $2, true)`, end.set, fmt.Sprintf("%dms", raceTimeout.Milliseconds())); err != nil {
			<-released
			return false, nil, false, false, err
		}
	} else {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, raceTimeout)
		defer cancel()
	}
	// The wait and the look at what it got are one statement, so that the
	// look runs under no timeout of its own: it reads pg_locks once the
	// lock function has returned (LATERAL on its row).
	lockFn := "pg_advisory_xact_lock"
	if session {
		lockFn = "pg_advisory_lock"
	}
	lockSQL := `SELECT h.n FROM (SELECT pg_catalog.` + lockFn + `($1), 1) AS l(v, one),
LATERAL (SELECT count(*) FROM pg_catalog.pg_locks AS k
  WHERE k.locktype = 'advisory' AND k.objsubid = 1 AND k.granted AND k.pid = pg_catalog.pg_backend_pid()
    AND ((k.classid::bigint << 32) | k.objid::bigint) = $1 AND l.one = 1) AS h(n)`
	var n int
	errB = txB.QueryRowContext(wctx, lockSQL, key).Scan(&n)
	if rerr := <-released; rerr != nil {
		return false, nil, false, false, fmt.Errorf("the holder's release: %w", rerr)
	}
	if errB == nil {
		if n != 1 {
			return false, nil, false, false, fmt.Errorf("the wait succeeded and its backend holds the lock %d times, not once", n)
		}
		if err := txB.Commit(); err != nil {
			return false, nil, false, false, err
		}
		if session {
			_, _ = b.ExecContext(ctx, `SELECT pg_catalog.pg_advisory_unlock($1)`, key)
		}
		return true, nil, false, false, nil
	}
	_ = txB.Rollback()
	if errors.Is(errB, context.DeadlineExceeded) && ctx.Err() != nil {
		return false, nil, false, false, ctx.Err()
	}
	// PostgreSQL itself can grant a session lock as the timeout fires: the
	// error is raised, the lock stays with the session. lockgen closes the
	// connection after a lock statement that failed, and so does this
	// check; the path must then end or reset the server session. A wait
	// that a cancel ended by closing the connection may still be granted
	// to its backend, which exits when it finds the client gone. So a lock
	// is leaked only if it is still held a while after the close.
	if n, err := holds(ctx, b, key, true); err == nil && n > 0 {
		orphaned = true
	}
	_ = b.Raw(func(any) error { return driver.ErrBadConn })
	for deadline := time.Now().Add(orphanWait); ; {
		n, err := holds(ctx, a, key, false)
		if err != nil {
			return false, nil, false, false, err
		}
		if n == 0 {
			return false, errB, orphaned, false, nil
		}
		if time.Now().After(deadline) {
			for i := 0; i < 20; i++ { // leave nothing behind (see checkReturnedConnClean)
				if n, err := holds(ctx, a, key, false); err != nil || n == 0 {
					break
				}
				_, _ = db.ExecContext(context.WithoutCancel(ctx), `SELECT pg_catalog.pg_advisory_unlock($1)`, key)
			}
			return false, errB, orphaned, true, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
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
	a, b, err := twoConns(ctx, e.DB)
	if err != nil {
		return unanswered("two connections", err)
	}
	defer a.Close()
	defer b.Close()
	key := conformanceKey("waiter-dies")
	txA, err := a.BeginTx(ctx, nil)
	if err != nil {
		return unanswered("BEGIN", err)
	}
	defer txA.Rollback()
	var ok bool
	if err := txA.QueryRowContext(ctx, `SELECT pg_catalog.pg_try_advisory_xact_lock($1)`, key).Scan(&ok); err != nil || !ok {
		return unanswered("pg_try_advisory_xact_lock", orNotGranted(err, key))
	}
	waited := make(chan error, 1)
	go func() {
		tx, err := b.BeginTx(ctx, nil)
		if err != nil {
			waited <- err
			return
		}
		defer tx.Rollback()
		_, err = tx.ExecContext(ctx, `SELECT pg_catalog.pg_advisory_xact_lock($1)`, key)
		waited <- err
	}()
	var pid int32
	for deadline := time.Now().Add(diesWait); ; {
		err := txA.QueryRowContext(ctx, `SELECT COALESCE((SELECT pid FROM pg_catalog.pg_locks
			WHERE locktype = 'advisory' AND objsubid = 1 AND NOT granted
			  AND ((classid::bigint << 32) | objid::bigint) = $1 LIMIT 1), 0)`, key).Scan(&pid)
		if err != nil {
			return unanswered("looking for the waiter in pg_locks", err)
		}
		if pid != 0 {
			break
		}
		select {
		case err := <-waited:
			return Check{Status: Fail,
				Detail: fmt.Sprintf("a wait for the transaction lock %d held by another transaction returned (%v) instead of waiting; %s", key, err, meaning(UseExclusive, UseSession, UseLead)),
				Fix:    xactFix}
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = txA.Rollback()
			<-waited
			return Check{Status: Warn, Detail: fmt.Sprintf("not tested: no waiter for the lock %d appeared in pg_locks within %v", key, diesWait),
				Fix: "give the pool at least two server connections"}
		}
	}
	var signalled bool
	if err := txA.QueryRowContext(ctx, `SELECT pg_catalog.pg_terminate_backend($1)`, pid).Scan(&signalled); err != nil || !signalled {
		_ = txA.Rollback()
		<-waited
		return Check{Status: Warn,
			Detail: fmt.Sprintf("not tested: the role may not terminate the waiting backend %d (%v)", pid, err),
			Fix:    "run the conformance checks as a role that may signal its own backends (the same role, or pg_signal_backend)"}
	}
	start := time.Now()
	select {
	case err := <-waited:
		if err == nil {
			return Check{Status: Fail,
				Detail: fmt.Sprintf("the waiter on backend %d was terminated, yet its wait for the lock %d reported success while the lock was still held by another transaction; %s", pid, key, meaning(UseExclusive, UseSession, UseLead)),
				Fix:    xactFix}
		}
		return Check{Status: Pass,
			Detail: fmt.Sprintf("a waiter for the transaction lock %d whose backend (%d) was terminated returned after %v with an error (%v)", key, pid, time.Since(start).Round(time.Millisecond), firstLine(err))}
	case <-time.After(diesWait):
		_ = txA.Rollback()
		<-waited
		return Check{Status: Fail,
			Detail: fmt.Sprintf("a waiter for the transaction lock %d whose backend (%d) was terminated had not returned %v later: the path holds the client instead of passing the loss on, so a waiter (WithWait) or a campaigning leader hangs; %s", key, pid, diesWait, meaning(UseExclusive, UseSession, UseLead)),
			Fix:    "connect directly or through PgBouncer, which closes the client's connection when its server connection dies"}
	}
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
