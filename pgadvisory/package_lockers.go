package pgadvisory

import (
	"runtime"
	"sync"
	"weak"
)

// The package-level functions and the Lock methods (deprecated) run on a
// package Locker: one per pool, made on the pool's first call and kept in
// packageLockers, found by the pool's pointer held weakly, so that the
// registry does not keep a pool alive and a collected pool's state goes
// with it. This registry and the observers of SetObserver and
// SetObserverFor (observe_registry.go) exist only for the deprecated
// functions: a Locker made by New owns all of its state and reads none of
// them.

// packageLockers maps weak.Pointer[sql.DB] and weak.Pointer[pgxpool.Pool]
// to the pool's package Locker state.
var packageLockers sync.Map

// packageStateOf is the state of pool's package Locker, made on first use.
// A nil pool gets a state of its own, used only by calls that refuse it.
func packageStateOf[P any](pool *P) *lockerState {
	if pool == nil {
		return newPackageState()
	}
	key := weak.Make(pool)
	if s, ok := packageLockers.Load(key); ok {
		return s.(*lockerState)
	}
	s, loaded := packageLockers.LoadOrStore(key, newPackageState())
	if !loaded {
		runtime.AddCleanup(pool, func(key weak.Pointer[P]) { packageLockers.Delete(key) }, key)
	}
	return s.(*lockerState)
}

// newPackageState is a package Locker's state: the defaults, and the
// package's observers (legacy).
func newPackageState() *lockerState {
	s := newLockerState()
	s.legacy = true
	return s
}

// packageToken is the token of the fenced lock transaction key of any
// package Locker (FencingToken, deprecated, which has no pool to go by).
func packageToken(key any) (token int64, ok bool) {
	packageLockers.Range(func(_, s any) bool {
		token, ok = s.(*lockerState).token(key)
		return !ok
	})
	return token, ok
}
