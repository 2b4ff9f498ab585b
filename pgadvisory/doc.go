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
// Each Run function has a database/sql form and a pgx form for a
// *pgxpool.Pool (suffix Pgx; [RunExclusivePgx] costs two round trips instead
// of three). [Lock] values, which cmd/lockgen generates from declared names,
// carry the same methods.
//
//   - [RunExclusive]: fn runs in the transaction that holds the lock.
//   - [RunSession]: a session-level lock, for work that spans many
//     transactions. The session locks of a pool share a few server
//     connections (2 by default, [SetSessionConns]; a waiting call waits on
//     a connection of its own, and a key held by another call of this
//     process is contended). The work's context is canceled with
//     [ErrLockLost] when the connection dies or the lock vanishes (a dying
//     shared connection cancels every lock on it), the
//     release verifies that every lock was still held (else ErrLockLost), and
//     a transaction-pooling proxy such as PgBouncer is refused
//     ([ErrTransactionPooler]; in statement mode [ErrStatementPooler]),
//     because session locks leak there; session mode is accepted when
//     declared ([WithSessionPooler]).
//   - [RunOnce]: RunExclusive that runs fn at most once successfully per
//     (lock, window), such as the day from [DailyWindow], however the
//     replicas' timing falls ([ErrAlreadyDone]).
//   - [RunExclusiveRepo]: a sqlc-style repository (New(DBTX) or WithTx)
//     under a lock in one line.
//   - [Lead]: leader election on a session lock, with the rules of
//     RunSession. The candidate waits in the lock's queue; once elected,
//     a term is published on its connection (a fencing token, durable
//     before fn runs) and fn runs with it, so writes a deposed leader makes
//     with its term ([RunFenced], [SetFencingToken]) are rejected once a
//     newer leader is elected ([ErrStaleToken]). [Campaign] campaigns again
//     after each leadership, [CurrentLeader] tells who leads now
//     ([ErrNoLeader] once the leader's backend is gone).
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
// Options adjust one call; [Lock.With] gives a lock default options. An
// option that does not apply to the call, or a combination that cannot work
// (RunOnce with WithShared or a read-only transaction), is refused with
// [ErrInvalidArgument] before anything is sent (see [Option]).
//
//   - [WithWait]: wait for the lock, up to a timeout the server enforces
//     ([ErrLockTimeout]), whatever lock_timeout the database or role sets;
//     see WithWait about statement_timeout.
//   - [WithShared]: take reader locks.
//   - [WithLocks]: take more locks in the same statement, in ascending order,
//     so that callers waiting for overlapping sets cannot deadlock; a set of
//     any size is one statement parameter.
//   - [WithTxOptions], [WithPgxTxOptions]: a read-only transaction; the
//     isolation level stays READ COMMITTED.
//   - [WithObserver]: acquired, contended, released and error events;
//     [SlogObserver] logs them. [WithCallObserver] takes an [Observer], which
//     follows a whole call (for spans) and learns its outcome; set one once
//     for the process ([SetObserver]) or for a generated lock set
//     ([SetObserverFor]) instead of at every call. The module
//     github.com/lockgen/lockgen/otel turns them into OpenTelemetry metrics
//     and traces.
//   - [WithCheckInterval], [WithCheckTimeout]: how often a session lock
//     checks its connection and lock, and how long one check may take.
//   - [WithSessionPooler]: session locks through a pooler in session mode.
//   - [SetSessionConns], [SetSessionConnsPgx] (per pool, not per call): how
//     many server connections a pool's session locks share; 0 for a
//     connection per call.
//   - [WithFencing]: a fencing token for the call (see Fencing); not with
//     WithShared or a read-only transaction.
//   - [WithHolder]: the holder recorded in the run-once ledger.
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
// [FencingToken], and writes on other connections or in other processes
// carry it with [RunFenced] or [SetFencingToken]. A token is only what the
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
// Cost: no extra round trip (two for [RunExclusivePgx], three for
// [RunExclusive], as unfenced) and no second connection (a pool of one
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
