package status

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/lockgen/lockgen/pgadvisory"
)

// Queue is a lock's queue of waiting calls in lockgen's queue
// (pgadvisory's WithWait: RunExclusive, RunOnce, RunSession, Lead,
// Campaign; migration 00011): how many live waiters it has, and how many
// of them are shared. Such a waiter holds no connection, so pg_locks
// does not show it; a call on a set of locks is counted in the queue of
// each.
type Queue struct {
	Waiting, Shared int
}

// queueSQL reads the queues that have a live waiter (its row's expiry, on
// the database's clock, not passed), with the registry's name where the
// role may read it. Any role may read pgadvisory.waiter.
const queueSQL = `SELECT w.lock_id, r.name, r.params::text, r.declared_params::text,
       pg_catalog.count(*)::int, (pg_catalog.count(*) FILTER (WHERE w.shared))::int
FROM pgadvisory.waiter AS w
LEFT JOIN pgadvisory.registry AS r ON r.lock_id = w.lock_id
WHERE w.expires > pg_catalog.clock_timestamp()
GROUP BY w.lock_id, r.name, r.params::text, r.declared_params::text`

// queueNamelessSQL is queueSQL for a role that may not read the registry.
const queueNamelessSQL = `SELECT w.lock_id, NULL::text, NULL::text, NULL::text,
       pg_catalog.count(*)::int, (pg_catalog.count(*) FILTER (WHERE w.shared))::int
FROM pgadvisory.waiter AS w
WHERE w.expires > pg_catalog.clock_timestamp()
GROUP BY w.lock_id`

// addQueues adds one line per lock with live waiters in lockgen's queue
// (Mode "queued", not granted, no backend) with their count in Queue. A
// database whose schema predates the queue (no pgadvisory.waiter), or a
// role that may not read it, leaves locks as they are. prefix keeps the
// queues of locks whose names start with it.
func addQueues(ctx context.Context, db *sql.DB, locks []Lock, prefix string) ([]Lock, error) {
	rows, err := db.QueryContext(ctx, queueSQL)
	if pgadvisory.SQLState(err) == "42501" { // the registry is not readable: no names
		rows, err = db.QueryContext(ctx, queueNamelessSQL)
	}
	switch pgadvisory.SQLState(err) {
	case "42P01", "3F000", "42501": // before migration 00011, or not readable
		return locks, nil
	}
	if err != nil {
		return nil, fmt.Errorf("status: queues: %w", err)
	}
	defer rows.Close()
	added := false
	for rows.Next() {
		var (
			l                        Lock
			q                        Queue
			name, params, declParams sql.NullString
		)
		if err := rows.Scan(&l.LockID, &name, &params, &declParams, &q.Waiting, &q.Shared); err != nil {
			return nil, fmt.Errorf("status: queues: %w", err)
		}
		if prefix != "" && !strings.HasPrefix(name.String, prefix) {
			continue
		}
		l.Name, l.Mode, l.Queue = name.String, "queued", &q
		if l.Params, err = decodeParams(params.String, declParams.String); err != nil {
			return nil, fmt.Errorf("status: lock %d: %w", l.LockID, err)
		}
		locks = append(locks, l)
		added = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("status: queues: %w", err)
	}
	if added {
		Sort(locks)
	}
	return locks, nil
}

// queueText is a queue's STATE cell: "3 queued" or "3 queued (1 shared)".
func queueText(q *Queue) string {
	if q.Shared == 0 {
		return fmt.Sprintf("%d queued", q.Waiting)
	}
	return fmt.Sprintf("%d queued (%d shared)", q.Waiting, q.Shared)
}
