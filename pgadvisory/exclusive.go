package pgadvisory

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// RunExclusive runs fn inside a transaction that holds the transaction-scoped
// advisory lock lockID (pg_try_advisory_xact_lock), and commits fn's work and
// releases the lock together.
//
// It begins a READ COMMITTED transaction and takes the lock in its own
// statement, so fn's statements see everything the previous holder committed.
// If the lock is held elsewhere it returns an error matching [ErrLocked]
// (Op "lock") without calling fn. If fn returns an error the transaction is
// rolled back and that error returned (wrapped in an [*Error] with Op "fn"
// when it has a known kind, such as [ErrDeadlock], or matches ErrLocked or
// ErrAlreadyDone). If fn panics, the transaction is rolled back and the panic
// continues. If fn ends the transaction itself, the call reports
// [ErrTxEnded]. If ctx is done before COMMIT is sent, the error wraps
// ctx.Err() and nothing is committed. Otherwise the transaction commits; a
// COMMIT the server rejected is reported as rolled back, and one that was
// sent without a definite answer (the connection broke, ctx ended while it
// waited, the server ended the session) as [ErrCommitUnknown]. A failure to
// connect is [ErrConnect] (Op "connect").
//
// Round trips: BEGIN, the lock statement, COMMIT, as in a hand-written
// version; options add none. [RunExclusivePgx] needs two.
//
// All writes that must be protected by the lock go through tx: work done on
// other connections is not covered (see Fencing in the package
// documentation).
func RunExclusive(ctx context.Context, db *sql.DB, lockID int64, fn func(*sql.Tx) error, opts ...Option) error {
	c, err := newCall(lockID, opts, famExclusive, "*sql.DB", db == nil, fn == nil)
	if err != nil {
		return err
	}
	d := &databaseSQLTx{db: db}
	return run(ctx, c, d, func() error { return fn(d.tx) })
}

// RunExclusivePgx is [RunExclusive] for a pgx pool: fn receives a [pgx.Tx].
//
// BEGIN and the lock statement travel in one pipelined round trip (pgx's
// [pgx.Batch.BeginTx]), so an uncontended call costs two round trips (BEGIN
// with the lock, then COMMIT) and a contended one returns [ErrLocked] after
// one; the ROLLBACK that returns the loser's connection to the pool finishes
// in the background. Behaviour, options and errors are those of
// [RunExclusive].
//
// fn must not call tx.Begin expecting a separate transaction: pgx implements
// it as a savepoint inside the lock transaction.
func RunExclusivePgx(ctx context.Context, pool *pgxpool.Pool, lockID int64, fn func(pgx.Tx) error, opts ...Option) error {
	c, err := newCall(lockID, opts, famExclusive, "*pgxpool.Pool", pool == nil, fn == nil)
	if err != nil {
		return err
	}
	d := &pgxTx{pool: pool}
	return run(ctx, c, d, func() error { return fn(d.tx) })
}

// RunExclusive is [RunExclusive] on l.
func (l Lock) RunExclusive(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error, opts ...Option) error {
	return RunExclusive(ctx, db, l.ID, fn, l.named(opts)...)
}

// RunExclusivePgx is [RunExclusivePgx] on l.
func (l Lock) RunExclusivePgx(ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx) error, opts ...Option) error {
	return RunExclusivePgx(ctx, pool, l.ID, fn, l.named(opts)...)
}
