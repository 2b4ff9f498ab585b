package decl

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// Loaded is a declarations file, checked against the history of what
// lockgen emitted before, and its output file as found before this run.
type Loaded struct {
	File   *File
	Output Output
	// Unchecked is non-empty when no earlier output was found (no output
	// file, and no git HEAD that has one), so renames and removed locks
	// could not be checked this time: it says so, for a note to the user.
	// It is empty with ForgetHistory, which asks for exactly that.
	Unchecked string
}

// Output is the output file named by the declarations, as found before this
// run: where the manifest of the previous run is read from, and what a new
// one is compared with.
type Output struct {
	Path   string // File.OutputPath(): relative to the working directory like File.Path
	Src    []byte // its contents with LF line ends; nil when Exists is false
	Exists bool   // the output file exists
	CRLF   bool   // the file on disk has CRLF line ends (a Windows checkout)
}

// Fresh reports whether the output file exists and holds exactly src, line
// ends aside: a CRLF checkout of the right contents is fresh.
func (o *Output) Fresh(src []byte) bool {
	return o.Exists && bytes.Equal(o.Src, src)
}

// LoadOptions adjust [Load].
type LoadOptions struct {
	// ForgetHistory ignores what the previous output emitted: renames,
	// removals and ID changes since then go unchecked. It exists to recover
	// from a damaged output file.
	ForgetHistory bool
}

// Load reads the declarations file at path and the output it names (for the
// manifest of what was emitted last time), then parses and checks the
// declarations against that history. When the output file is missing, the
// history comes from the output committed at git HEAD, if any (see
// committedHistory). Every problem in the files comes back together in one
// [ErrorList]; other errors (unreadable files) are returned as they are.
func Load(path string, opts LoadOptions) (*Loaded, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("decl: reading declarations: %w", err)
	}
	f, perr := Parse(path, src)
	if f == nil {
		return nil, perr
	}
	out := Output{Path: f.OutputPath()}
	cur, err := os.ReadFile(out.Path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("decl: reading the current output: %w", err)
	}
	if err == nil {
		out.Src, out.Exists = LF(cur), true
		out.CRLF = len(out.Src) != len(cur)
	}
	if opts.ForgetHistory {
		var herr error
		if out.Exists {
			herr = checkGenerated(out.Path, out.Src)
		}
		return check(f, perr, out, nil, herr)
	}
	if out.Exists {
		hist, herr := ReadManifest(out.Path, out.Src)
		return check(f, perr, out, hist, herr)
	}
	hist, herr := committedHistory(path)
	loaded, err := check(f, perr, out, hist, herr)
	if err == nil && hist == nil {
		loaded.Unchecked = fmt.Sprintf("no earlier output of %s was found (%s does not exist, and git HEAD has none, or this is not a git work tree): "+
			"renames and removed locks are unchecked this time", path, out.Path)
	}
	return loaded, err
}

// LoadBytes is [Load] on in-memory contents: the declarations src read from
// path, and the current output (nil when there is none). It does not look
// at git.
func LoadBytes(path string, src, output []byte) (*Loaded, error) {
	f, perr := Parse(path, src)
	if f == nil {
		return nil, perr
	}
	out := Output{Path: f.OutputPath(), Src: LF(output), Exists: output != nil}
	out.CRLF = len(out.Src) != len(output)
	var hist History
	var herr error
	if out.Exists {
		hist, herr = ReadManifest(out.Path, out.Src)
	}
	return check(f, perr, out, hist, herr)
}

// check checks f against hist (what was emitted last time; herr is the
// error reading it) and joins every problem found, perr's included.
func check(f *File, perr error, out Output, hist History, herr error) (*Loaded, error) {
	cerr := Check(f, hist)
	if err := Join(perr, herr, cerr); err != nil {
		return nil, err
	}
	return &Loaded{File: f, Output: out}, nil
}
