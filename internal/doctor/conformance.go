package doctor

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockgen/lockgen/keyspace"
)

// The conformance checks (lockgen doctor -conformance): the failure modes
// that servers and poolers resembling PostgreSQL show, each tried on the
// path the service uses with two sessions of its own. Their names are a
// contract, as [Names] are.
const (
	XactExcludesXact       = "conformance.xact_excludes_xact"
	SessionExcludesSession = "conformance.session_excludes_session"
	SessionExcludesXact    = "conformance.session_excludes_xact"
	XactExcludesSession    = "conformance.xact_excludes_session"
	HeldThroughTransaction = "conformance.held_through_transaction"
	SameBackend            = "conformance.same_backend"
	ReturnedConnClean      = "conformance.returned_connection_clean"
)

// ConformanceNames are the conformance checks in the order
// [RunConformance] runs them.
var ConformanceNames = []string{XactExcludesXact, SessionExcludesSession, SessionExcludesXact,
	XactExcludesSession, HeldThroughTransaction, SameBackend, ReturnedConnClean}

// RunConformance runs every conformance check and returns their outcomes,
// in the shape of [Run]'s. It returns an error only when cfg is unusable
// or the server cannot be reached at all. Every lock it takes is under a
// fresh key of its own and released before it returns.
func RunConformance(ctx context.Context, cfg Config) (Report, error) {
	if cfg.DB == nil {
		return Report{}, errors.New("doctor: nil *sql.DB")
	}
	if err := cfg.DB.PingContext(ctx); err != nil {
		return Report{}, fmt.Errorf("doctor: %w", err)
	}
	e := &env{Config: cfg}
	var r Report
	for _, name := range ConformanceNames {
		r.Checks = append(r.Checks, runOne(ctx, name, e))
	}
	return r, nil
}

func init() {
	checks[XactExcludesXact] = checkXactExcludesXact
	checks[SessionExcludesSession] = checkSessionExcludesSession
	checks[SessionExcludesXact] = checkSessionExcludesXact
	checks[XactExcludesSession] = checkXactExcludesSession
	checks[HeldThroughTransaction] = checkHeldThroughTransaction
	checks[SameBackend] = checkSameBackend
	checks[ReturnedConnClean] = checkReturnedConnClean
}

// sessionUses are the uses that hold a session-level lock.
var sessionUses = []Use{UseSession, UseLead, UseMigrate}

// meaning says what a failed check means for each of lockgen's entry
// points: those of unsafe cannot be trusted on this path, the others are
// not affected by what failed.
func meaning(unsafe ...Use) string {
	var bad, ok []string
	for _, u := range uses {
		if slices.Contains(unsafe, u.use) {
			bad = append(bad, u.what)
		} else {
			ok = append(ok, u.what)
		}
	}
	s := "unsafe on this path: " + strings.Join(bad, ", ")
	if len(ok) > 0 {
		s += "; not affected by this check: " + strings.Join(ok, ", ")
	}
	return s
}

// conformanceKey is a lock key of this run alone.
func conformanceKey(kind string) int64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return keyspace.ParamID("lockgen.doctor.conformance", kind, hex.EncodeToString(b[:]))
}

// sessionPathRefused is the outcome of a session-lock check behind a
// proven transaction pooler, where taking a session lock would leak it:
// no lock is taken; the check fails when a declared use needs session
// locks and names what is safe there.
func sessionPathRefused(e *env, p *probe) (Check, bool) {
	if p.err != nil || !p.txPooler() {
		return Check{}, false
	}
	detail := fmt.Sprintf("not tried: the pooler probe proved transaction pooling (%s), where a session lock stays on a server connection that other clients then use; %s; %s",
		p.evidence(), e.txPoolerUses(), e.usesText())
	if e.needsSessionPath() {
		return Check{Status: Fail, Detail: detail, Fix: sessionFix}, true
	}
	return Check{Status: Pass, Detail: detail}, true
}

const sessionFix = "give session locks, leader election and Migrate a direct URL or a pool in pool_mode=session, or lead with WithLease; on this path use only transaction locks (RunExclusive, RunOnce, LockTx, fencing) and leases"

// xactFix is the fix when transaction locks do not hold.
const xactFix = "connect directly to PostgreSQL or through PgBouncer (either mode): lockgen needs PostgreSQL's advisory locks, held by the transaction's own backend"

// holdsSQL counts the granted advisory locks of key $1 in the current
// database: on the session that asks (pg_backend_pid()) when $2, else on
// any session.
const holdsSQL = `SELECT count(*) FROM pg_catalog.pg_locks
WHERE locktype = 'advisory' AND objsubid = 1 AND granted
  AND ((classid::bigint << 32) | objid::bigint) = $1
  AND database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = pg_catalog.current_database())
  AND (NOT $2 OR pid = pg_catalog.pg_backend_pid())`

func holds(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, key int64, own bool) (int, error) {
	var n int
	err := q.QueryRowContext(ctx, holdsSQL, key, own).Scan(&n)
	return n, err
}

// sessions is what a conformance check works with: two connections of the
// path, a lock key of its own, and the session locks it took, which close
// releases.
type sessions struct {
	a, b *sql.Conn
	key  int64
	held []*sql.Conn // one entry per session lock granted, on the connection that got it
	db   *sql.DB     // the path
	ctx  context.Context
}

// needs says whether a check takes session locks.
type needs bool

const (
	xactLocksOnly needs = false // transaction locks: tried on every path
	sessionLocks  needs = true  // not taken behind a proven transaction pooler, where they would leak
)

// twoSessions is every conformance check's prologue: behind a proven
// transaction pooler a check that takes session locks ends at once
// (sessionPathRefused); otherwise two connections of the path and a fresh
// key named after kind. done is true when the check ends here, with c as
// its outcome. The caller defers s.close().
func (e *env) twoSessions(ctx context.Context, kind string, n needs) (s *sessions, c Check, done bool) {
	if n == sessionLocks {
		if c, refused := sessionPathRefused(e, e.poolerProbe(ctx)); refused {
			return nil, c, true
		}
	}
	a, b, err := twoConns(ctx, e.DB)
	if err != nil {
		return nil, unanswered("two connections", err), true
	}
	return &sessions{a: a, b: b, key: conformanceKey(kind), db: e.DB, ctx: ctx}, Check{}, false
}

// close releases the session locks s took (see release) and closes both
// connections.
func (s *sessions) close() {
	release(context.WithoutCancel(s.ctx), s.key, s.held, s.a, s.b)
	_ = s.a.Close()
	_ = s.b.Close()
}

// tryLock tries the session lock on c and records it if granted.
func (s *sessions) tryLock(ctx context.Context, c *sql.Conn) (got bool, pid int32, err error) {
	got, pid, err = tryLock(ctx, c, s.key)
	if got {
		s.held = append(s.held, c)
	}
	return got, pid, err
}

// lockFirst takes the session lock on the first connection, which must
// get it: the key is fresh.
func (s *sessions) lockFirst(ctx context.Context) (pid int32, err error) {
	got, pid, err := s.tryLock(ctx, s.a)
	if err == nil && !got {
		err = orNotGranted(nil, s.key)
	}
	return pid, err
}

// unlock unlocks the session lock on c; unlocked is false when c's
// session held nothing to release.
func (s *sessions) unlock(ctx context.Context, c *sql.Conn) (unlocked bool, err error) {
	err = c.QueryRowContext(ctx, `SELECT pg_catalog.pg_advisory_unlock($1)`, s.key).Scan(&unlocked)
	if unlocked {
		if i := slices.Index(s.held, c); i >= 0 {
			s.held = slices.Delete(s.held, i, i+1)
		}
	}
	return unlocked, err
}

// xactLockFirst begins a transaction on the first connection and takes
// the transaction lock in it, as RunExclusive does; the caller rolls tx
// back (a no-op once committed).
func (s *sessions) xactLockFirst(ctx context.Context) (tx *sql.Tx, pid int32, err error) {
	tx, err = s.a.BeginTx(ctx, nil)
	if err != nil {
		return nil, 0, err
	}
	var got bool
	if err := tx.QueryRowContext(ctx, `SELECT pg_catalog.pg_try_advisory_xact_lock($1), pg_catalog.pg_backend_pid()`, s.key).Scan(&got, &pid); err != nil || !got {
		_ = tx.Rollback()
		return nil, 0, orNotGranted(err, s.key)
	}
	return tx, pid, nil
}

// oneServerConn is the outcome of a check whose second session got no
// answer while the first held a transaction open.
func oneServerConn(err error) Check {
	return Check{Status: Warn,
		Detail: fmt.Sprintf("not tested: the second session got no answer within %v while the first held its transaction open (%v): a pooler with one server connection?", secondWait, err),
		Fix:    "give the pool at least two server connections"}
}

// checkXactExcludesXact: a transaction lock held by one transaction is
// refused to a second, as RunExclusive takes it.
func checkXactExcludesXact(ctx context.Context, e *env) Check {
	s, c, done := e.twoSessions(ctx, "xact", xactLocksOnly)
	if done {
		return c
	}
	defer s.close()
	x := xactExclusion(ctx, s.a, s.b)
	switch x.outcome {
	case xactExcludes:
		return Check{Status: Pass, Detail: x.text}
	case xactExcludesNobody:
		return Check{Status: Fail, Detail: x.text + "; " + meaning(UseExclusive), Fix: xactFix}
	}
	return Check{Status: Warn, Detail: x.text,
		Fix: "give the pool at least two server connections, so that a transaction waiting for another's lock does not wait for its server connection"}
}

// checkSessionExcludesSession: a session lock held by one session is
// refused to a second, and is theirs to take once released.
func checkSessionExcludesSession(ctx context.Context, e *env) Check {
	s, c, done := e.twoSessions(ctx, "session", sessionLocks)
	if done {
		return c
	}
	defer s.close()
	pidA, err := s.lockFirst(ctx)
	if err != nil {
		return unanswered("pg_try_advisory_lock on the first session", err)
	}
	gotB, pidB, err := s.tryLock(ctx, s.b)
	if err != nil {
		return unanswered("pg_try_advisory_lock on the second session", err)
	}
	if gotB {
		return Check{Status: Fail,
			Detail: fmt.Sprintf("a second session (backend %d) got the session lock %d that the first (backend %d) held; %s", pidB, s.key, pidA, meaning(sessionUses...)),
			Fix:    sessionFix}
	}
	unlocked, err := s.unlock(ctx, s.a)
	if err != nil {
		return unanswered("pg_advisory_unlock on the first session", err)
	}
	if !unlocked {
		return Check{Status: Fail,
			Detail: fmt.Sprintf("the first session's unlock of %d found no lock to release: it ran on another server session than the lock; %s", s.key, meaning(sessionUses...)),
			Fix:    sessionFix}
	}
	gotB, _, err = s.tryLock(ctx, s.b)
	if err != nil {
		return unanswered("pg_try_advisory_lock on the second session after the unlock", err)
	}
	if !gotB {
		return Check{Status: Fail,
			Detail: fmt.Sprintf("once the first session unlocked %d, the second still could not take it: the lock stayed held somewhere; %s", s.key, meaning(sessionUses...)),
			Fix:    sessionFix}
	}
	return Check{Status: Pass,
		Detail: fmt.Sprintf("a second session (backend %d) could not take the session lock %d that the first (backend %d) held, and took it once the first unlocked it", pidB, s.key, pidA)}
}

func orNotGranted(err error, key int64) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("the fresh key %d, which nobody should hold, was not granted", key)
}

// checkSessionExcludesXact: a session lock held by one session is refused
// to another's transaction lock (RunSession against RunExclusive on one
// lock).
func checkSessionExcludesXact(ctx context.Context, e *env) Check {
	s, c, done := e.twoSessions(ctx, "session-xact", sessionLocks)
	if done {
		return c
	}
	defer s.close()
	pidA, err := s.lockFirst(ctx)
	if err != nil {
		return unanswered("pg_try_advisory_lock on the first session", err)
	}
	var gotB bool
	var pidB int32
	if err := s.b.QueryRowContext(ctx, `SELECT pg_catalog.pg_try_advisory_xact_lock($1), pg_catalog.pg_backend_pid()`, s.key).Scan(&gotB, &pidB); err != nil {
		return unanswered("pg_try_advisory_xact_lock on the second session", err)
	}
	if gotB {
		return Check{Status: Fail,
			Detail: fmt.Sprintf("a transaction on a second session (backend %d) got the transaction lock %d while the first session (backend %d) held it at session level; %s", pidB, s.key, pidA, meaning(append([]Use{UseExclusive}, sessionUses...)...)),
			Fix:    sessionFix}
	}
	return Check{Status: Pass,
		Detail: fmt.Sprintf("a transaction on a second session (backend %d) could not take the transaction lock %d that the first session (backend %d) held at session level", pidB, s.key, pidA)}
}

// checkXactExcludesSession: a transaction lock is refused to another
// session's session lock (RunExclusive against RunSession on one lock).
func checkXactExcludesSession(ctx context.Context, e *env) Check {
	s, c, done := e.twoSessions(ctx, "xact-session", sessionLocks)
	if done {
		return c
	}
	defer s.close()
	tx, pidA, err := s.xactLockFirst(ctx)
	if err != nil {
		return unanswered("pg_try_advisory_xact_lock on the first session", err)
	}
	defer tx.Rollback()
	bctx, cancel := context.WithTimeout(ctx, secondWait)
	defer cancel()
	gotB, pidB, err := s.tryLock(bctx, s.b)
	if err != nil {
		return oneServerConn(err)
	}
	if gotB {
		return Check{Status: Fail,
			Detail: fmt.Sprintf("a second session (backend %d) got the session lock %d while a transaction of the first (backend %d) held it; %s", pidB, s.key, pidA, meaning(append([]Use{UseExclusive}, sessionUses...)...)),
			Fix:    sessionFix}
	}
	return Check{Status: Pass,
		Detail: fmt.Sprintf("a second session (backend %d) could not take the session lock %d while a transaction of the first (backend %d) held it", pidB, s.key, pidA)}
}

// heldStatements is how many statements the held-through and same-backend
// checks send, each followed by a look from the other session.
const heldStatements = 5

// checkHeldThroughTransaction: a transaction lock taken by a
// transaction's first statement is held, as a second session sees it,
// between each of its later statements until COMMIT, and free after: the
// lock around fn in RunExclusive.
func checkHeldThroughTransaction(ctx context.Context, e *env) Check {
	s, c, done := e.twoSessions(ctx, "held-through", xactLocksOnly)
	if done {
		return c
	}
	defer s.close()
	tx, _, err := s.xactLockFirst(ctx)
	if err != nil {
		return unanswered("pg_try_advisory_xact_lock", err)
	}
	defer tx.Rollback()
	bctx, cancel := context.WithTimeout(ctx, secondWait)
	defer cancel()
	for i := range heldStatements {
		var pid int32
		if err := tx.QueryRowContext(ctx, `SELECT pg_catalog.pg_backend_pid()`).Scan(&pid); err != nil {
			return unanswered(fmt.Sprintf("statement %d of the transaction", i+2), err)
		}
		n, err := holds(bctx, s.b, s.key, false)
		if err != nil {
			return oneServerConn(err)
		}
		if n != 1 {
			return Check{Status: Fail,
				Detail: fmt.Sprintf("after statement %d of the transaction that took the transaction lock %d (backend %d), a second session saw it held %d times, not once: the lock does not last the transaction; %s", i+2, s.key, pid, n, meaning(UseExclusive)),
				Fix:    xactFix}
		}
	}
	if err := tx.Commit(); err != nil {
		return unanswered("COMMIT", err)
	}
	n, err := holds(ctx, s.b, s.key, false)
	if err != nil {
		return unanswered("pg_locks after COMMIT", err)
	}
	if n != 0 {
		return Check{Status: Fail,
			Detail: fmt.Sprintf("after COMMIT the transaction lock %d is still held %d times: it outlives its transaction; %s", s.key, n, meaning(UseExclusive)),
			Fix:    xactFix}
	}
	detail := fmt.Sprintf("a second session saw the transaction lock %d held after each of %d statements of the transaction that took it, and free after its COMMIT", s.key, heldStatements)
	pipelined, failed := pipelinedHeld(ctx, s.a, s.b, "")
	if failed {
		return Check{Status: Fail, Detail: detail + "; but " + pipelined + "; " + meaning(UseExclusive), Fix: xactFix}
	}
	return Check{Status: Pass, Detail: detail + "; " + pipelined}
}

// pipelineSleep is how long the pipelined statements keep their implicit
// transaction open.
const pipelineSleep = 200 * time.Millisecond

// pipelinedHeld sends a transaction lock and the statements after it as
// one pipeline (a pgx batch: one message with the simple protocol, one
// Sync with the extended one), so that they form one implicit
// transaction, while b looks at pg_locks. Every look the server made
// between the lock's grant and the last statement (by the server's own
// clock) must see it held. It says what it found, and whether that is a
// failure; with another driver than pgx's it says it did not try.
// between, when not "", is a statement sent after the lock's (its tests
// end the implicit transaction there, as a path that commits each
// statement would).
func pipelinedHeld(ctx context.Context, a, b *sql.Conn, between string) (string, bool) {
	key := conformanceKey("pipelined")
	type result struct {
		granted     bool
		from, until time.Time
		err         error
	}
	done := make(chan result, 1)
	isPgx := false
	go func() {
		var r result
		r.err = a.Raw(func(dc any) error {
			pc, ok := dc.(interface{ Conn() *pgx.Conn })
			if !ok {
				return nil
			}
			isPgx = true
			batch := &pgx.Batch{}
			batch.Queue(`SELECT pg_catalog.pg_try_advisory_xact_lock($1), pg_catalog.clock_timestamp()`, key)
			if between != "" {
				batch.Queue(between)
			}
			batch.Queue(`SELECT pg_catalog.pg_sleep($1)`, pipelineSleep.Seconds())
			batch.Queue(`SELECT pg_catalog.clock_timestamp()`)
			br := pc.Conn().SendBatch(ctx, batch)
			if err := br.QueryRow().Scan(&r.granted, &r.from); err != nil {
				_ = br.Close()
				return err
			}
			if between != "" {
				if _, err := br.Exec(); err != nil {
					_ = br.Close()
					return err
				}
			}
			if _, err := br.Exec(); err != nil {
				_ = br.Close()
				return err
			}
			if err := br.QueryRow().Scan(&r.until); err != nil {
				_ = br.Close()
				return err
			}
			return br.Close()
		})
		done <- r
	}()
	type look struct {
		n  int
		at time.Time
	}
	var looks []look
	var r result
	for polling := true; polling; {
		select {
		case r = <-done:
			polling = false
		default:
			var l look
			if err := b.QueryRowContext(ctx, `SELECT (`+holdsSQL+`), pg_catalog.clock_timestamp()`, key, false).Scan(&l.n, &l.at); err != nil {
				r = <-done
				return fmt.Sprintf("the pipelined transaction was not looked at (%v)", err), false
			}
			looks = append(looks, l)
			time.Sleep(5 * time.Millisecond)
		}
	}
	switch {
	case !isPgx && r.err == nil:
		return "a pipelined transaction was not tried (the driver is not pgx's)", false
	case r.err != nil:
		return fmt.Sprintf("the pipelined transaction could not run (%v)", r.err), false
	case !r.granted:
		return fmt.Sprintf("the pipelined transaction did not get the fresh key %d", key), false
	}
	// A margin at both ends: a look's clock_timestamp() and its read of
	// pg_locks are not the same instant.
	const margin = 5 * time.Millisecond
	inside, free := 0, 0
	for _, l := range looks {
		if l.at.After(r.from.Add(margin)) && l.at.Before(r.until.Add(-margin)) {
			inside++
			if l.n != 1 {
				free++
			}
		}
	}
	if free > 0 {
		return fmt.Sprintf("a transaction lock taken by the first of three pipelined statements (one implicit transaction) was seen free by %d of %d looks of a second session made while its later statements ran: the path does not keep a pipeline on one backend in one transaction", free, inside), true
	}
	return fmt.Sprintf("when the statements are pipelined (one implicit transaction), %d looks made while the later ones ran saw it held", inside), false
}

// checkSameBackend: a session lock, its later statements and its unlock
// land on the backend that took it, over statements sent back to back
// and interleaved with another session's.
func checkSameBackend(ctx context.Context, e *env) Check {
	s, c, done := e.twoSessions(ctx, "same-backend", sessionLocks)
	if done {
		return c
	}
	defer s.close()
	pidA, err := s.lockFirst(ctx)
	if err != nil {
		return unanswered("pg_try_advisory_lock", err)
	}
	// look asks c's session how often it holds the lock: want is 1 on the
	// session that took it, 0 on the other.
	look := func(step string, c *sql.Conn, want int) (Check, bool) {
		var pid int32
		var n int
		err := c.QueryRowContext(ctx, `SELECT pg_catalog.pg_backend_pid(), (`+holdsSQL+`)`, s.key, true).Scan(&pid, &n)
		if err != nil {
			return unanswered(step, err), true
		}
		if n != want {
			who := "the session that took it"
			if c == s.b {
				who = "another session"
			}
			return Check{Status: Fail,
				Detail: fmt.Sprintf("%s: %s, answered by backend %d, holds the session lock %d %d times, want %d (it was taken on backend %d): one client's statements run on more than one server session; %s",
					step, who, pid, s.key, n, want, pidA, meaning(sessionUses...)),
				Fix: sessionFix}, true
		}
		return Check{}, false
	}
	for i := range heldStatements {
		if c, failed := look(fmt.Sprintf("back to back, statement %d", i+1), s.a, 1); failed {
			return c
		}
	}
	for i := range heldStatements {
		if c, failed := look(fmt.Sprintf("interleaved, statement %d of the other session", i+1), s.b, 0); failed {
			return c
		}
		if c, failed := look(fmt.Sprintf("interleaved, statement %d", i+1), s.a, 1); failed {
			return c
		}
	}
	unlocked, err := s.unlock(ctx, s.a)
	if err != nil {
		return unanswered("pg_advisory_unlock", err)
	}
	if !unlocked {
		return Check{Status: Fail,
			Detail: fmt.Sprintf("the unlock of the session lock %d found nothing to release: it ran on another server session than the lock, which stays held; %s", s.key, meaning(sessionUses...)),
			Fix:    sessionFix}
	}
	return Check{Status: Pass,
		Detail: fmt.Sprintf("the session lock %d taken on backend %d was held there over %d statements back to back and %d interleaved with another session's, which never held it, and its unlock released it", s.key, pidA, heldStatements, heldStatements)}
}

// returnedWait bounds how long the returned-connection check waits for a
// closed client connection's session lock to be released.
const returnedWait = 2 * time.Second

// checkReturnedConnClean: a client connection that ends while its session
// holds a session lock (as lockgen closes a connection whose lock state
// it cannot vouch for) leaves no lock behind: the server, or the pooler's
// reset of the server connection, releases it.
func checkReturnedConnClean(ctx context.Context, e *env) Check {
	s, c, done := e.twoSessions(ctx, "returned", sessionLocks)
	if done {
		return c
	}
	defer s.close()
	pidA, err := s.lockFirst(ctx)
	if err != nil {
		return unanswered("pg_try_advisory_lock", err)
	}
	// Close the client connection itself, not only give it back to
	// database/sql's pool: the lock is now nobody's to unlock.
	_ = s.a.Raw(func(any) error { return driver.ErrBadConn })
	_ = s.a.Close()
	s.held = nil
	deadline := time.Now().Add(returnedWait)
	for {
		n, err := holds(ctx, s.b, s.key, false)
		if err != nil {
			return unanswered("pg_locks after the connection closed", err)
		}
		if n == 0 {
			return Check{Status: Pass,
				Detail: fmt.Sprintf("the session lock %d of a client connection (backend %d) that closed without unlocking was released", s.key, pidA)}
		}
		if time.Now().After(deadline) {
			unlockAnywhere(ctx, s.db, s.b, s.key)
			return Check{Status: Fail,
				Detail: fmt.Sprintf("%v after a client connection (backend %d) closed without unlocking, its session lock %d is still held: the path keeps the server session, lock included, for other clients; %s", returnedWait, pidA, s.key, meaning(sessionUses...)),
				Fix:    "reset server connections when a client leaves (PgBouncer: server_reset_query = DISCARD ALL, the default, in pool_mode=session); " + sessionFix}
		}
		select {
		case <-ctx.Done():
			return unanswered("pg_locks after the connection closed", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// unlockAnywhere leaves nothing behind of a session lock that a closed
// client connection's server session kept: it unlocks key through the
// path until an unlock lands on that server session (terminating it would
// leave the pooler a dead server connection to hand out), looking at
// pg_locks through look.
func unlockAnywhere(ctx context.Context, db *sql.DB, look *sql.Conn, key int64) {
	ctx = context.WithoutCancel(ctx)
	for range 20 {
		if n, err := holds(ctx, look, key, false); err != nil || n == 0 {
			return
		}
		_, _ = db.ExecContext(ctx, `SELECT pg_catalog.pg_advisory_unlock($1)`, key)
	}
}
