package pgadvisory

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// LockerOption sets what belongs to a [Locker]'s pool, for all of its
// calls: how many connections its session locks share, a session-mode
// pooler, the defaults of the session-lock checks, its observer and the
// holder name. [New] checks them once and refuses a bad one with
// [ErrInvalidArgument]. What belongs to one call is an [Option].
type LockerOption func(*lockerState) error

// WithSessionConns sets how many server connections the Locker's session
// locks ([Locker.RunSession], [Locker.Lead]) share: at most n, 2 by
// default. A shared connection is taken from the pool when a lock needs it
// and given back as soon as it holds no lock; locks are spread over the
// connections, least-loaded first, and statements on one run one at a
// time. n = 0 gives every call a connection of its own. A waiting call
// ([WithWait], [Locker.Lead], [Locker.Campaign]) waits in lockgen's queue
// without a connection and takes its locks on a shared connection (on a
// connection of its own with n = 0) when its turn comes. Negative n is
// refused.
func WithSessionConns(n int) LockerOption {
	return func(s *lockerState) error {
		if n < 0 {
			return fmt.Errorf("WithSessionConns: negative number of connections %d", n)
		}
		s.sessionConns = n
		return nil
	}
}

// WithSessionModePooler declares that the pool's connections go through a
// pooler in session mode (PgBouncer with pool_mode=session), for every
// session lock of the Locker: see [WithSessionPooler], its per-call form.
func WithSessionModePooler() LockerOption {
	return func(s *lockerState) error { s.sessionPooler = true; return nil }
}

// WithDefaultCheckInterval sets the Locker's default for
// [WithCheckInterval] (1s without it); a call's WithCheckInterval wins.
func WithDefaultCheckInterval(d time.Duration) LockerOption {
	return func(s *lockerState) error {
		if d <= 0 {
			return fmt.Errorf("WithDefaultCheckInterval: interval must be positive, got %v", d)
		}
		s.interval = d
		return nil
	}
}

// WithDefaultCheckTimeout sets the Locker's default for
// [WithCheckTimeout] (5s without it); a call's WithCheckTimeout wins.
func WithDefaultCheckTimeout(d time.Duration) LockerOption {
	return func(s *lockerState) error {
		if d <= 0 {
			return fmt.Errorf("WithDefaultCheckTimeout: timeout must be positive, got %v", d)
		}
		s.checkTimeout = d
		return nil
	}
}

// WithDefaultHolder sets the Locker's default for [WithHolder], the name
// of the caller in the run-once ledger and the leader table
// ("<hostname>/<pid>" without it); a call's WithHolder wins.
func WithDefaultHolder(holder string) LockerOption {
	return func(s *lockerState) error {
		if holder == "" || !utf8.ValidString(holder) || strings.IndexByte(holder, 0) >= 0 {
			return fmt.Errorf("WithDefaultHolder: %q is not non-empty valid UTF-8 text without NUL bytes", holder)
		}
		s.holder = holder
		return nil
	}
}

// WithLockerObserver makes o observe every call of the Locker (see
// [Observer]; [SlogObserver] is one). An observer set for a lock set
// ([WithLockSetObserver]) takes its place for those locks, and a call's own
// ([WithObserver], [WithCallObserver]) runs in addition. A nil o is
// refused.
func WithLockerObserver(o Observer) LockerOption {
	return func(s *lockerState) error {
		if o == nil {
			return fmt.Errorf("WithLockerObserver: nil Observer")
		}
		s.observer = o
		return nil
	}
}

// WithLockSetObserver makes o observe the Locker's calls on the locks decls
// declares (such as the Declared slice that cmd/lockgen generates next to
// the lock values), in place of the Locker's observer
// ([WithLockerObserver]). The calls are matched by the lock's declared
// name, so a parameterized lock is observed for every parameter value;
// calls by raw ID ([ID]) are not matched. A name given again takes the
// later observer. A nil o is refused.
func WithLockSetObserver(decls []Declared, o Observer) LockerOption {
	return func(s *lockerState) error {
		if o == nil {
			return fmt.Errorf("WithLockSetObserver: nil Observer")
		}
		if s.lockSet == nil {
			s.lockSet = make(map[string]Observer, len(decls))
		}
		for _, d := range decls {
			s.lockSet[d.Name] = o
		}
		return nil
	}
}
