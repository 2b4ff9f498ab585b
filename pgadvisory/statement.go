package pgadvisory

import (
	"strconv"
	"strings"
	"sync"
	"time"
)

// lockShape is what the text of a lock statement depends on.
type lockShape struct {
	// set: more than one ID. The IDs then travel as one parameter, a bigint
	// array in ascending order, so a statement has at most four parameters
	// however many locks it takes (the protocol allows 65,535) and its text
	// does not grow with the set.
	set                   bool
	shared, wait, session bool
	granted               bool // set pgadvisory.granted (a run-once claim follows)
	// restoreStatementTimeout: the statement lifts no statement_timeout
	// itself (a statement's timer is armed when it starts), but a statement
	// before it did, so it puts the caller's value back once every lock is
	// granted: for transaction locks from the transaction-local setting
	// pgadvisory.statement_timeout that the prelude saved (see
	// statementTimeoutPrelude), for session locks from a parameter.
	restoreStatementTimeout bool
	// counted: the try of a set on a shared connection (session, no
	// wait), which also returns how many of the set's locks it kept before
	// the one held elsewhere (see countedTrySQL).
	counted bool
}

var statementCache sync.Map // lockShape -> string

// The lock statement is the single SQL statement that takes every lock of
// a call. It returns (granted bool, standby bool), and a third column for
// session locks (the backend pid). (A fenced call's lock statement is the
// fenced acquisition: see fencing.go.) The statement of a run-once call also sets the
// transaction-local setting pgadvisory.granted to 'on' once every lock is
// granted, for the claim that follows it. Folding the hot-standby check (pg_is_in_recovery)
// and the wait timeout (set_config('lock_timeout', …, true)) into it keeps
// them free of extra round trips. One ID, without waiting, the transaction
// lock's fast path:
//
//	SELECT pg_try_advisory_xact_lock($1), pg_is_in_recovery()
//
// A set, waiting up to a timeout:
//
//	SELECT NOT EXISTS (SELECT FROM unnest($1::text::bigint[]) AS lock(id)
//	                   WHERE pg_advisory_xact_lock(lock.id)::text <> '')
//	       AND set_config('lock_timeout', lock_timeout.previous, true) IS NOT NULL,
//	       pg_is_in_recovery()
//	  FROM (SELECT current_setting('lock_timeout') AS previous,
//	               set_config('lock_timeout', $2, true)) AS lock_timeout
//
// unnest yields the IDs in array order, which is ascending, and the
// subquery's filter takes them one by one in that order: waiting callers
// take overlapping sets in the same order and cannot deadlock each other.
// Trying (pg_try_…), the EXISTS stops at the first lock that is not
// granted, as a chain of ANDs would; the caller then releases (session
// locks) or rolls back (transaction locks) what the statement took, so a
// set is taken whole or not at all.
//
// Every waiting statement sets lock_timeout: to the caller's timeout, or to
// 0 for [WithWait](0), so that a lock_timeout set for the database, the role
// or the session does not end a wait meant to last until ctx is done. The
// FROM subquery runs before the select list (it is not flattened, as it
// calls a volatile function), so the timeout is in force when the first
// wait starts; once every lock is granted the previous value comes back, so
// it does not apply to fn's statements. set_config's is_local=true scopes
// both to the transaction (or to the implicit one of a session-lock
// statement).
//
// A session-lock statement takes its locks only on the backend whose pid
// the caller checked just before ($pid = pg_backend_pid(), else the locks
// come back false and nothing is taken): behind a transaction-pooling
// PgBouncer the statement may land on another server connection, where a
// session lock would outlive the client's session. The caller compares the
// returned pid and refuses.
func (c *callState) lockSQL(session bool, restoreStatementTimeout bool) (string, []any) {
	shape := lockShape{set: len(c.ids) > 1, shared: c.shared, wait: c.wait, session: session,
		granted: c.runOnce && !session, restoreStatementTimeout: restoreStatementTimeout}
	args := make([]any, 0, 2)
	args = append(args, c.idsArg())
	if shape.wait {
		args = append(args, c.lockTimeoutArg())
	}
	if s, ok := statementCache.Load(shape); ok {
		return s.(string), args
	}
	s := buildLockSQL(shape)
	statementCache.Store(shape, s)
	return s, args
}

// idsArg is the first parameter of a call's statements: the ID itself, or
// for a set the IDs as the text of a bigint array ("{1,2,3}"; text, so
// that every database/sql driver can pass it), built once per call.
func (c *callState) idsArg() any {
	if len(c.ids) == 1 {
		return c.ids[0]
	}
	return c.idsList()
}

// idsList is the text of c's lock IDs as a PostgreSQL bigint array, also
// for a single lock (the queue's statements take an array).
func (c *callState) idsList() string {
	if c.idsText == "" {
		c.idsText = arrayLiteral(c.ids)
	}
	return c.idsText
}

// arrayLiteral renders ids as the text of a PostgreSQL bigint array.
func arrayLiteral(ids []int64) string {
	b := make([]byte, 0, 2+len(ids)*20)
	b = append(b, '{')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, id, 10)
	}
	return string(append(b, '}'))
}

// lockTimeoutArg is the lock_timeout of a waiting call's lock statement.
func (c *callState) lockTimeoutArg() string {
	if c.timeout == 0 {
		return "0" // until ctx is done, whatever the database or role sets
	}
	return lockTimeoutSetting(c.timeout)
}

// txLockStatement is the lock statement of a transaction-scoped call. With
// pipelined true (the driver sends statements before the lock statement in
// the same round trip), a waiting call lifts statement_timeout for the lock
// statement with a prelude: see statementTimeoutPrelude.
func (c *callState) txLockStatement(pipelined bool) lockStatement {
	if c.lim != nil {
		return c.lim.statement(c)
	}
	if c.queue != nil {
		return c.queue.statement(c)
	}
	lift := pipelined && c.wait
	var st lockStatement
	if c.fencing {
		st = c.fencedStatement()
	} else {
		query, args := c.lockSQL(false, lift)
		st = lockStatement{sql: query, args: args}
	}
	if lift {
		st.prelude = statementTimeoutPrelude
	}
	return st
}

// statementTimeoutPrelude runs before a waiting transaction-lock statement,
// in the same transaction and round trip (pgx). The server arms
// statement_timeout when a statement starts, so the lock statement cannot
// lift it for itself: this statement saves the caller's value in the
// transaction-local setting pgadvisory.statement_timeout and sets 0, the
// lock statement then waits as long as WithWait says (its lock_timeout) and
// puts the saved value back once the locks are granted, so fn's statements
// run under the caller's statement_timeout again.
const statementTimeoutPrelude = `SELECT set_config('statement_timeout', '0', true) FROM ` +
	`(SELECT set_config('pgadvisory.statement_timeout', current_setting('statement_timeout'), true)) AS saved`

// buildLockSQL writes the lock statement of shape s.
func buildLockSQL(s lockShape) string {
	if s.counted {
		return countedTrySQL(s.shared)
	}
	fn := "pg_"
	if !s.wait {
		fn += "try_"
	}
	fn += "advisory_"
	if !s.session {
		fn += "xact_"
	}
	fn += "lock"
	if s.shared {
		fn += "_shared"
	}
	param := 1
	next := func() string { param++; return "$" + strconv.Itoa(param) }
	var timeoutParam, pidParam, previousParam string
	if s.wait {
		timeoutParam = next()
	}
	if s.session {
		pidParam = next()
		if s.restoreStatementTimeout {
			previousParam = next()
		}
	}

	var b strings.Builder
	b.WriteString("SELECT ")
	if s.session {
		b.WriteString("COALESCE(CASE WHEN pg_backend_pid() = ")
		b.WriteString(pidParam)
		b.WriteString(" THEN (")
	}
	if s.granted {
		// A run-once claim follows in the same transaction, maybe in the
		// same round trip: it writes only when this statement granted every
		// lock. CASE, unlike AND, guarantees that the setting is made only
		// after the locks were granted.
		b.WriteString("CASE WHEN ")
	}
	switch {
	case !s.set && s.wait:
		b.WriteString(fn + "($1)::text = ''") // the waiting functions return void
	case !s.set:
		b.WriteString(fn + "($1)")
	case s.wait:
		b.WriteString("NOT EXISTS (SELECT FROM unnest($1::text::bigint[]) AS lock(id) WHERE " + fn + "(lock.id)::text <> '')")
	default:
		b.WriteString("NOT EXISTS (SELECT FROM unnest($1::text::bigint[]) AS lock(id) WHERE NOT " + fn + "(lock.id))")
	}
	if s.wait {
		// Once the locks are granted, put lock_timeout back to what it was,
		// so the timeout bounds the wait for the lock and not fn's statements.
		b.WriteString(" AND set_config('lock_timeout', lock_timeout.previous, true) IS NOT NULL")
	}
	if s.restoreStatementTimeout {
		if s.session {
			b.WriteString(" AND set_config('statement_timeout', " + previousParam + ", false) IS NOT NULL")
		} else {
			b.WriteString(" AND set_config('statement_timeout', current_setting('pgadvisory.statement_timeout'), true) IS NOT NULL")
		}
	}
	if s.granted {
		b.WriteString(" THEN set_config('pgadvisory.granted', 'on', true) = 'on' ELSE false END")
	}
	if s.session {
		b.WriteString(") END, false)")
	}
	b.WriteString(", pg_is_in_recovery()")
	if s.session {
		b.WriteString(", pg_backend_pid()")
	}
	if s.wait {
		b.WriteString(" FROM (SELECT current_setting('lock_timeout') AS previous, set_config('lock_timeout', ")
		b.WriteString(timeoutParam)
		b.WriteString(", true)) AS lock_timeout")
	}
	return b.String()
}

// lockTimeoutSetting renders d as a lock_timeout value in whole milliseconds,
// rounding up so that a positive timeout never becomes 0 (no limit).
func lockTimeoutSetting(d time.Duration) string {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return strconv.FormatInt(int64(ms), 10) + "ms"
}
