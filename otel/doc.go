// Package lockgenotel turns lockgen's lock calls into OpenTelemetry metrics
// and traces. It is a module of its own (github.com/lockgen/lockgen/otel),
// so that services which do not use OpenTelemetry never inherit it.
//
// Set the observer once, at start-up, for a Locker or for one generated
// lock set:
//
//	obs, err := lockgenotel.New() // the global MeterProvider and TracerProvider
//	if err != nil { … }
//	locker, err := pgadvisory.New(pgadvisory.Pgx(pool), pgadvisory.WithLockerObserver(obs)) // every call of the Locker
//	locker, err := pgadvisory.New(pgadvisory.Pgx(pool),
//		pgadvisory.WithLockSetObserver(locks.Declared, obs)) // or: its calls on the locks of one locks.yaml
//
// or for one call or lock with pgadvisory.WithCallObserver(obs).
//
// # Metrics
//
// Names and units follow OpenTelemetry's semantic conventions:
//
//   - lockgen.lock.wait.duration (histogram, s): from the start of a call
//     until the server granted or refused its locks, or the wait timed out.
//   - lockgen.lock.hold.duration (histogram, s): from the grant to the
//     release (COMMIT or ROLLBACK; for session locks, the unlock).
//   - lockgen.lock.attempts (counter): one per lock call, with
//     lockgen.outcome.
//   - lockgen.fencing.rejections (counter): writes and publishes that a
//     fencing guard refused, counted once by the call whose own statement
//     was refused (RunFenced, fn's transaction, the publish), with
//     lockgen.fencing.rejection: stale_token, missing_token or
//     truncate_refused.
//
// Every metric carries lockgen.lock.name (when the call came through a
// declared pgadvisory.Lock), lockgen.lock.id (the call's lock ID; the
// lowest of a WithLocks set) and lockgen.call (run_exclusive, run_session,
// run_once, run_fenced, lead, lock_tx, run_limited, run_session_limited). The histograms and the attempts counter also carry
// lockgen.outcome, and the attempts counter error.type when the call failed.
// A parameterized lock has one ID per parameter value, which can make many
// time series: [WithMetricLockID](false) leaves the ID out of the metrics
// (spans keep it).
//
// # Outcomes
//
// lockgen.outcome is one of acquired, locked, timeout, lost or error, as
// pgadvisory.Outcome defines them. It says what became of the locks, not of
// fn: a call whose fn failed still acquired its locks (error.type then says
// what fn's error was). Two mappings need a word:
//
//   - RunOnce finding its window done (ErrAlreadyDone) is acquired, with
//     error.type already_done: the lock was granted, and the ledger, read
//     under it, said the work was done.
//   - A fenced write (RunFenced) takes no lock: it makes a span and, when
//     refused, counts a rejection, but no attempt.
//
// # Spans
//
// Each call makes one span, "lockgen.<call> <lock name>", a child of the
// span in the caller's context, from the call's start to its end, with the
// metrics' attributes and the outcome, the fencing token of a fenced call
// and the window of a run-once call. Span events mark what the span's start
// and end do not: the grant ("acquired"), and a failed step or a lost
// session lock ("error", with error.type). Its status is Error when the call
// failed, except for ErrLocked and a RunOnce window already done, which are
// answers, not failures.
//
// The span is also in the context the call uses from its start: a driver
// tracer (such as an OpenTelemetry tracer for pgx) makes the call's own
// statements children of it, and a session lock's fn gets it in its
// context, so the work done under a session lock nests under the lock's span.
// A transaction lock's fn receives no context: its statements are children
// of the caller's span, beside the lock's.
//
// For session locks the span lasts as long as the lock is held, and is
// exported when the call ends. The wait is recorded when the lock is
// granted, the hold and the attempt when it is released.
package lockgenotel
