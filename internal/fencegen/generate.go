package fencegen

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/lockgen/lockgen/internal/decl"
)

// Request is one run of lockgen fence.
type Request struct {
	Lock    *decl.Lock // the declared lock, checked by decl.Check
	Table   string     // schema.table
	Columns string     // comma-separated parameter columns; "" for a plain lock
	Policy  string     // strict or permissive
	Dir     string     // the goose migrations directory; it must exist
	Version string     // the version to use; "" picks the next one (see NextVersion)
	Now     time.Time  // the clock for timestamp-style versions
	Upgrade bool       // move a table fenced in the first layout to the current one
}

// Generate checks r, writes the migration into r.Dir and returns its path.
// Errors about the request itself wrap [ErrInvalid]; an existing file is
// never replaced, and a table that a migration in r.Dir fences already is
// refused, naming that file (with Upgrade, a table without a first-layout
// fence migration is).
func Generate(r Request) (string, error) {
	s, err := NewSpec(r.Lock, r.Table, r.Columns, r.Policy)
	if err != nil {
		return "", err
	}
	s.Upgrade = r.Upgrade
	if fi, err := os.Stat(r.Dir); err != nil {
		return "", fmt.Errorf("fencegen: the migrations directory: %w", err)
	} else if !fi.IsDir() {
		return "", fmt.Errorf("fencegen: the migrations directory %s is not a directory", r.Dir)
	}
	if err := checkExisting(r.Dir, s); err != nil {
		return "", err
	}
	version := r.Version
	if version == "" {
		version, err = NextVersion(r.Dir, r.Now)
	} else {
		err = CheckVersion(r.Dir, version)
	}
	if err != nil {
		return "", err
	}
	migration := Emit(s)
	if s.Upgrade {
		migration = EmitUpgrade(s)
	}
	path := filepath.Join(r.Dir, FileName(version, s))
	if err := WriteNew(path, migration); err != nil {
		return "", err
	}
	return path, nil
}
