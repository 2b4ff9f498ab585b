package pgadvisory

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Sentinel errors. Every error this package returns for one of these outcomes
// satisfies errors.Is(err, ErrX): each is the Kind of an [*Error] that also
// names the lock and carries the driver's cause (errors.As finds a
// *pgconn.PgError through it). Compare with errors.Is, never with ==.
var (
	// ErrLocked reports that another session holds the lock; fn was not
	// called. It comes as an [*Error] with Op "lock" that names the lock
	// (name and ID), so test it with errors.Is(err, ErrLocked). When fn
	// itself returned an error matching ErrLocked (a nested call found its
	// lock held), the call's error is an *Error with Op "fn": fn ran and was
	// rolled back. Retry later, or treat the work as done elsewhere.
	ErrLocked = errors.New("pgadvisory: lock is held by another session")

	// ErrLockTimeout reports that waiting for the lock (see [WithWait]) hit the
	// timeout, enforced by the server's lock_timeout (SQLSTATE 55P03). fn was not
	// called. Retry later. It is also the kind of a wait that the server's
	// statement_timeout ended before WithWait's timeout ([Locker.RunExclusive] on
	// database/sql, which cannot lift it at no cost): the error then names
	// the setting and its value and carries SQLSTATE 57014.
	ErrLockTimeout = errors.New("pgadvisory: timed out waiting for the lock")

	// ErrDeadlock reports that the server detected a deadlock (SQLSTATE 40P01)
	// while taking the lock or inside fn. The transaction was aborted, the lock
	// released and nothing committed. Retrying the whole call is safe.
	ErrDeadlock = errors.New("pgadvisory: deadlock detected; the transaction was rolled back and the lock released (SQLSTATE 40P01)")

	// ErrLockTableFull reports that the server's shared lock table is exhausted
	// (SQLSTATE 53200, "out of shared memory"). It affects every session of the
	// cluster: find who holds many locks (pg_locks) or raise
	// max_locks_per_transaction. Do not retry in a loop.
	ErrLockTableFull = errors.New("pgadvisory: server lock table is full; raise max_locks_per_transaction or find the session holding many locks (SQLSTATE 53200)")

	// ErrConnLost reports that the connection broke or the backend was
	// terminated (SQLSTATE 57P01, 25P03, class 08, or EOF) before COMMIT was
	// sent: nothing was committed. When the server ended the session it has
	// already released the lock; when the client noticed first (a half-open
	// link), the server releases it once it notices too (see
	// tcp_keepalives_* and client_connection_check_interval). The pool
	// discards the broken connection. Retry.
	ErrConnLost = errors.New("pgadvisory: connection lost or backend terminated; nothing was committed and the server releases the lock")

	// ErrConnect reports that no connection could be opened (Op "connect"):
	// the server refused or could not be reached, is starting up or shutting
	// down, the database does not exist (SQLSTATE 3D000) or authentication
	// failed (class 28). No connection and no lock was ever there, and fn
	// was not called. Retry later when the cause is passing; a missing
	// database or a failed authentication needs a fix, not a retry.
	ErrConnect = errors.New("pgadvisory: could not connect; no connection and no lock was ever there")

	// ErrCommitUnknown reports that COMMIT was sent but no answer says
	// whether it took effect: the connection broke, the server ended the
	// session (a FATAL error such as 57P01 answering COMMIT), or ctx ended
	// while COMMIT was in flight (waiting for a synchronous standby, for
	// example). The transaction may or may not have committed. Check the
	// data before redoing non-idempotent work. A COMMIT that was never sent
	// (ctx already done, the connection already broken) is not unknown: it
	// committed nothing, and the error says so.
	ErrCommitUnknown = errors.New("pgadvisory: COMMIT was sent but its outcome is unknown")

	// ErrTxEnded reports that fn ended the lock transaction itself: it
	// called Commit or Rollback on the transaction it was given (or, on the
	// pgx front door, ran COMMIT or ROLLBACK). The lock was released at that
	// moment, so whatever fn committed ran under the lock only up to then,
	// and anything it did afterwards ran without it. fn must leave ending
	// the transaction to the call. A [Locker.RunOnce] window whose fn did this is
	// claimed all the same (the ledger row is written before fn, in the
	// same transaction), so its work never runs twice.
	ErrTxEnded = errors.New("pgadvisory: fn ended the lock transaction itself; what it committed ran under the lock only up to that moment")

	// ErrStandby reports that the server is a hot standby (pg_is_in_recovery()).
	// Advisory locks there are local to the standby and exclude nobody on the
	// primary, so the call was refused before fn ran. Connect to the primary
	// (target_session_attrs=read-write).
	ErrStandby = errors.New("pgadvisory: server is a hot standby; advisory locks there exclude nobody on the primary")

	// ErrIsolationLevel reports a request for REPEATABLE READ or SERIALIZABLE.
	// At those levels the snapshot is taken by the lock statement itself, before
	// the lock is granted, so fn could miss writes of the previous holder.
	// RunExclusive always runs at READ COMMITTED; [Locker.LockTx] refuses a
	// caller's transaction above it (Op "lock"), in the lock statement, which
	// then takes no lock.
	ErrIsolationLevel = errors.New("pgadvisory: only READ COMMITTED is allowed: at REPEATABLE READ or SERIALIZABLE the snapshot predates the lock and fn could read stale data")

	// ErrLockLost reports that a session lock's connection died or the lock
	// vanished while its work was running: found by the watcher (Op "watch";
	// the cause of the context given to the work, see [context.Cause], wraps
	// it) or by the release when fn returned (Op "release": the unlock found
	// fewer locks than were taken, or the connection was dead or did not
	// answer). Either way the work may have run, at least in part, without
	// the lock; another holder may have run meanwhile. Use fencing where that
	// matters.
	ErrLockLost = errors.New("pgadvisory: session lock lost")

	// ErrTransactionPooler reports that the connection goes through a pooler
	// (such as PgBouncer in pool_mode=transaction) that may hand the server
	// connection to other clients between transactions. Session locks leak
	// there, so they are refused ([Locker.RunSession], [Migrate]). Transaction-scoped
	// RunExclusive works. A pooler in session mode cannot be told apart from
	// one in transaction mode by a client; declare it with
	// [WithSessionPooler] to take session locks through it.
	ErrTransactionPooler = errors.New("pgadvisory: connection goes through a pooler; session locks would leak to other clients (use RunExclusive, or connect directly)")

	// ErrStatementPooler reports that the connection goes through a pooler
	// in statement mode (PgBouncer with pool_mode=statement), which refuses
	// transactions (SQLSTATE 08P01, "transaction blocks not allowed in
	// statement pooling mode") and hands the server connection to other
	// clients after every statement: neither transaction locks nor session
	// locks can work there. Nothing was committed. Do not retry: connect
	// directly, or through a pool in transaction mode for [Locker.RunExclusive].
	ErrStatementPooler = errors.New("pgadvisory: connection goes through a pooler in statement mode, which refuses transactions; no advisory lock can work there (connect directly, or use transaction pooling for RunExclusive)")

	// ErrStaleToken reports a fencing token that is not the lock's published
	// one. From a fenced write (SQLSTATE LF001): a newer holder took the
	// lock, so this token's holder lost it and must stop writing; do not
	// retry the write. From a fenced call's publish (Op "publish", SQLSTATE
	// LF004): the token sequence is behind a token already published, which
	// only happens when it went backwards (a restored backup, an asynchronous
	// failover); fn did not run, and the error (its message and the server's
	// hint) says how to advance the sequence (SELECT
	// setval('pgadvisory.fencing_token_seq', …)).
	ErrStaleToken = errors.New("pgadvisory: stale fencing token: it is not the lock's published token (SQLSTATE LF001, or LF004 when the token sequence is behind)")

	// ErrMissingToken reports a write to a table fenced in strict mode that
	// carries no fencing token (SQLSTATE LF002). The token is only what the
	// writer set for its transaction, never the row's fencing_token column:
	// take the lock with WithFencing() (or declare fencing: true in
	// locks.yaml) and write through fn's transaction, or carry a holder's
	// token on another connection with RunFenced or SetFencingToken. A plain
	// RunExclusive (without WithFencing) has no token to carry.
	ErrMissingToken = errors.New("pgadvisory: write to a fenced table carries no fencing token (SQLSTATE LF002)")

	// ErrTruncateRefused reports a TRUNCATE that the fencing trigger refused
	// (SQLSTATE LF003).
	ErrTruncateRefused = errors.New("pgadvisory: TRUNCATE of a fenced table refused (SQLSTATE LF003)")

	// ErrNullParameter reports a write to a table fenced by a parameterized
	// lock that writes or deletes a row whose parameter column is NULL
	// (SQLSTATE LF005): such a row belongs to no lock, so no token can speak
	// for it. lockgen fence makes parameter columns NOT NULL.
	ErrNullParameter = errors.New("pgadvisory: a fenced row's parameter column is NULL, so the row belongs to no lock (SQLSTATE LF005)")

	// ErrAlreadyDone reports that the run-once window already has a
	// successful run; fn was not called. It comes as an [*Error] with Op
	// "run-once" that names the lock and the window; test it with
	// errors.Is. As with [ErrLocked], an *Error with Op "fn" means that fn
	// ran and returned an error matching it (from a nested call). Nothing
	// to do.
	ErrAlreadyDone = errors.New("pgadvisory: already done for this window")

	// ErrNotMigrated reports that lockgen's schema (pgadvisory.*) is missing:
	// fencing and run-once need it. Run [Migrate] first.
	ErrNotMigrated = errors.New("pgadvisory: lockgen's schema is missing; run pgadvisory.Migrate")

	// ErrNoLeader reports that nobody leads the lock now ([Locker.CurrentLeader]):
	// no leader was ever elected, or the last one's backend is gone, is
	// another backend with a reused pid, or no longer holds the lock. It
	// comes as an [*Error] with Op "current leader".
	ErrNoLeader = errors.New("pgadvisory: no leader holds the lock now")

	// ErrInvalidArgument reports a bad argument: a nil database, transaction
	// or function, a bad option, an option that does not apply to the call
	// or cannot be combined with another (see [Option]; [WithFencing] with
	// [WithShared] or a read-only transaction, say), an empty run-once window,
	// or bad declarations ([Register]). Nothing was sent to the server. Fix
	// the call.
	ErrInvalidArgument = errors.New("pgadvisory: invalid argument")
)

// Error describes a failed call: the step that failed, on which locks, and
// why. errors.Is and errors.As see through it to Kind and to Err, so both
// errors.Is(err, ErrDeadlock) and errors.As(err, &pgErr) work.
//
// Every error the package returns is an *Error except one: fn's own error,
// returned as is when it has no dedicated kind, does not match [ErrLocked]
// or [ErrAlreadyDone], and ctx is not done.
//
// Op names the step (see [Op] and its constants).
//
// Kind is the sentinel that says what happened, such as [ErrDeadlock]. It is
// nil when the cause has no dedicated kind (a canceled context, an
// unexpected server error); Err then says what happened.
type Error struct {
	Op       Op      // the step that failed (see [Op])
	LockIDs  []int64 // the lock IDs of the call; none for the last four ops
	Name     string  // the lock's declared name, when known
	Token    int64   // the fencing token of a "fenced write"; 0 otherwise
	SQLState string  // the server's SQLSTATE, when the cause came from the server
	Kind     error   // a sentinel such as ErrDeadlock, or nil
	Err      error   // the cause, or more about it; nil when Kind says it all
}

// Error implements error. The message names the lock, the step (with a
// fenced write's token) and what happened, e.g. "pgadvisory: lock 42 (reports.daily_email): taking the
// lock: timed out waiting for the lock (…): ERROR: … (SQLSTATE 55P03)".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("pgadvisory: ")
	writeLockIDs(&b, e.LockIDs)
	if e.Name != "" {
		fmt.Fprintf(&b, " (%s)", e.Name)
	}
	if len(e.LockIDs) > 0 || e.Name != "" {
		b.WriteString(": ")
	}
	b.WriteString(opPhrase(e.Op))
	if e.Token != 0 {
		fmt.Fprintf(&b, " (token %d)", e.Token)
	}
	if e.Kind != nil {
		b.WriteString(": ")
		b.WriteString(strings.TrimPrefix(e.Kind.Error(), "pgadvisory: "))
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	// The fencing token sequence is behind (a restore, an asynchronous
	// failover): the server's hint is the statement that repairs it, which
	// a log of Error() must not lose.
	var pg *pgconn.PgError
	if e.SQLState == "LF004" && errors.As(e.Err, &pg) && pg.Hint != "" {
		b.WriteString(" (hint: ")
		b.WriteString(pg.Hint)
		b.WriteString(")")
	}
	return b.String()
}

// shownLockIDs is how many IDs of a set an error message lists before it
// says how many there are in all.
const shownLockIDs = 5

// writeLockIDs writes "lock 42", "locks [1 2 3]" or, for a set larger than
// shownLockIDs, its first IDs and the count: "locks [1 2 3 4 5 … (1000 in
// all)]", so that a call on thousands of locks keeps a readable message.
func writeLockIDs(b *strings.Builder, ids []int64) {
	switch len(ids) {
	case 0:
		return
	case 1:
		b.WriteString("lock ")
		b.WriteString(strconv.FormatInt(ids[0], 10))
		return
	}
	b.WriteString("locks [")
	for i, id := range ids {
		if i == shownLockIDs && len(ids) > shownLockIDs+1 {
			fmt.Fprintf(b, " … (%d in all)", len(ids))
			break
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.FormatInt(id, 10))
	}
	b.WriteByte(']')
}

// opPhrase is how the message says op; the other ops read as themselves.
func opPhrase(op Op) string {
	switch op {
	case "begin":
		return "beginning"
	case "connect":
		return "connecting"
	case "lock":
		return "taking the lock"
	case "fn":
		return "running fn"
	case "commit":
		return "committing"
	case "watch":
		return "holding the session lock"
	case "release":
		return "releasing the session lock"
	case "options":
		return "reading options"
	case "elect":
		return "publishing the leader's term"
	case "current leader":
		return "reading the current leader"
	}
	return string(op)
}

// Unwrap returns the kind and the cause, for errors.Is and errors.As.
func (e *Error) Unwrap() []error {
	errs := make([]error, 0, 2)
	if e.Kind != nil {
		errs = append(errs, e.Kind)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// SQLState returns the SQLSTATE code carried by err (from pgx, lib/pq or any
// driver error with a SQLState method), or "" if there is none.
func SQLState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	var coded interface{ SQLState() string }
	if errors.As(err, &coded) {
		return coded.SQLState()
	}
	return ""
}
