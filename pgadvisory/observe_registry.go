package pgadvisory

import (
	"maps"
	"sync"
	"sync/atomic"
)

// SetObserver makes o observe every call of the package-level functions
// and Lock methods (deprecated), so that metrics and traces need no option
// at each call site; nil removes it. A Locker made by [New] does not read
// it: its observer is [WithLockerObserver]'s.
//
// It runs in addition to a call's own observer ([WithObserver],
// [WithCallObserver], or one declared with [Lock.With]). Locks of a set
// given to [SetObserverFor] are observed by that set's observer instead.
// Calls that already started keep the observers they started with.
//
// Deprecated: give the observer to the Locker: New(d, WithLockerObserver(o)).
func SetObserver(o Observer) {
	if o == nil {
		processObserver.Store(nil)
		return
	}
	processObserver.Store(&o)
}

// SetObserverFor makes o observe every call of the package-level
// functions and Lock methods (deprecated) on the locks decls declares
// (such as the Declared slice that cmd/lockgen generates next to the lock
// values), in place of [SetObserver]'s; nil removes them. A Locker made by
// [New] does not read it: see [WithLockSetObserver]. The calls are matched by the lock's declared name, so a
// parameterized lock is observed for every parameter value; calls by raw
// ID, without a [Lock], are not matched. A name given again later takes the
// later observer.
//
//	pgadvisory.SetObserverFor(locks.Declared, observer)
//
// Like SetObserver, it runs in addition to a call's own observer.
//
// Deprecated: give the observer to the Locker: New(d,
// WithLockSetObserver(decls, o)).
func SetObserverFor(decls []Declared, o Observer) {
	lockSetMu.Lock()
	defer lockSetMu.Unlock()
	var next map[string]Observer
	if cur := lockSetObservers.Load(); cur != nil {
		next = maps.Clone(*cur)
	} else {
		next = make(map[string]Observer, len(decls))
	}
	for _, d := range decls {
		if o == nil {
			delete(next, d.Name)
		} else {
			next[d.Name] = o
		}
	}
	if len(next) == 0 {
		lockSetObservers.Store(nil)
		return
	}
	lockSetObservers.Store(&next)
}

// The observers of the package Lockers (package_lockers.go): package-level
// state that only the deprecated functions read.
var (
	// processObserver is SetObserver's observer, nil when none is set.
	processObserver atomic.Pointer[Observer]
	// lockSetObservers maps declared names to SetObserverFor's observers;
	// nil when none is set. The map is never changed once stored (a
	// change stores a copy), so calls read it without a lock.
	lockSetObservers atomic.Pointer[map[string]Observer]
	// lockSetMu serializes SetObserverFor's copy-and-store.
	lockSetMu sync.Mutex
)

// packageObserver is the observer of a package Locker's call on the lock
// name: SetObserverFor's for name, else SetObserver's, or nil.
func packageObserver(name string) Observer {
	if name != "" {
		if m := lockSetObservers.Load(); m != nil {
			if o, ok := (*m)[name]; ok {
				return o
			}
		}
	}
	if p := processObserver.Load(); p != nil {
		return *p
	}
	return nil
}
