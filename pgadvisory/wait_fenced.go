package pgadvisory

import (
	"strconv"
	"strings"
)

// A fenced call with WithWait on one lock waits in lockgen's queue too
// (wait_queue.go), with pgadvisory.fence_wait_try as its lock statement in
// place of fence_acquire (migrations/00011_waiting.sql). The message is the
// fenced acquisition's (fencing.go) with two changes:
//
//	SELECT granted, standby, token, seq, head FROM pgadvisory.fence_wait_try(id, seq, ttl_ms, block_ms, publish_timeout);
//	COMMIT AND CHAIN;
//	SELECT <the hand-over, and the call's queue row removed when it granted>;
//
// A try that is not granted commits its place in the queue with COMMIT AND
// CHAIN: the transaction that follows holds nothing and is rolled back
// without making the caller wait. A granted try's place stays in the queue
// until fn's transaction, which removes it (pgadvisory.wait_leave, in the
// hand-over's statement): its NOTIFY is delivered when that transaction
// ends, that is when the lock is released, and a rollback undoes the
// removal (the caller then leaves the queue as any failed call does).
const (
	fencedWaitTrySQL = "SELECT g.granted, g.standby, g.token, g.seq, g.head " +
		"FROM pgadvisory.fence_wait_try($1::text::bigint[], $2::bigint, $3::bigint, $4::bigint, $5, $6::bigint) AS g"
	// fencedLeaveSQL leaves the queue for a fenced call: its row by its
	// place, and any row it joined with a try whose answer it did not read
	// (its place unknown), by the call's own number (see queueState.caller).
	fencedLeaveSQL = "SELECT count(pgadvisory.wait_leave($1::text::bigint[], p.seq)) FROM (SELECT DISTINCT w.seq FROM pgadvisory.waiter AS w " +
		"WHERE w.lock_id = ANY ($1::text::bigint[]) AND (w.seq = $2::bigint OR w.caller = $3::bigint)) AS p"
	// fencedQueueHandover is the hand-over of a queued fenced call: the
	// token, and, when the hand-over granted (CASE, unlike AND, fixes the
	// order) and the call had a place, the place of the next live waiter,
	// which wait_leave's NOTIFY names (the subquery reads the statement's
	// snapshot, which still has the call's own row: it is left out by its
	// seq).
	fencedQueueHandover = "SELECT h.token, CASE WHEN h.token IS NULL THEN NULL WHEN pgadvisory.wait_leave($1::text::bigint[], $2::bigint) " +
		"THEN (SELECT w.seq FROM pgadvisory.waiter AS w WHERE w.lock_id = ($1::text::bigint[])[1] AND w.seq <> $2::bigint " +
		"AND w.expires > clock_timestamp() ORDER BY w.seq LIMIT 1) END " +
		"FROM (SELECT pgadvisory.fence_handover() AS token) AS h"
)

// fencedStatement is a queued fenced call's lock statement: fence_wait_try
// with the call's place, and its hand-over, which also receives the next
// waiter's place (q.next).
func (q *queueState) fencedStatement(c *callState, seq any, ttlMS, blockMS int64) lockStatement {
	return lockStatement{
		sql:           fencedWaitTrySQL,
		args:          []any{c.idsList(), seq, ttlMS, blockMS, lockTimeoutSetting(defaultPublishTimeout), q.caller},
		fenced:        true,
		extra:         []any{&q.seq, &q.head},
		handover:      fencedQueueHandover,
		handoverArgs:  []any{c.idsList(), seq},
		handoverExtra: []any{&q.next},
	}
}

// fencedQueueMessage is fencedMessage for a queued fenced call (st from
// queueState.fencedStatement): every argument is an integer, NULL or this
// package's own "NNNms". The hand-over's columns are not read (database/sql
// returns the first result only): the caller does not learn the next
// waiter's place, and wakes every waiter of the lock in its process.
func fencedQueueMessage(st lockStatement) string {
	id := "'" + st.args[0].(string) + "'"
	seq := "NULL"
	if s, ok := st.args[1].(int64); ok {
		seq = strconv.FormatInt(s, 10)
	}
	handover := strings.NewReplacer("$1", id, "$2", seq).Replace(fencedQueueHandover)
	return "SELECT g.granted, g.standby, g.token, g.seq, g.head FROM pgadvisory.fence_wait_try(" + id + ", " + seq + ", " +
		strconv.FormatInt(st.args[2].(int64), 10) + ", " + strconv.FormatInt(st.args[3].(int64), 10) + ", '" +
		st.args[4].(string) + "', " + strconv.FormatInt(st.args[5].(int64), 10) + ") AS g;\n" + fencedChainSQL + ";\n" + handover
}
