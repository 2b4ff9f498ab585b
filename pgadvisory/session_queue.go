package pgadvisory

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Session-lock waiters in lockgen's queue (migrations/00011_waiting.sql).
//
// A waiting session lock taken on the shared connections (RunSession with
// WithWait, exclusive or shared, on one lock or a set; Lead, Campaign)
// does not wait in
// the server's lock queue on a connection of its own: it waits the way a
// waiting transaction lock does (wait_queue.go), as a row of
// pgadvisory.waiter, holding no connection, and takes its lock on a
// shared connection when it is the head of the queue. So its lock, and a
// leadership's, lives on the shared connections, and a pool smaller than
// the waiters does not keep anyone waiting for a connection.
//
// Each try is one statement on a shared connection (sessionQueueTry):
// wait_try, which takes the locks as transaction locks for the head of
// their queues (or for a first try when nobody is queued), all or none,
// and otherwise joins or refreshes the call's rows, and then, only when
// wait_try granted them, pg_try_advisory_lock (or _shared) of the same
// keys on the same backend, which cannot fail: a backend re-entering a
// lock it holds in the same mode is granted it at once. The statement's
// transaction, ending at once, gives up the transaction locks and keeps
// the session locks. A first try is thus one statement, as a try that
// does not wait. A leadership's try also elects once granted
// (sessionQueueLeadSQL), in the same statement and commit.
//
// A key that another call of this Locker holds or is taking in a mode
// that conflicts (the key table) is not tried on a shared connection,
// which may be the backend holding it (advisory locks are re-entrant per
// backend): the call's rows are joined or refreshed instead on a pool
// connection, in a transaction rolled back if wait_try found the locks
// free there (queueRefresh).
//
// The release of locks taken so NOTIFYs the head of each lock's queue in
// its unlock statement (sessionUnlockWakeSQL; after a shared hold, the
// first exclusive waiter, as wait_wake does), and wakes the Locker's own
// waiters for the keys. A shared call, once granted, wakes its Locker's
// other waiters for its keys, so that the shared ones behind it share
// the lock (a NOTIFY that names another process's waiter wakes every
// waiter of the lock in this one). Waiters that are not woken try every heartbeat of
// the Locker's check interval, the head too, since a session lock is
// usually held long (a leadership): a holder that died is noticed within
// one heartbeat of the server's releasing its locks, or later when the
// Locker's poll slots (poll_gate.go) stretch the heartbeats of many
// waiters.

// sessionQueued reports whether c, a session lock, waits in lockgen's
// queue: a waiting call (not a limited one), on a Locker whose database
// has the queue. On a Locker with shared session connections it takes its
// lock on one of them (queuedAcquire); on one without, on a connection of
// its own (queuedLockSession, session_queue_dedicated.go).
func (c *callState) sessionQueued() bool {
	return c.wait && c.session && c.lim == nil && c.locker != nil && !c.locker.noQueue.Load() && !c.serverQueue
}

// readOnlyByDefault reports whether err, the error of a queued session
// lock's try that had no place yet, says that its session's transactions
// are read-only by default (default_transaction_read_only): the queue
// cannot be written, and lockgen does not override the setting, so the
// call waits in the server's queue, as it did before the queue existed
// (the transaction locks' queue does the same, in wait_queue.go). The
// error was raised in wait_try, before any lock was taken.
func readOnlyByDefault(q *queueState, err error) bool {
	return !q.seq.Valid && SQLState(err) == "25006"
}

// sessionQueueTry is a queued session lock's try statement on its
// connection, for a set (several IDs) or one lock, shared or exclusive:
// the try statement's columns (granted, standby, pid, guarded by the pid
// in $4; see lockSQL) and wait_try's place and head. $1 is the lock's ID,
// or for a set the IDs' array text (callState.idsList). CASE, not AND,
// makes the session locks be taken only after wait_try granted; bool_and
// takes every one of a set's (an aggregate reads all its rows). wait_try
// sends no NOTIFY for the next waiter (p_wake false): the statement's
// transaction commits at once, while the session locks stay held until
// sessionUnlockWakeSQL notifies the next waiters.
func sessionQueueTry(set, shared bool) string {
	take, ids := "pg_catalog.pg_try_advisory_lock", "ARRAY[$1::pg_catalog.int8]"
	if shared {
		take += "_shared"
	}
	if set {
		ids = "$1::pg_catalog.text::pg_catalog.int8[]"
		take = "(SELECT pg_catalog.bool_and(" + take + "(u.id)) FROM pg_catalog.unnest(" + ids + ") AS u(id))"
	} else {
		take += "($1::pg_catalog.int8)"
	}
	return `SELECT COALESCE(CASE WHEN pg_catalog.pg_backend_pid() OPERATOR(pg_catalog.=) $4::pg_catalog.int4 THEN ` +
		`CASE WHEN g.granted THEN ` + take + ` ELSE false END END, false), ` +
		`pg_catalog.pg_is_in_recovery(), pg_catalog.pg_backend_pid(), g.seq, g.head ` +
		`FROM pgadvisory.wait_try(` + ids + `, $2::pg_catalog.int8, $3::pg_catalog.int8, 0, false, ` + strconv.FormatBool(shared) + `) AS g`
}

// sessionQueueTries are sessionQueueTry's statements, by [set][shared].
var sessionQueueTries = [2][2]string{
	{sessionQueueTry(false, false), sessionQueueTry(false, true)},
	{sessionQueueTry(true, false), sessionQueueTry(true, true)},
}

// sessionQueueTrySQL is c's queued try statement and its first argument.
func (c *callState) sessionQueueTrySQL() (string, any) {
	if len(c.ids) == 1 {
		return sessionQueueTries[0][b2i(c.shared)], c.ids[0]
	}
	return sessionQueueTries[1][b2i(c.shared)], c.idsList()
}

// b2i is 1 for true.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// sessionQueueLeadSQL is a queued leadership's try: sessionQueueTry's,
// and once it granted, the election (electSQL's leader_elect) in the same
// statement, whose durable commit is then the try's. $5 is the holder and
// $6 the lock_timeout of the election's wait for writers of the previous
// term, one turn of the shared connection (electTurn): a try does not hold
// the connection's turn for that wait. term is NULL when the try was not
// granted. An error raised in leader_elect comes after the grant: the
// session lock is held (a session lock outlives the statement's
// transaction), while the rest of the try (wait_try's grant, the removal
// of the call's queue row) is rolled back; see electedInTry.
var sessionQueueLeadSQL = `SELECT t.ok, t.standby, t.pid, t.seq, t.head, ` +
	`(SELECT e.term FROM pgadvisory.leader_elect($1::pg_catalog.int8, $5::pg_catalog.text, $6::pg_catalog.text) AS e WHERE t.ok) ` +
	`FROM (` + sessionQueueTries[0][0] + ` OFFSET 0) AS t(ok, standby, pid, seq, head)`

// sessionWake is the wake-up that a queued session lock's release sends:
// a NOTIFY naming the head of the queue of lock $1 (for a set, of each
// lock of the array text $1), if any; after a shared hold, the first
// exclusive waiter, as wait_wake names it (shared ones may take the lock
// already).
func sessionWake(set, shared bool) string {
	mode := ""
	if shared {
		mode = "AND NOT w.shared "
	}
	notify := `SELECT pg_catalog.count(pg_catalog.pg_notify('` + waitChannel + `', ` +
		`h.lock_id::pg_catalog.text OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) h.seq::pg_catalog.text)) `
	live := `AND w.expires OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() ` + mode
	if !set {
		return notify + `FROM (SELECT w.lock_id, w.seq FROM pgadvisory.waiter AS w ` +
			`WHERE w.lock_id OPERATOR(pg_catalog.=) $1::pg_catalog.int8 ` + live + `ORDER BY w.seq LIMIT 1) AS h`
	}
	return notify + `FROM (SELECT DISTINCT ON (w.lock_id) w.lock_id, w.seq FROM pgadvisory.waiter AS w ` +
		`WHERE w.lock_id OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.text::pg_catalog.int8[]) ` + live +
		`ORDER BY w.lock_id, w.seq) AS h`
}

// sessionWakes are sessionWake's statements, by [set][shared].
var sessionWakes = [2][2]string{
	{sessionWake(false, false), sessionWake(false, true)},
	{sessionWake(true, false), sessionWake(true, true)},
}

// sessionUnlockWakeSQL is unlock, c's unlock statement (its first
// parameter is the lock's ID, or a set's array text), that also wakes the
// head of each lock's queue (delivered when the statement's transaction
// commits, after the unlock).
func (c *callState) sessionUnlockWakeSQL(unlock string) string {
	return "SELECT u.n FROM (" + unlock + " OFFSET 0) AS u(n), (" + sessionWakes[b2i(len(c.ids) > 1)][b2i(c.shared)] + ") AS woke"
}

// queuedSessionListener is the listening connection of the queued
// session waiters of a Locker on pool (*pgxpool.Pool, *sql.DB); nil:
// they poll.
func queuedSessionListener(pool any) func(context.Context) (notifyConn, error) {
	switch p := pool.(type) {
	case *pgxpool.Pool:
		return pgxListener(p)
	case *sql.DB:
		return stdlibListener(p)
	}
	return nil
}

// sessionQueueWait is the part of a queued session lock's wait between
// its tries, whatever connection it tries on: the call's place (q), and
// its sleeps without a connection. A session lock is usually held long: a
// waiter tries every heartbeat, and after a wake-up (which may come a
// moment before the lock is free) from 1ms doubling back to the
// heartbeat.
type sessionQueueWait struct {
	c         *callState
	q         *queueState
	sub       *waitSub
	heartbeat time.Duration
	next      time.Duration
}

// newSessionQueueWait starts c's wait at start (WithWait's timeout counts
// from there); close ends it.
func (c *callState) newSessionQueueWait(start time.Time) *sessionQueueWait {
	q := &queueState{ttlMS: max(1, waitTTL(c.locker.interval).Milliseconds())}
	if c.timeout > 0 {
		q.deadline = start.Add(c.timeout)
	}
	hb := waitHeartbeat(c.locker.interval)
	return &sessionQueueWait{c: c, q: q, heartbeat: hb, next: hb}
}

// pause sleeps until the call's next try: woken, at its poll, or with the
// error that ends the wait (ctx, WithWait's timeout), after which the
// caller leaves the queue.
func (w *sessionQueueWait) pause(ctx context.Context) error {
	c := w.c
	if w.sub == nil {
		w.sub = c.locker.waits.subscribe(c.ids, c.shared, c.listen)
		c.locker.polls.enter()
	}
	w.sub.seq.Store(w.q.seq.Int64)
	sleep := w.next/2 + rand.N(w.next/2+1)
	w.next = min(2*w.next, w.heartbeat)
	woken, err := w.q.pause(ctx, c, w.sub, sleep)
	if err != nil {
		return err
	}
	if woken {
		w.next = time.Millisecond
	}
	return nil
}

// serializationFailure reports whether err, a queued session lock's try's
// error, is a serialization failure (40001): on a session whose
// transactions are serializable by default, the queue's statements of
// concurrent waiters conflict. The try took nothing (its locks, if the
// commit failed, were released with the failure's cleanup) and its place
// is as it was: it is tried again (retry).
func serializationFailure(err error) bool { return SQLState(err) == "40001" }

// releaseConflicted ends the release of c, a session lock taken through
// the queue, whose unlock statement (the unlock and the wake-up, which
// reads the queue) failed with a serialization failure: run runs a
// statement on the lock's connection. The unlock takes effect when it
// runs, whatever becomes of the statement's transaction, and the failure
// came from the wake-up's read or the commit, so the backend holds either
// all of c's locks (the wake-up ran first) or none: the former are
// unlocked again, without the wake-up. The wake-up is then sent on its own,
// once, as a courtesy: waiters that miss it poll. It returns how many of
// c's locks the release found held, as the unlock statement would have.
// Not for a leadership (its unlock also resigns, a write) nor for a shared
// lock that another call on the connection may hold too.
func (c *callState) releaseConflicted(run func(query string, args []any, dest ...any) error) (int64, error) {
	query, args := c.heldSQL()
	var held int64
	if err := run(query, args, &held); err != nil {
		return 0, err
	}
	released := int64(len(c.ids)) - held // what the failed statement released
	if held == int64(len(c.ids)) {
		query, args = c.unlockOnlySQL()
		if err := run(query, args, &released); err != nil {
			return 0, err
		}
	}
	var woke int64
	_ = run(sessionWakes[b2i(len(c.ids) > 1)][b2i(c.shared)], []any{c.idsArg()}, &woke)
	return released, nil
}

// retry sleeps 1 to 5ms before the next try after a serialization
// failure, unless ctx or WithWait's timeout ends the wait first.
func (w *sessionQueueWait) retry(ctx context.Context) error {
	t := time.NewTimer(time.Millisecond + rand.N(4*time.Millisecond))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return w.c.failure(ctx, OpLock, ctx.Err())
	}
	if !w.q.deadline.IsZero() && !time.Now().Before(w.q.deadline) {
		return w.q.timedOut(ctx, w.c)
	}
	return nil
}

// close stops the call's wake-ups.
func (w *sessionQueueWait) close() {
	if w.sub != nil {
		w.c.locker.waits.unsubscribe(w.sub)
		w.c.locker.polls.exit()
	}
}

// queuedAcquire takes l's lock through lockgen's queue: tries on a shared
// connection, sleeping in between without a connection, until granted,
// WithWait's timeout or ctx. A wait that ends without the lock leaves the
// queue.
func (p *sessionPool) queuedAcquire(ctx context.Context, l *muxLock, start time.Time) (*sharedConn, error) {
	c := l.c
	w := c.newSessionQueueWait(start)
	defer w.close()
	for {
		sc, granted, abandoned, err := p.queueTry(ctx, l, w.q)
		if abandoned {
			return nil, err // the background gives back the lock and the place
		}
		if err != nil {
			if !w.q.seq.Valid && noQueueSchema(err) {
				// No queue in this database: wait in the server's.
				c.locker.noQueue.Store(true)
				return p.acquire(ctx, l, start)
			}
			if readOnlyByDefault(w.q, err) {
				c.serverQueue = true
				return p.acquire(ctx, l, start)
			}
			if serializationFailure(err) {
				if err = w.retry(ctx); err == nil {
					continue
				}
			}
			c.leaveQueueOn(ctx, l.open, w.q)
			return nil, err
		}
		if granted {
			c.queuedSession = true
			c.grantedQueued()
			return sc, nil
		}
		if err := w.pause(ctx); err != nil {
			c.leaveQueueOn(ctx, l.open, w.q)
			return nil, err
		}
	}
}

// queueTry is one try of a queued session lock: on a shared connection
// when the key table shows the key free in this process (reserved there
// for the try, kept if granted), else a refresh of the call's place on a
// pool connection. abandoned: ctx ended while the try's statement ran; it
// ends in the background, which gives back what it granted and the call's
// place.
func (p *sessionPool) queueTry(ctx context.Context, l *muxLock, q *queueState) (sc *sharedConn, granted, abandoned bool, err error) {
	c := l.c
	sc, free, unreserve, err := p.claim(ctx, l)
	if err != nil {
		return nil, false, false, err
	}
	if !free {
		return nil, false, false, p.queueRefresh(ctx, l, q)
	}
	var ok, standby bool
	var pid int32
	var seq sql.NullInt64
	var head sql.NullBool
	var term sql.NullInt64
	var prev any
	if q.seq.Valid {
		prev = q.seq.Int64
	}
	query, first := c.sessionQueueTrySQL()
	args := []any{first, prev, q.rowTTL(&c.locker.polls), sc.pid}
	dest := []any{&ok, &standby, &pid, &seq, &head}
	if c.lead {
		query = sessionQueueLeadSQL
		args = append(args, c.holder, lockTimeoutSetting(electTurn))
		dest = append(dest, &term)
	}
	// When the call is abandoned the callback runs after queueTry has
	// returned, and that return set sc, a named result, to nil.
	conn := sc
	abandoned, err = sc.call(ctx, l, c.checkTimeout, func(err error) {
		held := err == nil && ok && pid == conn.pid
		if held || electedInTry(err) {
			if held && term.Valid {
				c.term = term.Int64 // its release resigns
			}
			conn.p.mu.Lock()
			conn.locks[l] = struct{}{}
			conn.p.mu.Unlock()
			c.queuedSession = true
			_ = conn.p.unlockLocked(bgCtx, conn, l)
		}
		if left := seq; !held && (err == nil && left.Valid || err != nil && q.seq.Valid) {
			if err != nil {
				left = q.seq // the statement's removal of the row was rolled back
			}
			var gone bool
			_ = conn.run(bgCtx, c.checkTimeout, waitLeaveSQL, []any{c.idsList(), left.Int64}, &gone)
		}
		conn.releaseSem()
		unreserve()
		conn.leave()
	}, query, args, dest...)
	if abandoned {
		op := OpLock
		if c.lead {
			op = OpElect // a leadership's try statement elects too
		}
		return nil, false, true, c.failure(ctx, op, err)
	}
	switch {
	case electedInTry(err):
		// Held, not elected. The call's place, whose removal was rolled
		// back, is left on sc in the turn: a pool connection may be
		// scarce while sc is held.
		sc.hold(l)
		if q.seq.Valid {
			var left bool
			if sc.run(ctx, c.checkTimeout, waitLeaveSQL, []any{c.idsList(), q.seq.Int64}, &left) == nil {
				q.seq.Valid = false
			} // else the place expires
		}
		sc.releaseSem()
		if SQLState(err) == "55P03" && ctx.Err() == nil {
			// Writers of the previous term outlasted the turn: onLocked
			// elects in turns of the connection.
			return sc, true, false, nil
		}
		c.queuedSession = true
		_, _ = p.release(ctx, sc, l)
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, false, false, c.failure(ctx, "elect", err)
	case err != nil:
		if pooled := pooledStatementError(err); pooled != nil {
			sc.fail(pooled)
			err = c.refusal(ctx, "lock", ErrTransactionPooler, pooled)
		} else {
			if !sc.isDead() && !raisedInQueue(err) {
				sc.unlockHeld(ctx, l)
			}
			err = c.failure(ctx, "lock", err)
		}
	case pid != sc.pid || standby:
		// wait_try took nothing on a standby, and the pid guard kept
		// pg_try_advisory_lock from running on another backend.
		err = sc.answeredBy(pid, standby)(ctx, c)
	case ok:
		if term.Valid {
			c.term = term.Int64
		}
		sc.hold(l)
		sc.releaseSem()
		if ctx.Err() != nil {
			// Granted, but the caller gave up meanwhile.
			c.queuedSession = true
			_, _ = p.release(ctx, sc, l)
			return nil, false, false, c.failure(ctx, "lock", ctx.Err())
		}
		return sc, true, false, nil
	default:
		q.seq, q.head = seq, head
	}
	sc.releaseSem()
	unreserve()
	sc.leave()
	return nil, false, false, err
}

// raisedInQueue reports whether err, a queued session lock's try
// statement's error, was raised in wait_try: the statement took no
// session lock (it takes them only once wait_try returned).
func raisedInQueue(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && strings.Contains(pgErr.Where, "pgadvisory.wait_try(")
}

// electedInTry reports whether err, a leadership's try statement's error
// (sessionQueueLeadSQL), was raised by its election: the try had granted
// the lock, which the session keeps, and the election's transaction,
// with the grant's queue changes, was rolled back. Typically 55P03, the
// writers of the previous term outlasting one turn.
func electedInTry(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && strings.Contains(pgErr.Where, "pgadvisory.leader_elect(")
}

// queueRefresh joins or refreshes the call's place in the queue on a pool
// connection, without taking the lock: another call of this Locker holds
// or takes the key, maybe on the shared connection that would be tried. A
// transaction in which wait_try found the lock free (that call's release
// or try is under way) is rolled back: the place is kept as it was. The
// transaction is lockgen's own bookkeeping and runs at READ COMMITTED
// whatever the session's default: on sessions serializable by default
// the refreshes of concurrent waiters, which read the queue and write
// their places, failed one another with 40001 about ten times per grant
// (TestSessionWaitSerializableDefault took 60-100s instead of 5s).
func (p *sessionPool) queueRefresh(ctx context.Context, l *muxLock, q *queueState) error {
	c := l.c
	conn, err := l.open(ctx)
	if err != nil {
		return c.failure(ctx, "begin", poolWaitError(ctx, err))
	}
	var prev any
	if q.seq.Valid {
		prev = q.seq.Int64
	}
	var granted, standby bool
	var seq sql.NullInt64
	var head sql.NullBool
	if err := conn.simpleExec(ctx, "BEGIN ISOLATION LEVEL READ COMMITTED"); err != nil {
		conn.discard()
		return c.failure(ctx, "lock", err)
	}
	if err := conn.queryRow(ctx, waitTrySQL, []any{c.idsList(), prev, q.rowTTL(&c.locker.polls), int64(0), c.shared}, &granted, &standby, &seq, &head, new(sql.NullInt64)); err != nil {
		if serverAnswered(err, ctx) && conn.simpleExec(ctx, "ROLLBACK") == nil {
			// The server refused the statement (a serialization failure
			// among them, which the caller tries again): the connection
			// is sound and goes back to the pool, not closed, so that
			// such retries do not open a connection each.
			conn.release()
		} else {
			conn.discard() // the server rolls the transaction back
		}
		return c.failure(ctx, "lock", err)
	}
	end := "COMMIT"
	if granted {
		end = "ROLLBACK"
	}
	if err := conn.simpleExec(ctx, end); err != nil {
		conn.discard()
		return c.failure(ctx, "lock", err)
	}
	conn.release()
	if standby {
		return c.refusal(ctx, "lock", ErrStandby, nil)
	}
	if !granted {
		q.seq, q.head = seq, head
	}
	return nil
}

// leaveQueueOn removes the call's place from the queue, if it has one, on
// a pool connection from acquire (a shared connection's opener, or a
// dedicated one's), even when ctx is done (within the check
// timeout); a failure leaves the place to expire.
func (c *callState) leaveQueueOn(ctx context.Context, acquire func(context.Context) (sessionConn, error), q *queueState) {
	if !q.seq.Valid {
		return
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.checkTimeout)
	defer cancel()
	conn, err := acquire(lctx)
	if err != nil {
		return
	}
	var left bool
	if err := conn.queryRow(lctx, waitLeaveSQL, []any{c.idsList(), q.seq.Int64}, &left); err != nil {
		conn.discard()
		return
	}
	conn.release()
	q.seq.Valid = false
}

// wakeQueued wakes the Locker's own waiters for c's keys once c, a
// session lock, has released them: those of this process try at once,
// without waiting for the NOTIFY's round trip through the server, and
// also after a lock that did not come through the queue, whose release
// notifies nobody (the waiters of other processes notice it at their
// next poll).
func (c *callState) wakeQueued() {
	if c.locker != nil {
		c.locker.waits.wakeAll(c.ids)
	}
}

// grantedQueued is what a queued session lock does once granted: a shared
// one wakes the Locker's other shared waiters for its keys, since they may
// take the lock too (the NOTIFY of the release that let it in named it
// alone).
func (c *callState) grantedQueued() {
	if c.shared {
		c.locker.waits.wakeShared(c.ids)
	}
}
