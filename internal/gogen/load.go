package gogen

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/lockgen/lockgen/internal/decl"
)

// Result is a checked declarations file with its generated Go source.
type Result struct {
	File    *decl.File
	OutPath string // output path, relative to the working directory like File.Path
	Src     []byte // the generated source
	Current []byte // the output file's current contents; nil when Exists is false
	Exists  bool   // the output file exists
}

// Fresh reports whether the output file exists and equals the generated source.
func (r *Result) Fresh() bool {
	return r.Exists && string(r.Current) == string(r.Src)
}

// Load reads the declarations file at path and the output it names (for the
// manifest of what was emitted last time), then checks and generates. Every
// problem in the files comes back together in one decl.ErrorList; other
// errors (unreadable files) are returned as they are.
func Load(path string) (*Result, error) {
	return LoadWith(path, LoadOptions{})
}

// LoadOptions adjust [LoadWith].
type LoadOptions struct {
	// ForgetHistory ignores what the previous output emitted: renames,
	// removals and ID changes since then go unchecked. It exists to recover
	// from a damaged output file.
	ForgetHistory bool
}

// LoadWith is [Load] with options. When the output file is missing, the
// history comes from the output committed at git HEAD, if any (see
// committedHistory).
func LoadWith(path string, opts LoadOptions) (*Result, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("gogen: reading declarations: %w", err)
	}
	f, perr := decl.Parse(path, src)
	if f == nil {
		return nil, perr
	}
	out := f.OutputPath()
	cur, err := os.ReadFile(out)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("gogen: reading the current output: %w", err)
	}
	if opts.ForgetHistory {
		var herr error
		if exists {
			herr = decl.CheckGenerated(out, cur)
		}
		return build(f, perr, cur, exists, nil, herr)
	}
	if exists {
		hist, herr := decl.ReadManifest(out, cur)
		return build(f, perr, cur, exists, hist, herr)
	}
	hist, herr := committedHistory(path)
	return build(f, perr, cur, exists, hist, herr)
}

// Build is Load on in-memory contents: the declarations src read from path,
// and the current output (nil when there is none).
func Build(path string, src, current []byte) (*Result, error) {
	f, perr := decl.Parse(path, src)
	if f == nil {
		return nil, perr
	}
	var hist decl.History
	var herr error
	if current != nil {
		hist, herr = decl.ReadManifest(f.OutputPath(), current)
	}
	return build(f, perr, current, current != nil, hist, herr)
}

// build checks f against hist (what was emitted last time; herr is the
// error reading it) and generates.
func build(f *decl.File, perr error, cur []byte, exists bool, hist decl.History, herr error) (*Result, error) {
	r := &Result{File: f, OutPath: f.OutputPath(), Exists: exists}
	if exists {
		r.Current = cur
	}
	cerr := decl.Check(f, hist)
	if err := decl.Join(perr, herr, cerr); err != nil {
		return nil, err
	}
	src, err := Emit(f)
	if err != nil {
		return nil, err
	}
	r.Src = src
	return r, nil
}
