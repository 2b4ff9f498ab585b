package pgadvisory

import (
	"context"
	"log/slog"
	"time"
)

// EventKind says what happened to a lock.
type EventKind int

// The events a call reports to its observer, in order: Acquired or Contended
// first, then Released once the transaction (or session) ends. Error is
// reported when a step before fn fails (getting a connection, the lock
// statement, a standby, publishing the fencing token, the run-once claim)
// or a session lock is lost; a failure of fn or COMMIT comes with
// Released. A call refused for a bad argument or option reports nothing.
const (
	// EventAcquired: the locks were granted. Event.Wait is the time from the
	// start of the call until the grant (it includes the round trip).
	EventAcquired EventKind = iota + 1
	// EventContended: another session holds a lock (ErrLocked), the wait
	// timed out (ErrLockTimeout) or RunOnce found the window done
	// (ErrAlreadyDone). Event.Err says which, Event.Wait how long the
	// answer took.
	EventContended
	// EventReleased: the transaction committed or rolled back, or the session
	// lock was released. Event.Held is the time the locks were held and
	// Event.Err the call's error, if any.
	EventReleased
	// EventError: a step before fn failed, or a session lock was lost.
	EventError
)

// String returns the event kind's name: "acquired", "contended", "released"
// or "error".
func (k EventKind) String() string {
	switch k {
	case EventAcquired:
		return "acquired"
	case EventContended:
		return "contended"
	case EventReleased:
		return "released"
	case EventError:
		return "error"
	}
	return "unknown"
}

// Event is what an observer (see [WithObserver]) receives.
type Event struct {
	Kind    EventKind // what happened
	Name    string    // declared lock name, if the call came through a [Lock]
	LockIDs []int64   // the call's lock IDs, ascending
	Shared  bool      // shared mode
	Session bool      // a session lock rather than a transaction lock
	// Wait is how long taking the locks took (EventAcquired): from the
	// start of the call to the grant, including getting a connection, BEGIN,
	// the lock statement's round trip and any wait for the lock (WithWait),
	// publishing the fencing token (WithFencing) and the run-once claim
	// (RunOnce). For EventContended it is the time until the refusal or
	// the timeout.
	Wait time.Duration
	// Held is how long the locks were held (EventReleased): from the grant
	// to the end of COMMIT or ROLLBACK (for session locks, the unlock), when
	// the server released them.
	Held time.Duration
	// Err is the error of the call (EventError, EventContended, and
	// EventReleased when fn or COMMIT failed, or fn
	// panicked); nil otherwise.
	Err error
	// Token is the fencing token of a fenced call (WithFencing), from
	// EventAcquired on; 0 otherwise.
	Token int64
}

// SlogObserver returns an [Observer] that logs each event to logger:
// acquired and released at Debug (a release with an error at Warn),
// contended at Info, errors at Error. Give it to a Locker
// ([WithLockerObserver]) or to one call ([WithCallObserver]).
func SlogObserver(logger *slog.Logger) EventFunc {
	return func(e Event) {
		level := slog.LevelDebug
		switch e.Kind {
		case EventContended:
			level = slog.LevelInfo
		case EventError:
			level = slog.LevelError
		case EventReleased:
			if e.Err != nil {
				level = slog.LevelWarn
			}
		}
		ctx := context.Background()
		if !logger.Enabled(ctx, level) {
			return
		}
		attrs := make([]slog.Attr, 0, 7)
		if e.Name != "" {
			attrs = append(attrs, slog.String("lock", e.Name))
		}
		if len(e.LockIDs) == 1 {
			attrs = append(attrs, slog.Int64("lock_id", e.LockIDs[0]))
		} else {
			attrs = append(attrs, slog.Any("lock_ids", e.LockIDs))
		}
		if e.Shared {
			attrs = append(attrs, slog.Bool("shared", true))
		}
		if e.Session {
			attrs = append(attrs, slog.Bool("session", true))
		}
		switch e.Kind {
		case EventAcquired:
			attrs = append(attrs, slog.Duration("wait", e.Wait))
		case EventReleased:
			attrs = append(attrs, slog.Duration("held", e.Held))
		}
		if e.Err != nil {
			attrs = append(attrs, slog.String("error", e.Err.Error()))
		}
		logger.LogAttrs(ctx, level, "pgadvisory: lock "+e.Kind.String(), attrs...)
	}
}
