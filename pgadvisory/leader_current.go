package pgadvisory

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockgen/lockgen/internal/sqlcpgx"
	"github.com/lockgen/lockgen/internal/sqlcstd"
)

// Leader is who leads a lock now (see [Locker.CurrentLeader]).
type Leader struct {
	Holder string    // WithHolder's name, default "<host>/<pid>"
	Term   int64     // the leader's term: the lock's published fencing token
	PID    int32     // the server backend holding the lock; 0 for a lease leader ([WithLease]), which no backend holds
	Since  time.Time // when it was elected, or took its lease (server clock)
	// Expires is when a lease leader's lease expires unless renewed
	// (server clock), as of the answer; zero for a session-lock leader,
	// whose leadership ends with its session.
	Expires time.Time
}

func currentLeader(ctx context.Context, db *sql.DB, lockID int64, name string) (Leader, error) {
	if db == nil {
		return Leader{}, currentLeaderInvalid(lockID, name, "nil *sql.DB")
	}
	row, err := sqlcstd.New().CurrentLeader(ctx, db, lockID)
	if err != nil {
		return Leader{}, currentLeaderFailure(ctx, lockID, name, err)
	}
	ld := Leader{Holder: row.Holder, Term: row.Term, PID: row.Pid, Since: row.ElectedAt}
	if row.Pid == 0 {
		ld.Expires = row.ExpiresAt
	}
	return ld, nil
}

func currentLeaderPgx(ctx context.Context, pool *pgxpool.Pool, lockID int64, name string) (Leader, error) {
	if pool == nil {
		return Leader{}, currentLeaderInvalid(lockID, name, "nil *pgxpool.Pool")
	}
	row, err := sqlcpgx.New().CurrentLeader(ctx, pool, lockID)
	if err != nil {
		return Leader{}, currentLeaderFailure(ctx, lockID, name, err)
	}
	ld := Leader{Holder: row.Holder, Term: row.Term, PID: row.Pid, Since: row.ElectedAt.Time}
	if row.Pid == 0 {
		ld.Expires = row.ExpiresAt.Time
	}
	return ld, nil
}

// currentLeaderFailure is CurrentLeader's error: ErrNoLeader for no row,
// else the driver's error with its kind.
func currentLeaderFailure(ctx context.Context, lockID int64, name string, err error) error {
	if errors.Is(err, sql.ErrNoRows) || errors.Is(err, pgx.ErrNoRows) {
		return &Error{Op: "current leader", LockIDs: []int64{lockID}, Name: name, Kind: ErrNoLeader}
	}
	return &Error{Op: "current leader", LockIDs: []int64{lockID}, Name: name, SQLState: SQLState(err), Kind: classify(err), Err: withContext(ctx, err)}
}

// currentLeaderInvalid is CurrentLeader's error for a bad argument.
func currentLeaderInvalid(lockID int64, name, what string) error {
	return &Error{Op: "current leader", LockIDs: []int64{lockID}, Name: name, Kind: ErrInvalidArgument, Err: errors.New(what)}
}
