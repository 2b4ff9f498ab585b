package decl

import (
	"maps"
	"slices"
	"strings"

	"github.com/lockgen/lockgen/keyspace"
)

// Check checks the locks of f against each other and against hist, what
// lockgen emitted last time (nil for none), and resolves the ID of every
// plain lock. It reports duplicate names, Go identifier clashes, ID
// collisions, locks that were emitted before and are now missing, renames
// that cannot keep their ID, and locks whose ID would silently change. f may
// come from a Parse that found problems: Check skips what is invalid.
func Check(f *File, hist History) error {
	c := &checker{errs: errs{file: f.Path}, f: f, hist: hist, byName: map[string]*Lock{}}
	c.unique()
	c.goNames()
	c.retired()
	c.renames()
	c.resolveIDs()
	c.idCollisions()
	c.history()
	return c.list.Err()
}

type checker struct {
	errs
	f       *File
	hist    History
	byName  map[string]*Lock // first declaration of each valid name
	locks   []*Lock          // the locks in byName, in file order
	retire  map[string]Retired
	renamed map[string]*Lock // old name → the lock renamed from it
}

func (c *checker) unique() {
	for _, l := range c.f.Locks {
		if !l.nameOK {
			continue
		}
		if prev := c.byName[l.Name]; prev != nil {
			c.add(l.NamePos, "duplicate lock name %q (first declared at line %d)", l.Name, prev.NamePos.Line)
			continue
		}
		c.byName[l.Name] = l
		c.locks = append(c.locks, l)
	}
}

func (c *checker) goNames() {
	seen := map[string]*Lock{}
	for _, l := range c.locks {
		if l.GoName == RegistryName {
			c.add(l.NamePos, "lock %q becomes the Go identifier %s, which is the name of the generated registry of declared locks; choose another name", l.Name, l.GoName)
			continue
		}
		if prev := seen[l.GoName]; prev != nil {
			c.add(l.NamePos, "lock %q becomes the Go identifier %s, like lock %q (line %d); rename one of them", l.Name, l.GoName, prev.Name, prev.NamePos.Line)
			continue
		}
		seen[l.GoName] = l
	}
}

func (c *checker) retired() {
	c.retire = map[string]Retired{}
	for _, r := range c.f.Retired {
		if prev, dup := c.retire[r.Name]; dup {
			c.add(r.Pos, "%q is retired twice (first at line %d)", r.Name, prev.Pos.Line)
			continue
		}
		c.retire[r.Name] = r
		if l := c.byName[r.Name]; l != nil {
			c.add(r.Pos, "lock %q is retired but still declared (line %d); remove one of them", r.Name, l.NamePos.Line)
		}
	}
}

func (c *checker) renames() {
	c.renamed = map[string]*Lock{}
	for _, l := range c.f.Locks {
		old := l.RenamedFrom
		if old == "" {
			continue
		}
		switch prev := c.renamed[old]; {
		case old == l.Name:
			c.add(l.RenamedFromPos, "lock %q is renamed_from itself", l.Name)
			continue
		case prev != nil:
			c.add(l.RenamedFromPos, "locks %q (line %d) and %q are both renamed_from %q; only one lock can take its place", prev.Name, prev.NamePos.Line, l.Name, old)
			continue
		}
		c.renamed[old] = l
		if d := c.byName[old]; d != nil {
			c.add(l.RenamedFromPos, "lock %q is renamed_from %q, but %q is still declared (line %d); remove the old declaration", l.Name, old, old, d.NamePos.Line)
		}
		if _, ok := c.retire[old]; ok {
			c.add(l.RenamedFromPos, "lock %q is renamed_from %q, which is also retired; a lock is either renamed or retired", l.Name, old)
		}
		// (A parameterized lock with keep_id was refused by Parse already.)
		if e, ok := c.hist[old]; ok && l.OnRename == KeepID && l.Plain() && !e.Plain() {
			c.add(l.OnRenamePos, "on_rename: keep_id needs the old lock to be plain, but %q had parameters %s: each parameter value had its own ID and there is no single ID to keep; use on_rename: new_id", old, typeList(e.Params))
		}
	}
}

// resolveIDs sets the ID of every plain lock: its pin, the ID it keeps from
// the name it was renamed from, or the ID derived from its name.
func (c *checker) resolveIDs() {
	for _, l := range c.f.Locks {
		if !l.nameOK || !l.Plain() {
			continue
		}
		switch {
		case l.HasPin:
			l.ID, l.Pinned = l.Pin, true
		case l.OnRename == KeepID && l.RenamedFrom != "":
			l.ID, l.Pinned = c.keptID(l), true
		default:
			l.ID, l.Pinned = keyspace.ID(l.Name), false
		}
	}
}

// keptID is the ID a keep_id rename keeps: the old lock's emitted ID; once
// the rename was generated, the lock's own emitted ID (the old one, kept);
// without history, the ID derived from the old name.
func (c *checker) keptID(l *Lock) int64 {
	if e, ok := c.hist[l.RenamedFrom]; ok && e.Plain() {
		return e.ID
	}
	if e, ok := c.hist[l.Name]; ok && e.Plain() {
		return e.ID
	}
	return keyspace.ID(l.RenamedFrom)
}

func (c *checker) idCollisions() {
	seen := map[int64]*Lock{}
	for _, l := range c.locks {
		if !l.Plain() {
			continue
		}
		if prev := seen[l.ID]; prev != nil {
			at := l.NamePos
			if l.HasPin {
				at = l.PinPos
			}
			c.add(at, "lock %q has ID %d, the same as lock %q (line %d): they would exclude each other; change the pin or the name", l.Name, l.ID, prev.Name, prev.NamePos.Line)
			continue
		}
		seen[l.ID] = l
	}
}

// history compares the declarations with what was emitted last time.
func (c *checker) history() {
	for _, name := range slices.Sorted(maps.Keys(c.hist)) {
		old := c.hist[name]
		if l := c.byName[name]; l != nil {
			c.changed(l, old)
			continue
		}
		if _, ok := c.retire[name]; ok {
			continue
		}
		if _, ok := c.renamed[name]; ok {
			continue
		}
		if old.Plain() {
			c.add(c.f.locksPos, "lock %q was emitted before and is now missing: if it was renamed, declare `renamed_from: %s` on the new lock with `on_rename: keep_id` (keeps the old ID, so old and new replicas exclude each other during a rolling deploy) or `on_rename: new_id` (accept a new ID; old and new replicas can run at once); if it was removed, list it under top-level `retired:`", name, name)
		} else {
			c.add(c.f.locksPos, "lock %q, with parameters %s, was emitted before and is now missing: if it was renamed, declare `renamed_from: %s` with `on_rename: new_id` on the new lock (keep_id cannot apply: each parameter value had its own ID derived from the old name, so old and new replicas can run at once during a rolling deploy); if it was removed, list it under top-level `retired:`", name, typeList(old.Params), name)
		}
	}
}

// changed reports a declared lock whose IDs differ from what was emitted.
func (c *checker) changed(l *Lock, old Emitted) {
	if !l.paramsOK || l.OnIDChange == NewID {
		return
	}
	const tail = "during a rolling deploy old and new replicas would take different locks and run at once; if that is intended, declare `on_id_change: new_id` on the lock"
	switch {
	case old.Plain() && l.Plain():
		if old.ID != l.ID {
			at := l.NamePos
			if l.HasPin {
				at = l.PinPos
			}
			c.add(at, "lock %q was emitted with ID %d and would now get ID %d: %s", l.Name, old.ID, l.ID, tail)
		}
	case !slices.Equal(old.Params, l.ParamTypes()):
		c.add(l.NamePos, "lock %q was emitted with %s and now has %s, which changes its IDs: %s", l.Name, signature(old.Params), signature(l.ParamTypes()), tail)
	}
}

func signature(ts []keyspace.ParamType) string {
	if len(ts) == 0 {
		return "no parameters"
	}
	return "parameters " + typeList(ts)
}

func typeList(ts []keyspace.ParamType) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = string(t)
	}
	return "(" + strings.Join(s, ", ") + ")"
}
