package decl

import (
	"path/filepath"
	"strings"
	"time"

	"github.com/lockgen/lockgen/keyspace"
)

// Version is the declarations format version this package reads.
const Version = "1"

// RegistryName is the Go name of the generated registry of declared locks;
// no lock may take it.
const RegistryName = "Declared"

// File is a parsed declarations file.
type File struct {
	Path    string // as given, e.g. "locks.yaml"; used in error positions
	Version string
	Package string // Go package name of the output
	Output  string // output file, slash-separated, relative to Path's directory
	Locks   []*Lock
	Retired []Retired

	locksPos Pos // the "locks" key (or the top of the file): where missing locks are reported
}

// OutputPath is the output file's path, joined to the directory of Path.
func (f *File) OutputPath() string {
	return filepath.Join(filepath.Dir(f.Path), filepath.FromSlash(f.Output))
}

// Lookup returns the declared lock named name, or nil.
func (f *File) Lookup(name string) *Lock {
	for _, l := range f.Locks {
		if l.Name == name {
			return l
		}
	}
	return nil
}

// OnRename says what a renamed lock does with the old name's ID.
type OnRename string

// The values of on_rename.
const (
	KeepID OnRename = "keep_id" // keep the old ID: old and new replicas exclude each other
	NewID  OnRename = "new_id"  // accept a new ID
)

// MaxLimit is the largest limit: a lock may declare, pgadvisory.MaxLimit.
const MaxLimit = 1024

// Lock is one declared lock.
type Lock struct {
	Name   string
	Doc    string
	Params []Param // empty for a plain lock
	GoName string  // exported Go identifier, e.g. "BillingInvoice"

	HasPin bool  // id: pins the plain lock's ID
	Pin    int64 // the pinned ID

	Shared      bool          // shared: true
	Wait        bool          // wait: given, taken with pgadvisory.WithWait(WaitTimeout)
	WaitTimeout time.Duration // with Wait: wait:'s duration, 0 means until the context is done
	Fencing     bool          // fencing: true, taken with pgadvisory.WithFencing()
	Limit       int           // limit: N, at most N holders at once (pgadvisory.WithLimit); 0 without

	RenamedFrom string   // renamed_from: the old name
	OnRename    OnRename // on_rename
	OnIDChange  OnRename // on_id_change: only NewID, accepts a changed ID

	// Set by Check for plain locks.
	ID     int64 // the lock's ID
	Pinned bool  // ID is not derived from Name (id: or on_rename: keep_id)

	Pos            Pos // the lock's entry in the list
	NamePos        Pos
	PinPos         Pos
	RenamedFromPos Pos
	OnRenamePos    Pos

	nameOK   bool // Name passed keyspace.ValidateName
	paramsOK bool // every parameter is valid
}

// Plain reports whether the lock has no parameters (one fixed ID).
func (l *Lock) Plain() bool { return len(l.Params) == 0 }

// ParamTypes returns the types of l's parameters in order.
func (l *Lock) ParamTypes() []keyspace.ParamType {
	if len(l.Params) == 0 {
		return nil
	}
	ts := make([]keyspace.ParamType, len(l.Params))
	for i, p := range l.Params {
		ts[i] = p.Type
	}
	return ts
}

// ParamList returns l's parameters as "tenant_id int64, region string", as
// lockgen's messages and listings show them; "" for a plain lock.
func (l *Lock) ParamList() string {
	ps := make([]string, len(l.Params))
	for i, p := range l.Params {
		ps[i] = p.Name + " " + string(p.Type)
	}
	return strings.Join(ps, ", ")
}

// Param is one parameter of a parameterized lock.
type Param struct {
	Name    string // lower_snake, e.g. "tenant_id"
	Type    keyspace.ParamType
	GoName  string // lowerCamel Go identifier, e.g. "tenantID"
	NamePos Pos
	TypePos Pos
}

// Retired names a lock that was emitted before and is now removed on purpose.
type Retired struct {
	Name string
	Pos  Pos
}

// Emitted is what lockgen emitted for one lock last time: its ID for a plain
// lock, or its parameter types for a parameterized one.
type Emitted struct {
	Name   string
	ID     int64                // plain locks
	Params []keyspace.ParamType // nil for a plain lock
}

// Plain reports whether the emitted lock had no parameters.
func (e Emitted) Plain() bool { return len(e.Params) == 0 }

// History is what lockgen emitted last time, by lock name. It is read back
// from the manifest at the end of the generated file; nil means no history.
type History map[string]Emitted
