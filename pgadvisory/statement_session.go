package pgadvisory

import (
	"strconv"
)

// The statements of a session lock besides the lock statement (statement.go).
// Each takes the call's IDs as its first parameter (see callState.idsArg), so
// one statement serves a set of any size, and a connection that carries
// several lock sets can run them per set.

// unlockSQL releases a session lock set and returns how many of its locks
// this backend held (every unlock is evaluated, none short-circuits). The
// release is verified by comparing that count with the size of the set.
//
//	SELECT pg_advisory_unlock($1)::int
//	SELECT count(*) FROM unnest($1::text::bigint[]) AS lock(id) WHERE pg_advisory_unlock(lock.id)
func (c *callState) unlockSQL() (string, []any) {
	query, args := c.unlockOnlySQL()
	if c.queuedSession {
		// Taken through lockgen's queue: wake its head (session_queue.go).
		query = c.sessionUnlockWakeSQL(query)
		if c.locker != nil && c.locker.releaseSQL != nil {
			query = c.locker.releaseSQL(query)
		}
		return query, args
	}
	return query, args
}

// unlockOnlySQL is unlockSQL without the wake-up of a queued lock.
func (c *callState) unlockOnlySQL() (string, []any) {
	if c.lead && c.term != 0 {
		// An elected leader resigns as it unlocks: its leader row stops
		// naming this backend, which may carry other session locks on the
		// same key later (migrations/00009_lease.sql).
		return resignSQL, []any{c.ids[0], c.term}
	}
	fn := "pg_advisory_unlock"
	if c.shared {
		fn += "_shared"
	}
	if len(c.ids) == 1 {
		return "SELECT " + fn + "($1)::int", []any{c.ids[0]}
	}
	return "SELECT count(*)::int FROM unnest($1::text::bigint[]) AS lock(id) WHERE " + fn + "(lock.id)", []any{c.idsArg()}
}

// resignSQL releases a leader's lock and clears its leader row's pid, in
// one statement; it returns 1 if the lock was held, as unlockSQL's
// statements do.
const resignSQL = `SELECT pgadvisory.leader_resign($1::bigint, $2::bigint)`

// heldLocks selects the advisory keys (int8 form) that this backend holds,
// granted, in the current database.
const heldLocks = `SELECT (l.classid::bigint << 32) | l.objid::bigint FROM pg_catalog.pg_locks AS l
WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted AND l.pid = pg_backend_pid()
  AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())`

// heldOfSet selects the IDs of the set $1 that this backend holds. It
// counts each key over the backend's distinct held keys and the set (whose
// IDs are distinct): a key seen twice is both. A join of the two would
// do, but its plan depends on estimates: for a prepared statement's
// generic plan the planner guesses 10 elements for the array, may pick a
// nested loop, and with 70,000 locks that is 4.9 billion comparisons per
// check. Grouping is linear or n log n whatever the plan.
const heldOfSet = `SELECT u.id FROM (SELECT DISTINCT held.id FROM (` + heldLocks + `) AS held(id)
  UNION ALL SELECT unnest($1::text::bigint[])) AS u(id) GROUP BY u.id HAVING count(*) = 2`

// unlockHeldSQL releases those locks of the set that this backend holds:
// the cleanup after a set that was not granted whole (a try statement
// stops at the first lock held elsewhere, keeping the ones before it) on a
// connection of the call's own, or after a try statement that failed. It
// unlocks only what pg_locks shows held, so the locks never taken raise no
// "you don't own a lock" warning each. On a shared connection, where
// another call may hold some of the keys in shared mode, a set not granted
// whole releases exactly what its try took instead (countedTrySQL,
// unlockIDsSQL).
func (c *callState) unlockHeldSQL() (string, []any) {
	fn := "pg_advisory_unlock"
	if c.shared {
		fn += "_shared"
	}
	return "SELECT count(*) FILTER (WHERE " + fn + "(held.id))::int FROM (" + heldOfSet + " OFFSET 0) AS held(id)", []any{arrayLiteral(c.ids)}
}

// countedTrySQL is the try statement of a set on a shared connection: the
// lock statement's columns (granted, standby, pid; see lockSQL), guarded
// by the pid in $2, and a fourth, how many of the set's locks it kept
// before the first one held elsewhere (0 when granted or when the pid
// differs), so that the cleanup releases exactly those:
//
//	SELECT COALESCE(CASE WHEN pg_backend_pid() = $2 THEN tried.refused IS NULL END, false),
//	       pg_is_in_recovery(), pg_backend_pid(), COALESCE(tried.refused - 1, 0)
//	  FROM (SELECT CASE WHEN pg_backend_pid() = $2 THEN
//	          (SELECT lock.n FROM unnest($1::text::bigint[]) WITH ORDINALITY AS lock(id, n)
//	            WHERE NOT pg_try_advisory_lock(lock.id) LIMIT 1) END AS refused OFFSET 0) AS tried
//
// The scan yields the IDs in array order (ascending) and stops at the
// first lock not granted, as the NOT EXISTS of lockSQL does; refused is its
// position, NULL when every lock was granted. OFFSET 0 keeps the subquery
// from being merged into the select list, which would take the locks twice.
func countedTrySQL(shared bool) string {
	fn := "pg_try_advisory_lock"
	if shared {
		fn += "_shared"
	}
	return "SELECT COALESCE(CASE WHEN pg_backend_pid() = $2 THEN tried.refused IS NULL END, false), " +
		"pg_is_in_recovery(), pg_backend_pid(), COALESCE(tried.refused - 1, 0) " +
		"FROM (SELECT CASE WHEN pg_backend_pid() = $2 THEN " +
		"(SELECT lock.n FROM unnest($1::text::bigint[]) WITH ORDINALITY AS lock(id, n) " +
		"WHERE NOT " + fn + "(lock.id) LIMIT 1) END AS refused OFFSET 0) AS tried"
}

// unlockIDsSQL releases the locks ids (taken by one try statement) and
// returns how many of them this backend held.
func unlockIDsSQL(ids []int64, shared bool) (string, []any) {
	fn := "pg_advisory_unlock"
	if shared {
		fn += "_shared"
	}
	if len(ids) == 1 {
		return "SELECT " + fn + "($1)::int", []any{ids[0]}
	}
	return "SELECT count(*)::int FROM unnest($1::text::bigint[]) AS lock(id) WHERE " + fn + "(lock.id)", []any{arrayLiteral(ids)}
}

// heldSQL counts how many of the call's locks this backend holds: the
// watcher's check.
func (c *callState) heldSQL() (string, []any) {
	if len(c.ids) == 1 {
		return "SELECT count(*)::int FROM (" + heldLocks + ") AS held(id) WHERE held.id = $1", []any{c.ids[0]}
	}
	return "SELECT count(*)::int FROM (" + heldOfSet + ") AS held(id)", []any{c.idsArg()}
}

// sessionProbeSQL is the first statement on a session lock's connection,
// sent over the simple protocol (no prepared statement that a pooler could
// mix up): the backend pid and whether it is a standby. announced is the
// pid the connection announced at startup, or 0 when the driver does not
// expose it; lift asks to lift statement_timeout for the lock statement
// that follows (a waiting call, see liftStatementTimeoutSQL).
//
// The lift happens only when announced is the server's pid (a direct
// connection: a pooler announces a pid of its own) on a primary, because it
// changes the session: behind a transaction-mode pooler the change would
// stay on a server connection that other clients get next. The third
// column is the previous statement_timeout when lifted, else NULL.
func sessionProbeSQL(announced uint32, lift bool) string {
	if !lift || announced == 0 {
		return "SELECT pg_backend_pid(), pg_is_in_recovery(), NULL::text"
	}
	return "SELECT pg_backend_pid(), pg_is_in_recovery(), CASE WHEN lifted.done THEN lifted.previous END FROM " +
		"(SELECT current_setting('statement_timeout') AS previous, " +
		"pg_backend_pid() = " + strconv.FormatUint(uint64(announced), 10) + " AND NOT pg_is_in_recovery() " +
		"AND set_config('statement_timeout', '0', false) IS NOT NULL AS done) AS lifted"
}

// liftStatementTimeoutSQL sets statement_timeout to 0 for the session and
// returns the previous value, which the lock statement puts back once the
// locks are granted (lockShape.restoreStatementTimeout): the server arms a
// statement's timeout when the statement starts, so only a statement
// before the lock statement can give a wait longer than statement_timeout.
const liftStatementTimeoutSQL = "SELECT lifted.previous FROM (SELECT current_setting('statement_timeout') AS previous, " +
	"set_config('statement_timeout', '0', false)) AS lifted"

// sessionLockSQL is the lock statement of a session lock, guarded by pid
// (see lockSQL); previous, when not "", is the statement_timeout to put
// back after the grant.
func (c *callState) sessionLockSQL(pid int32, previous string, lifted bool) (string, []any) {
	query, args := c.lockSQL(true, lifted)
	args = append(args, pid)
	if lifted {
		args = append(args, previous)
	}
	return query, args
}
