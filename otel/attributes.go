package lockgenotel

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"

	"github.com/lockgen/lockgen/pgadvisory"
)

// The attribute keys this package records.
const (
	// LockNameKey is the lock's declared name, e.g. "reports.daily_email"
	// (metrics and spans; absent for calls by raw ID).
	LockNameKey = attribute.Key("lockgen.lock.name")
	// LockIDKey is the call's lock ID, the lowest of a WithLocks set
	// (metrics, unless WithMetricLockID(false), and spans).
	LockIDKey = attribute.Key("lockgen.lock.id")
	// LockIDsKey is every lock ID of a call that takes several (spans).
	LockIDsKey = attribute.Key("lockgen.lock.ids")
	// LockSharedKey marks a call in shared mode (spans).
	LockSharedKey = attribute.Key("lockgen.lock.shared")
	// CallKey is the entry family: run_exclusive, run_session, run_once,
	// run_fenced, lead, lock_tx, run_limited or run_session_limited
	// (metrics and spans).
	CallKey = attribute.Key("lockgen.call")
	// OutcomeKey is the call's outcome: acquired, locked, timeout, lost or
	// error (the histograms, lockgen.lock.attempts and spans).
	OutcomeKey = attribute.Key("lockgen.outcome")
	// ErrorTypeKey is OpenTelemetry's error.type: what the call's error
	// was, by pgadvisory's sentinels (see [ErrorType]); set when the call
	// failed (lockgen.lock.attempts and spans).
	ErrorTypeKey = attribute.Key("error.type")
	// FencingTokenKey is a fenced call's token (spans).
	FencingTokenKey = attribute.Key("lockgen.fencing.token")
	// RejectionKey is what a fencing guard refused: stale_token,
	// missing_token or truncate_refused (lockgen.fencing.rejections).
	RejectionKey = attribute.Key("lockgen.fencing.rejection")
	// RunOnceWindowKey is a run-once call's window key (spans).
	RunOnceWindowKey = attribute.Key("lockgen.run_once.window")
	// AlreadyDoneKey marks a run-once call that found its window done
	// (spans).
	AlreadyDoneKey = attribute.Key("lockgen.run_once.already_done")
)

// errorTypes name pgadvisory's sentinels, in the order ErrorType tries
// them: the more specific first (a lost session lock's cause may also be a
// lost connection; a timed-out context may also be a lost connection).
var errorTypes = []struct {
	err  error
	name string
}{
	{pgadvisory.ErrLocked, "locked"},
	{pgadvisory.ErrAlreadyDone, "already_done"},
	{pgadvisory.ErrLockTimeout, "lock_timeout"},
	{pgadvisory.ErrLockLost, "lock_lost"},
	{pgadvisory.ErrCommitUnknown, "commit_unknown"},
	{pgadvisory.ErrTxEnded, "tx_ended"},
	{pgadvisory.ErrStaleToken, "stale_token"},
	{pgadvisory.ErrMissingToken, "missing_token"},
	{pgadvisory.ErrTruncateRefused, "truncate_refused"},
	{pgadvisory.ErrNullParameter, "null_parameter"},
	{pgadvisory.ErrDeadlock, "deadlock"},
	{pgadvisory.ErrLockTableFull, "lock_table_full"},
	{pgadvisory.ErrStandby, "standby"},
	{pgadvisory.ErrTransactionPooler, "transaction_pooler"},
	{pgadvisory.ErrStatementPooler, "statement_pooler"},
	{pgadvisory.ErrIsolationLevel, "isolation_level"},
	{pgadvisory.ErrNotMigrated, "not_migrated"},
	{pgadvisory.ErrNoLeader, "no_leader"},
	{pgadvisory.ErrInvalidArgument, "invalid_argument"},
	{pgadvisory.ErrClosed, "closed"},
	{pgadvisory.ErrConnect, "connect"},
	{pgadvisory.ErrConnLost, "conn_lost"},
	{context.DeadlineExceeded, "deadline_exceeded"},
	{context.Canceled, "canceled"},
}

// ErrorType is the error.type of err: the snake_case name of the first of
// pgadvisory's sentinels (then context's) that err matches with errors.Is,
// "_OTHER" for any other error (fn's own, typically), "" for nil. The set of
// values is small and fixed, as a metric attribute's must be.
func ErrorType(err error) string {
	if err == nil {
		return ""
	}
	for _, t := range errorTypes {
		if errors.Is(err, t.err) {
			return t.name
		}
	}
	return "_OTHER"
}

// rejectionName is the lockgen.fencing.rejection of a pgadvisory rejection.
func rejectionName(kind error) string {
	switch kind {
	case pgadvisory.ErrStaleToken:
		return "stale_token"
	case pgadvisory.ErrMissingToken:
		return "missing_token"
	case pgadvisory.ErrTruncateRefused:
		return "truncate_refused"
	}
	return "_OTHER"
}
