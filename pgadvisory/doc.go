// Package pgadvisory runs code under PostgreSQL advisory locks, correctly.
//
// A [Locker] is the front door of one connection pool, made once with [New]
// from a database/sql pool ([Stdlib]) or a pgx pool ([Pgx]). Its main
// method takes a transaction-scoped lock and runs fn in the same
// transaction, so the lock and the data it protects share one fate:
//
//	locker, err := pgadvisory.New(pgadvisory.Pgx(pool))
//	…
//	err = locker.RunExclusive(ctx, locks.ReportsDaily, func(tx pgx.Tx) error {
//		_, err := tx.Exec(ctx, `INSERT INTO reports …`)
//		return err
//	})
//	if errors.Is(err, pgadvisory.ErrLocked) {
//		// another instance is doing it right now
//	}
//
// The transaction type fn receives is the driver's ([*sql.Tx] or
// [pgx.Tx]), fixed by the Locker's type. Locks are [Lock] values, which
// cmd/lockgen generates from declared names ([ID] makes one of a raw key).
//
//   - [Locker.RunExclusive]: fn runs in the transaction that holds the lock.
//   - [Locker.LockTx]: the lock in a transaction the caller already has.
//   - [Locker.RunSession]: a session-level lock, for work that spans many
//     transactions. The session locks of a Locker share a few server
//     connections ([WithSessionConns]). The work's context is canceled
//     with [ErrLockLost] when the connection dies or the lock vanishes, the
//     release verifies that every lock was still held (else ErrLockLost),
//     and a transaction-pooling proxy such as PgBouncer is refused
//     ([ErrTransactionPooler]; in statement mode [ErrStatementPooler]),
//     because session locks leak there; session mode is accepted when
//     declared ([WithSessionPooler], [WithSessionModePooler]).
//   - [Locker.RunOnce]: RunExclusive that runs fn at most once
//     successfully per (lock, window), such as the day from [DailyWindow],
//     however the replicas' timing falls ([ErrAlreadyDone]).
//   - [Locker.Lead]: leader election on a session lock. Once elected, a
//     term is published (a fencing token, durable before fn runs) and fn
//     runs with it, so writes a deposed leader makes with its term
//     ([Locker.RunFenced], [Locker.SetFencingToken]) are rejected once a
//     newer leader is elected ([ErrStaleToken]). [Locker.Campaign]
//     campaigns again after each leadership, [Locker.CurrentLeader] tells
//     who leads now.
//
// The package-level functions (RunExclusive, RunExclusivePgx, …) and the
// Lock methods of earlier releases remain, deprecated, as calls on a
// Locker of their pool.
//
// Fencing, run-once, leader election and the lock registry ([Register])
// need lockgen's schema: call [Migrate] at start-up.
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
//     terminated, connection lost, no connection at all, commit outcome
//     unknown, fn ending the transaction itself each map to a sentinel
//     ([ErrLockTimeout], [ErrDeadlock], [ErrLockTableFull], [ErrConnLost],
//     [ErrConnect], [ErrCommitUnknown], [ErrTxEnded]) inside an [*Error]
//     that names the lock and keeps the driver's cause for errors.As. COMMIT
//     is unknown only once it was sent: the package owns the transaction's
//     context, so it knows. [ErrLocked] and [ErrAlreadyDone] are *Errors
//     too; test every kind with errors.Is, and read Op to tell "fn was not
//     called" (Op "lock", "run-once") from "fn ran and a nested call failed
//     so" (Op "fn").
//   - Panics and cancelation: fn panicking rolls back and re-panics; a
//     canceled context rolls back and the error wraps ctx.Err().
//
// # Options
//
// [LockerOption]s hold what belongs to the pool and are checked once by
// [New]; [Option]s adjust one call ([Lock.With] gives a lock default
// options). An option that does not apply to the call, or a combination
// that cannot work, is refused with [ErrInvalidArgument] before anything
// is sent. The list and the rules are on [Option] and [LockerOption].
//
// # Fencing
//
// A lock cannot stop a holder that lost it (a pause, a killed connection)
// from writing later. With [WithFencing], the call draws a token from the
// sequence pgadvisory.fencing_token_seq and publishes it durably in
// pgadvisory.fence before fn runs, all on the lock's own connection and in
// the lock's own round trip; tables guarded by lockgen's fence triggers (see
// lockgen fence) accept a write only if it carries the currently published
// token. The database is the judge: a stale writer is rejected with
// SQLSTATE LF001 ([ErrStaleToken]) whatever the client believes. Writes
// through fn's transaction carry the token already; fn reads it with
// [Locker.FencingToken], and writes on other connections or in other processes
// carry it with [Locker.RunFenced] or [Locker.SetFencingToken]. A token is only what the
// writer set for its transaction: the fenced table's fencing_token column is
// a stamp, never a token.
//
// How: one message takes the locks at session level, draws and publishes
// the token, commits that (synchronous_commit forced on, so the publish
// survives a crash whatever the server's setting) with COMMIT AND CHAIN, and
// hands the locks over to the chained transaction, in which fn runs. The key
// is never free in between: a caller waiting for it (WithWait) gets it only
// after fn's transaction ends. If the message fails part-way, the
// connection is closed rather than returned to the pool, so no session lock
// outlives the call (PgBouncer in transaction mode included).
//
// Cost: no extra round trip (two on [Pgx], three on [Stdlib], as
// unfenced) and no second connection (a pool of one
// works); the publish's commit waits for one WAL flush. A fenced call is
// refused with [ErrInvalidArgument] together with [WithShared] or a
// read-only transaction.
//
// # What a lock cannot do
//
// The lock protects what fn writes through its transaction. Work done on
// other connections, in other stores or by a process that paused past losing
// its lock is not protected by any lock; it needs the fencing tokens above,
// checked where the data lives.
package pgadvisory
