package pgadvisory

import (
	"context"
	"errors"
	"time"
)

// Observer watches whole calls, from start to end, for metrics and traces
// (the module github.com/lockgen/lockgen/otel is one). Where [WithObserver]'s
// function sees events one by one, an Observer is told when a call starts,
// with the caller's context, and keeps what it needs for that call (a span,
// a start time) in the [CallObserver] it returns.
//
// Observers are set per call or per lock ([WithCallObserver], [Lock.With]),
// or on the Locker: for all its calls ([WithLockerObserver]) or for the
// locks of a lock set ([WithLockSetObserver]).
// Calls refused for a bad argument or option, before anything is sent, are
// not observed.
type Observer interface {
	// StartCall is called once when a call starts, on the calling
	// goroutine, before anything is sent. The context it returns is the one
	// the call uses from then on: for its statements (so a driver's tracer
	// sees it) and, for a session lock, as the parent of fn's context. It
	// must be ctx or derived from it (a span added, say); nil means ctx.
	// The CallObserver receives the call's events and its end; nil means
	// the observer does not follow this call.
	StartCall(ctx context.Context, call Call) (context.Context, CallObserver)
}

// CallObserver follows one call. Its methods run synchronously, mostly on
// the calling goroutine (a session lock's loss is reported from its
// watcher's goroutine, before the call ends), one at a time, and must be
// quick: the call waits for them.
type CallObserver interface {
	// Event receives the call's events in order (see [EventKind]).
	Event(Event)
	// EndCall is called exactly once, when the call returns (or fn's
	// panic leaves it), after the last event.
	EndCall(CallEnd)
}

// CallKind says which entry family a call belongs to.
type CallKind int

// The entry families. Each covers its database/sql and pgx forms, the
// [Lock] methods and the repository forms.
const (
	CallExclusive      CallKind = iota + 1 // RunExclusive, RunExclusiveRepo
	CallSession                            // RunSession
	CallOnce                               // RunOnce
	CallFenced                             // RunFenced: a fenced write, which takes no lock
	CallLead                               // Lead, Campaign: a leadership
	CallLockTx                             // LockTx: a lock in the caller's transaction
	CallLimited                            // RunLimited: a slot of a limited lock, in a transaction
	CallSessionLimited                     // RunSessionLimited: a slot of a limited lock, on a session
)

// String returns the family's name as metrics and spans carry it:
// "run_exclusive", "run_session", "run_once", "run_fenced", "lead",
// "lock_tx", "run_limited" or "run_session_limited".
func (k CallKind) String() string {
	switch k {
	case CallExclusive:
		return "run_exclusive"
	case CallSession:
		return "run_session"
	case CallOnce:
		return "run_once"
	case CallFenced:
		return "run_fenced"
	case CallLead:
		return "lead"
	case CallLockTx:
		return "lock_tx"
	case CallLimited:
		return "run_limited"
	case CallSessionLimited:
		return "run_session_limited"
	}
	return "unknown"
}

// Call describes a call as it starts (see [Observer]). LockIDs is the
// call's own slice, as in [Event]: read it, do not change it.
type Call struct {
	Kind    CallKind
	Name    string  // declared lock name, if the call came through a [Lock]
	LockIDs []int64 // the call's lock IDs, ascending; none for RunFenced without a Lock
	Shared  bool    // WithShared
	Fencing bool    // WithFencing: the call issues a fencing token
	Window  string  // RunOnce: the window key
	Token   int64   // RunFenced: the token the write carries
}

// Outcome is what became of a call's attempt to hold its locks, as
// [CallEnd] reports it. It is about the locks, not about fn: a call whose
// fn failed still acquired its locks.
type Outcome int

// The outcomes. The mapping from the call's error uses errors.Is on the
// package's sentinels, never the error text.
const (
	// OutcomeNone: the call takes no lock (RunFenced).
	OutcomeNone Outcome = iota
	// OutcomeAcquired: the locks were granted and released by the call
	// itself, whatever fn returned. RunOnce finding its window done is
	// acquired too: the lock was granted and the ledger, read under it,
	// said the work was done (CallEnd.AlreadyDone, Err is ErrAlreadyDone).
	OutcomeAcquired
	// OutcomeLocked: another session held a lock (ErrLocked); fn was not
	// called.
	OutcomeLocked
	// OutcomeTimeout: the wait for the locks, or for the fencing publish,
	// timed out (ErrLockTimeout); fn was not called.
	OutcomeTimeout
	// OutcomeLost: the locks were granted, then lost before the call could
	// release them: a session lock's connection died or its lock vanished
	// (ErrLockLost), or a transaction lock's connection broke while fn ran
	// or during COMMIT (ErrConnLost, ErrCommitUnknown).
	OutcomeLost
	// OutcomeError: the call failed before its locks were granted: no
	// connection, a standby, a pooler, a canceled context, a missing schema,
	// a fencing publish refused, and so on.
	OutcomeError
)

// String returns the outcome as metrics carry it: "acquired", "locked",
// "timeout", "lost", "error", or "" for OutcomeNone.
func (o Outcome) String() string {
	switch o {
	case OutcomeAcquired:
		return "acquired"
	case OutcomeLocked:
		return "locked"
	case OutcomeTimeout:
		return "timeout"
	case OutcomeLost:
		return "lost"
	case OutcomeError:
		return "error"
	}
	return ""
}

// CallEnd is what a [CallObserver] learns when its call returns.
type CallEnd struct {
	Outcome Outcome
	// Err is the call's error, as the caller gets it (nil on success).
	Err error
	// Wait is the time from the call's start to the answer: the grant
	// (with WithFencing and RunOnce, after the publish and the ledger check),
	// the refusal (ErrLocked, ErrAlreadyDone) or the timeout; 0 when no
	// answer came (OutcomeError, OutcomeNone).
	Wait time.Duration
	// Held is the time from the grant to the end of COMMIT or ROLLBACK, or
	// for a session lock the unlock: how long the locks were held. 0 when
	// they were never granted.
	Held time.Duration
	// AlreadyDone reports that RunOnce found its window done and did not
	// call fn.
	AlreadyDone bool
	// Rejection is ErrStaleToken, ErrMissingToken or ErrTruncateRefused
	// when a fencing guard refused this call's own statement: a fenced
	// write's, a statement of fn's transaction, or the publish of the
	// call's token. It is nil when the error came from another lockgen call
	// that fn made and returned: that call reported it to its observers.
	Rejection error
}

// WithCallObserver makes o observe the call, in addition to the observer
// its Locker sets for it ([WithLockerObserver], [WithLockSetObserver]). It
// takes the place of [WithObserver] given before it (one call-level observer
// per call; a later one wins, like every option), and a nil o removes it.
func WithCallObserver(o Observer) Option {
	return optionFunc(func(c *callState) { c.mark(optObserver); c.observer = o })
}

// ObserverFunc turns an event function into an [Observer] (nil stays nil).
// The function receives every event of the calls, as [EventFunc] does.
func ObserverFunc(observe func(Event)) Observer {
	if observe == nil {
		return nil
	}
	return EventFunc(observe)
}

// EventFunc is an event function as an [Observer]: it receives every event
// of every call it observes, and keeps no per-call state. [SlogObserver]
// returns one. A nil EventFunc must not be used as an Observer.
type EventFunc func(Event)

// StartCall follows every call as f itself.
func (f EventFunc) StartCall(ctx context.Context, _ Call) (context.Context, CallObserver) {
	return ctx, f
}

// Event calls f.
func (f EventFunc) Event(e Event) { f(e) }

// EndCall does nothing: the events say it all.
func (EventFunc) EndCall(CallEnd) {}

// observation is a call's observers and what they are told at the end.
type observation struct {
	scoped, registered CallObserver
	kind               CallKind
	start              time.Time
	wait, held         time.Duration
	granted, answered  bool
	alreadyDone        bool
	token              int64 // fenced calls: the token, once issued
}

// startCall starts observing the call of kind and reports whether anyone
// observes it; *ctx becomes the context the observers return.
func (c *callState) startCall(ctx *context.Context, kind CallKind, window string, token int64) bool {
	var registered Observer
	if s := c.locker; s != nil {
		registered = s.observerFor(c.name)
	}
	if c.observer == nil && registered == nil {
		return false
	}
	call := Call{Kind: kind, Name: c.name, LockIDs: c.ids, Shared: c.shared, Fencing: c.fencing, Window: window, Token: token}
	o := &observation{kind: kind, start: time.Now()}
	if c.observer != nil {
		*ctx, o.scoped = startOne(*ctx, c.observer, call)
	}
	if registered != nil {
		*ctx, o.registered = startOne(*ctx, registered, call)
	}
	if o.scoped == nil && o.registered == nil {
		return false
	}
	c.obs = o
	return true
}

// observerFor is the observer s sets for a call on the lock name: the
// lock set's ([WithLockSetObserver]) or else the Locker's
// ([WithLockerObserver]); for a package Locker (deprecated functions),
// SetObserverFor's or else SetObserver's.
func (s *lockerState) observerFor(name string) Observer {
	if s.legacy {
		return packageObserver(name)
	}
	if o, ok := s.lockSet[name]; ok && name != "" {
		return o
	}
	return s.observer
}

// startOne starts obs on call, keeping ctx when obs returns none.
func startOne(ctx context.Context, obs Observer, call Call) (context.Context, CallObserver) {
	octx, co := obs.StartCall(ctx, call)
	if octx == nil {
		octx = ctx
	}
	return octx, co
}

// emit reports e, completed with the call's locks, to the call's observers.
func (c *callState) emit(e Event) {
	o := c.obs
	if o == nil {
		return
	}
	e.Name, e.LockIDs, e.Shared, e.Session = c.name, c.ids, c.shared, c.session
	if e.Token != 0 {
		o.token = e.Token
	} else {
		e.Token = o.token
	}
	switch e.Kind {
	case EventAcquired:
		o.granted, o.answered, o.wait = true, true, e.Wait
	case EventContended:
		e.Wait = time.Since(o.start)
		o.answered, o.wait = true, e.Wait
		o.alreadyDone = errors.Is(e.Err, ErrAlreadyDone)
	case EventReleased:
		o.held = e.Held
	}
	if o.scoped != nil {
		o.scoped.Event(e)
	}
	if o.registered != nil {
		o.registered.Event(e)
	}
}

// granted reports the grant, as it happens, with the time it took (from
// the call's start) and a fenced call's token: the one event a call
// reports before it ends, apart from a session lock's loss, which its
// watcher reports when it finds it.
func (c *callState) granted(wait time.Duration, token int64) {
	if c.obs != nil {
		c.emit(Event{Kind: EventAcquired, Wait: wait, Token: token})
	}
}

// emitEnd reports the event that ends a call that returned err: for a
// call that was granted its locks the release (EventReleased, after an
// EventError when the release found them lost), for one that was not the
// answer (EventContended: ErrLocked, ErrAlreadyDone, ErrLockTimeout) or
// the failed step (EventError). A fenced write reports no event, and a
// lock taken in the caller's transaction (LockTx) no release: the
// caller's transaction holds it.
func (c *callState) emitEnd(err error) {
	o := c.obs
	switch {
	case o.kind == CallFenced:
	case o.granted:
		if o.kind == CallLockTx {
			return
		}
		if e, ok := err.(*Error); ok && e.Op == OpRelease && e.Kind == ErrLockLost {
			c.emit(Event{Kind: EventError, Err: err})
		}
		c.emit(Event{Kind: EventReleased, Held: o.held, Err: err})
	case err == nil:
	case errors.Is(err, ErrLocked), errors.Is(err, ErrAlreadyDone), errors.Is(err, ErrLockTimeout):
		c.emit(Event{Kind: EventContended, Err: err})
	default:
		c.emit(Event{Kind: EventError, Err: err})
	}
}

// errFnPanicked is the error the observers see for a call whose fn panicked
// (the panic itself goes on to the caller).
var errFnPanicked = errors.New("pgadvisory: fn panicked")

// endCall tells the call's observers that it returned err: the event that
// ends it (emitEnd), then EndCall.
func (c *callState) endCall(err error) {
	c.emitEnd(err)
	o := c.obs
	end := CallEnd{Outcome: c.outcome(err), Err: err, Held: o.held, AlreadyDone: o.alreadyDone, Rejection: ownRejection(err)}
	if o.answered {
		end.Wait = o.wait
	}
	if o.scoped != nil {
		o.scoped.EndCall(end)
	}
	if o.registered != nil {
		o.registered.EndCall(end)
	}
}

// outcome maps the call's error to its outcome (see Outcome).
func (c *callState) outcome(err error) Outcome {
	o := c.obs
	switch {
	case o.kind == CallFenced:
		return OutcomeNone
	case o.alreadyDone:
		return OutcomeAcquired
	case o.granted:
		switch ownKind(err) {
		case ErrLockLost, ErrConnLost, ErrCommitUnknown:
			return OutcomeLost
		}
		return OutcomeAcquired
	case errors.Is(err, ErrLockTimeout):
		return OutcomeTimeout
	case errors.Is(err, ErrLocked):
		return OutcomeLocked
	case err == nil:
		return OutcomeAcquired
	}
	return OutcomeError
}

// ownKind is the Kind of the *Error this call made, or nil when err is none
// or its cause is another lockgen call's *Error (which fn returned): that
// call's outcome is not this one's. A lost session lock is always the
// call's own: only its watcher or release makes ErrLockLost the Kind.
func ownKind(err error) error {
	var e *Error
	if !errors.As(err, &e) {
		return nil
	}
	if e.Kind == ErrLockLost {
		return e.Kind
	}
	var inner *Error
	if e.Err != nil && errors.As(e.Err, &inner) {
		return nil
	}
	return e.Kind
}

// ownRejection is the fencing kind of err when a fencing guard refused the
// call's own statement (see CallEnd.Rejection).
func ownRejection(err error) error {
	switch kind := ownKind(err); kind {
	case ErrStaleToken, ErrMissingToken, ErrTruncateRefused:
		return kind
	}
	return nil
}

// observed runs body as the call c of kind, between its observers'
// StartCall and EndCall (also when fn panics). Unobserved, it only runs
// body.
func (c *callState) observed(ctx context.Context, kind CallKind, window string, token int64, body func(context.Context) error) error {
	if !c.startCall(&ctx, kind, window, token) {
		return body(ctx)
	}
	ended := false
	defer func() {
		if !ended {
			c.endCall(errFnPanicked)
		}
	}()
	err := body(ctx)
	ended = true
	c.endCall(err)
	return err
}
