// Package pgadvisory runs code under PostgreSQL advisory locks, correctly.
//
// The main entry point takes a transaction-scoped lock and runs fn in the
// same transaction, so the lock and the data it protects share one fate:
//
//	err := pgadvisory.RunExclusive(ctx, db, lockID, func(tx *sql.Tx) error {
//		_, err := tx.ExecContext(ctx, `INSERT INTO reports …`)
//		return err
//	})
//	if errors.Is(err, pgadvisory.ErrLocked) {
//		// another instance is doing it right now
//	}
//
// [RunExclusivePgx] is the same for a *pgxpool.Pool (fn gets a pgx.Tx) and
// costs two round trips instead of three. [Lock] values, which cmd/lockgen
// generates from declared names, carry the same methods.
//
// # What it guards against
//
//   - Hot standby: advisory locks on a standby exclude nobody on the primary.
//     The lock statement also returns pg_is_in_recovery(), so a standby is
//     refused ([ErrStandby]) at no extra cost.
//   - Stale snapshots: at REPEATABLE READ or SERIALIZABLE the snapshot is taken
//     before the lock is granted and fn could miss the previous holder's
//     writes. The transaction always begins READ COMMITTED, even when the
//     server default says otherwise; asking for another level returns
//     [ErrIsolationLevel].
//   - Errors with a meaning: lock_timeout, deadlock, lock table full, backend
//     terminated, connection lost, commit outcome unknown each map to a
//     sentinel ([ErrLockTimeout], [ErrDeadlock], [ErrLockTableFull],
//     [ErrConnLost], [ErrCommitUnknown]) inside an [*Error] that keeps the
//     driver's cause for errors.As.
//   - Panics and cancelation: fn panicking rolls back and re-panics; a
//     canceled context rolls back and the error wraps ctx.Err().
//
// # Options
//
// [WithWait] waits for the lock up to a server-enforced timeout, [WithShared]
// takes reader locks, [WithLocks] takes several locks in a deadlock-free
// order, [WithTxOptions] sets transaction options and [WithObserver] (with
// [SlogObserver]) reports acquired, contended, released and failed locks.
//
// # Session locks
//
// [RunSession] and [RunSessionPgx] hold a session-level lock on a dedicated
// connection for work that spans many transactions. The work's context is
// canceled with [ErrLockLost] when the connection dies or the lock vanishes,
// and a transaction-pooling proxy such as PgBouncer is refused
// ([ErrTransactionPooler]), because session locks leak there.
//
// # Repositories
//
// [RunExclusiveRepo] and [RunExclusiveRepoPgx] run a sqlc-style repository
// (New(DBTX) or WithTx) under a lock in one line.
//
// # Fencing and run-once
//
// A lock cannot stop a holder that paused past losing it. [WithFencing]
// draws a fencing token in the lock statement, publishes it durably before
// fn runs, and tables fenced with lockgen's trigger (see cmd/lockgen fence)
// then reject every write that carries an older token ([ErrStaleToken],
// SQLSTATE LF001). fn reads the token with [FencingToken]; other connections
// and processes carry it with [RunFenced] or [SetFencingToken].
//
// [RunOnce] runs fn at most once successfully per (lock, window), such as
// the day from [DailyWindow], however the replicas' timing falls
// ([ErrAlreadyDone]). Both need lockgen's schema: call [Migrate] at start-up.
//
// # What a lock cannot do
//
// The lock protects what fn writes through its transaction. Work done on
// other connections, in other stores or by a process that paused past losing
// its lock is not protected by any lock; it needs the fencing tokens above,
// checked where the data lives.
package pgadvisory
