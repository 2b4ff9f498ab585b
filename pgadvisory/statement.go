package pgadvisory

import (
	"strconv"
	"strings"
	"sync"
	"time"
)

// statementShape is what the text of a lock statement depends on.
type statementShape struct {
	n                                       int
	shared, wait, timeout, session, fencing bool
	granted                                 bool // set pgadvisory.granted (a run-once claim follows)
}

var statementCache sync.Map // statementShape -> string

// lockSQL returns the SQL text and arguments of the lock statement: the
// single SQL statement that takes every lock of a call. It returns (granted
// bool, standby bool) and a third column for session locks (the backend
// pid) and fenced calls (the fencing token, NULL unless granted). The
// statement of a run-once call also sets the transaction-local setting
// pgadvisory.granted to 'on' once every lock is granted, for the claim that
// follows it. Folding the hot-standby check (pg_is_in_recovery) and the wait
// timeout (set_config('lock_timeout', …, true)) into it keeps them free of
// extra round trips:
//
//	SELECT pg_try_advisory_xact_lock($1), pg_is_in_recovery()
//	SELECT pg_advisory_xact_lock_shared($1)::text = '' AND pg_advisory_xact_lock_shared($2)::text = ''
//	       AND set_config('lock_timeout', lock_timeout.previous, true) IS NOT NULL,
//	       pg_is_in_recovery()
//	  FROM (SELECT current_setting('lock_timeout') AS previous,
//	               set_config('lock_timeout', $3, true)) AS lock_timeout
//
// A session-lock statement takes its locks only on the backend whose pid the
// caller checked just before ($last = pg_backend_pid(), else the locks come
// back false): behind a transaction-pooling PgBouncer the statement may land
// on another server connection, where a session lock would outlive the
// client's session. The caller compares the returned pid and refuses.
//
// The FROM subquery is evaluated before the select list, so the timeout is in
// force when the first wait starts; once every lock is granted the previous
// value comes back, so the timeout does not apply to fn's statements.
// set_config's is_local=true scopes both to the transaction (or to the
// implicit one of a session-lock statement). IDs arrive sorted, so waiting
// callers take overlapping sets in the same order and cannot deadlock each
// other.
func (c *config) lockSQL(session bool) (string, []any) {
	shape := statementShape{n: len(c.ids), shared: c.shared, wait: c.wait, timeout: c.wait && c.timeout > 0, session: session,
		fencing: c.fencing && !session, granted: c.runOnce && !session}
	args := make([]any, 0, len(c.ids)+1)
	for _, id := range c.ids {
		args = append(args, id)
	}
	if shape.timeout {
		args = append(args, lockTimeoutSetting(c.timeout))
	}
	if s, ok := statementCache.Load(shape); ok {
		return s.(string), args
	}
	s := buildLockSQL(shape)
	statementCache.Store(shape, s)
	return s, args
}

// txLockStatement is the lock statement of a transaction-scoped call.
func (c *config) txLockStatement() lockStatement {
	query, args := c.lockSQL(false)
	return lockStatement{sql: query, args: args, fenced: c.fencing}
}

// buildLockSQL writes the lock statement of shape s.
func buildLockSQL(s statementShape) string {
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
	var b strings.Builder
	if s.fencing {
		// A fenced call also draws a token, only when the locks were granted
		// on a primary, and sets it for the transaction's own writes. The
		// inner query is an optimization fence (OFFSET 0): the lock functions
		// run once, before the token is drawn.
		b.WriteString("SELECT granted, standby, CASE WHEN granted AND NOT standby THEN " +
			"set_config('pgadvisory.fencing_token', nextval('pgadvisory.fencing_token_seq')::text, true)::bigint END FROM (")
	}
	b.WriteString("SELECT ")
	if s.session {
		pidParam := s.n + 1
		if s.timeout {
			pidParam++
		}
		b.WriteString("COALESCE(CASE WHEN pg_backend_pid() = $")
		b.WriteString(strconv.Itoa(pidParam))
		b.WriteString(" THEN (")
	}
	if s.granted {
		// A run-once claim follows in the same transaction, maybe in the
		// same round trip: it writes only when this statement granted every
		// lock. CASE, unlike AND, guarantees that the setting is made only
		// after the locks were granted.
		b.WriteString("CASE WHEN ")
	}
	for i := 1; i <= s.n; i++ {
		if i > 1 {
			b.WriteString(" AND ")
		}
		b.WriteString(fn)
		b.WriteString("($")
		b.WriteString(strconv.Itoa(i))
		b.WriteString(")")
		if s.wait {
			b.WriteString("::text = ''") // the waiting functions return void
		}
	}
	if s.timeout {
		// Once the locks are granted, put lock_timeout back to what it was,
		// so the timeout bounds the wait for the lock and not fn's statements.
		b.WriteString(" AND set_config('lock_timeout', lock_timeout.previous, true) IS NOT NULL")
	}
	if s.granted {
		b.WriteString(" THEN set_config('pgadvisory.granted', 'on', true) = 'on' ELSE false END")
	}
	if s.session {
		b.WriteString(") END, false)")
	}
	if s.fencing {
		b.WriteString(" AS granted, pg_is_in_recovery() AS standby")
	} else {
		b.WriteString(", pg_is_in_recovery()")
	}
	if s.session {
		b.WriteString(", pg_backend_pid()")
	}
	if s.timeout {
		b.WriteString(" FROM (SELECT current_setting('lock_timeout') AS previous, set_config('lock_timeout', $")
		b.WriteString(strconv.Itoa(s.n + 1))
		b.WriteString(", true)) AS lock_timeout")
	}
	if s.fencing {
		b.WriteString(" OFFSET 0) AS lock")
	}
	return b.String()
}

// lockTimeoutSetting renders d as a lock_timeout value in whole milliseconds,
// rounding up so that a positive timeout never becomes 0 (no limit).
func lockTimeoutSetting(d time.Duration) string {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return strconv.FormatInt(int64(ms), 10) + "ms"
}

// unlockSQL releases a session lock set; it returns how many of the
// locks were held (every unlock is evaluated, none short-circuits).
func (c *config) unlockSQL() (string, []any) {
	fn := "pg_advisory_unlock"
	if c.shared {
		fn += "_shared"
	}
	var b strings.Builder
	b.WriteString("SELECT ")
	args := make([]any, len(c.ids))
	for i, id := range c.ids {
		if i > 0 {
			b.WriteString(" + ")
		}
		args[i] = id
		b.WriteString(fn)
		b.WriteString("($")
		b.WriteString(strconv.Itoa(i + 1))
		b.WriteString(")::int")
	}
	return b.String(), args
}

// heldSQL counts how many of the call's keys this backend holds.
func (c *config) heldSQL() (string, []any) {
	var b strings.Builder
	b.WriteString(`SELECT count(DISTINCT (classid::bigint << 32) | objid::bigint) FROM pg_catalog.pg_locks
WHERE locktype = 'advisory' AND objsubid = 1 AND granted AND pid = pg_backend_pid()
  AND database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
  AND ((classid::bigint << 32) | objid::bigint) IN (`)
	args := make([]any, len(c.ids))
	for i, id := range c.ids {
		if i > 0 {
			b.WriteString(", ")
		}
		args[i] = id
		b.WriteString("$")
		b.WriteString(strconv.Itoa(i + 1))
	}
	b.WriteString(")")
	return b.String(), args
}
