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

// Leader is who leads a lock now (see [CurrentLeader]).
type Leader struct {
	Holder string    // WithHolder's name, default "<host>/<pid>"
	Term   int64     // the leader's term: the lock's published fencing token
	PID    int32     // the server backend holding the lock
	Since  time.Time // when it was elected (server clock)
}

// CurrentLeader reports who leads lockID now, or an error matching
// [ErrNoLeader]. A leader whose backend is gone is never reported: the
// leader recorded by the last election ([Lead]) is returned only while its
// server backend is alive, is the same backend (its pid, started before the
// election, so a reused pid is not mistaken for it), holds the lock in
// exclusive mode,
// and its term is the lock's published token. The check runs on the
// server in one statement (pgadvisory.current_leader, migration 00007),
// which needs no privilege on lockgen's tables.
//
// The answer can be out of date by the time it arrives: use it to show or
// route, never as permission to act as the leader (that is what the term
// and fencing are for).
func CurrentLeader(ctx context.Context, db *sql.DB, lockID int64) (Leader, error) {
	return currentLeader(ctx, db, lockID, "")
}

func currentLeader(ctx context.Context, db *sql.DB, lockID int64, name string) (Leader, error) {
	if db == nil {
		return Leader{}, currentLeaderInvalid(lockID, name, "nil *sql.DB")
	}
	row, err := sqlcstd.New().CurrentLeader(ctx, db, lockID)
	if err != nil {
		return Leader{}, currentLeaderFailure(ctx, lockID, name, err)
	}
	return Leader{Holder: row.Holder, Term: row.Term, PID: row.Pid, Since: row.ElectedAt}, nil
}

// CurrentLeaderPgx is [CurrentLeader] for a pgx pool.
func CurrentLeaderPgx(ctx context.Context, pool *pgxpool.Pool, lockID int64) (Leader, error) {
	return currentLeaderPgx(ctx, pool, lockID, "")
}

func currentLeaderPgx(ctx context.Context, pool *pgxpool.Pool, lockID int64, name string) (Leader, error) {
	if pool == nil {
		return Leader{}, currentLeaderInvalid(lockID, name, "nil *pgxpool.Pool")
	}
	row, err := sqlcpgx.New().CurrentLeader(ctx, pool, lockID)
	if err != nil {
		return Leader{}, currentLeaderFailure(ctx, lockID, name, err)
	}
	return Leader{Holder: row.Holder, Term: row.Term, PID: row.Pid, Since: row.ElectedAt.Time}, nil
}

// CurrentLeader is [CurrentLeader] on l.
func (l Lock) CurrentLeader(ctx context.Context, db *sql.DB) (Leader, error) {
	return currentLeader(ctx, db, l.ID, l.Name)
}

// CurrentLeaderPgx is [CurrentLeaderPgx] on l.
func (l Lock) CurrentLeaderPgx(ctx context.Context, pool *pgxpool.Pool) (Leader, error) {
	return currentLeaderPgx(ctx, pool, l.ID, l.Name)
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
