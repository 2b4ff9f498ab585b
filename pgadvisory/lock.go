package pgadvisory

import "strconv"

// Lock is a named lock; generated code (cmd/lockgen) produces values of this
// type, and [ID] makes one of a raw key. A [Locker]'s methods take it; its
// name appears in errors and observer events. (Its methods named after the
// Locker's are deprecated.)
type Lock struct {
	Name string // declared name, e.g. "reports.daily_email"
	ID   int64  // advisory-lock key: keyspace.ID(Name), or the ID pinned in locks.yaml

	// defaults are options declared with the lock (see With), applied
	// before the options of each call. A pointer keeps Lock comparable.
	defaults *[]Option
}

// With returns a copy of l whose calls apply opts before the options given
// to each call, so call options win. Generated code uses it for per-lock
// settings declared in locks.yaml (shared mode, waiting):
//
//	var ReportsRebuild = pgadvisory.Lock{Name: "reports.rebuild", ID: 42}.With(pgadvisory.WithWait(5 * time.Second))
func (l Lock) With(opts ...Option) Lock {
	merged := make([]Option, 0, len(opts)+2)
	if l.defaults != nil {
		merged = append(merged, *l.defaults...)
	}
	merged = append(merged, opts...)
	l.defaults = &merged
	return l
}

// Limit returns the limit the lock declares with [WithLimit] (see
// [Lock.With]; generated code declares it for limit: in locks.yaml), or 0
// when it declares none. Test helpers use it: lockgentest.Hold takes every
// slot of a limited lock.
func (l Lock) Limit() int {
	if l.defaults == nil {
		return 0
	}
	c := &callState{}
	for _, o := range *l.defaults {
		o.apply(c)
	}
	if c.lim == nil || c.err != nil {
		return 0
	}
	return c.lim.declared
}

// String returns the lock's name and ID, e.g.
// "reports.daily_email(-6078806957557529815)", or the ID alone for a lock
// without a name ([ID]).
func (l Lock) String() string {
	if l.Name == "" {
		return strconv.FormatInt(l.ID, 10)
	}
	return l.Name + "(" + strconv.FormatInt(l.ID, 10) + ")"
}

// named prepends the lock's name and declared defaults to a call's options.
func (l Lock) named(opts []Option) []Option {
	if l.Name == "" && l.defaults == nil {
		return opts
	}
	n := len(opts) + 1
	if l.defaults != nil {
		n += len(*l.defaults) + 2
	}
	all := make([]Option, 0, n)
	all = append(all, withName(l.Name))
	if l.defaults != nil {
		all = append(all, beginDeclared)
		all = append(all, *l.defaults...)
		all = append(all, endDeclared)
	}
	return append(all, opts...)
}

// ID is a raw advisory-lock key as a [Lock], without a name: for keys that
// are not declared in locks.yaml.
func ID(id int64) Lock { return Lock{ID: id} }
