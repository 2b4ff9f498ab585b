package pgadvisory

import (
	"context"
	"time"
)

// electSQL publishes a leader's term (migrations/00007_leader.sql): on the
// connection that holds the session lock, outside any transaction, so the
// statement is its own transaction and its commit, forced durable by
// leader_elect, makes the term and the leader row visible before fn runs.
const electSQL = `SELECT term, elected_at FROM pgadvisory.leader_elect($1::bigint, $2::text, $3::text)`

// elect publishes the next term of c's lock on q, the connection that holds
// it, and returns it. Its error is an *Error with Op "elect".
func (c *callState) elect(ctx context.Context, q sessionQuerier) (int64, error) {
	var term int64
	var electedAt time.Time
	args := []any{c.ids[0], c.holder, lockTimeoutSetting(c.electPublishTimeout())}
	if err := q.queryRow(ctx, electSQL, args, &term, &electedAt); err != nil {
		return 0, c.failure(ctx, "elect", err)
	}
	return term, nil
}

// electPublishTimeout bounds how long an election's publish waits for
// writes still in flight with the previous term (they hold its fence row):
// fencing's publish timeout, but under the statement bound of a shared
// session connection (the check timeout), so that the server gives up
// first, with ErrLockTimeout, and the connection and the other locks on it
// live on.
func (c *callState) electPublishTimeout() time.Duration {
	return min(defaultPublishTimeout, c.checkTimeout*4/5)
}
