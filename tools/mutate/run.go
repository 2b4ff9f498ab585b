package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Outcome is what became of a mutant.
type Outcome string

const (
	Killed   Outcome = "killed"    // a test failed
	Survived Outcome = "survived"  // every test passed: nothing noticed
	TimedOut Outcome = "timed out" // the tests did not end within the deadline
	Invalid  Outcome = "invalid"   // the mutant does not build: no test ran
)

// Result is one mutant's outcome.
type Result struct {
	Mutant  Mutant
	Outcome Outcome
	By      []string // the tests that failed (Killed)
	Elapsed time.Duration
	Output  string // go test's output
}

// scratch is a copy of the repository that mutants are applied to, one at
// a time; the working tree is never written.
type scratch struct {
	dir string
}

// newScratch copies the repository at root into a new temporary directory:
// the files git knows of or would add (tracked, and untracked but not
// ignored, so uncommitted work is tried too), or every file when root is not
// a git work tree.
func newScratch(root string) (*scratch, error) {
	dir, err := os.MkdirTemp("", "lockgen-mutate-")
	if err != nil {
		return nil, err
	}
	files, err := repoFiles(root)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	for _, f := range files {
		src := filepath.Join(root, f)
		info, err := os.Lstat(src)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the working tree, not yet in git
		}
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		if err := copyFile(src, filepath.Join(dir, f), info.Mode().Perm()); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	return &scratch{dir: dir}, nil
}

// repoFiles lists the files to copy, relative to root.
func repoFiles(root string) ([]string, error) {
	if _, err := os.Stat(filepath.Join(root, ".git")); err == nil {
		out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
		if err != nil {
			return nil, fmt.Errorf("listing the repository's files (git ls-files): %w", err)
		}
		var files []string
		for _, f := range strings.Split(string(out), "\x00") {
			if f != "" {
				files = append(files, filepath.FromSlash(f))
			}
		}
		return files, nil
	}
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, rel)
		}
		return nil
	})
	return files, err
}

func copyFile(src, dst string, perm fs.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func (s *scratch) remove() { os.RemoveAll(s.dir) }

// runner runs go test in a scratch copy.
type runner struct {
	ctx     context.Context // ends every run (an interrupt); nil: never
	s       *scratch
	timeout time.Duration // per mutant: go test -timeout, and a kill after it
	goBin   string
}

// failRE finds the tests go test reports as failed.
var failRE = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)

// buildFailRE recognises a package that did not build or vet.
var buildFailRE = regexp.MustCompile(`(?m)\[(build failed|setup failed)\]|^# `)

// goTest runs the tests of pkgs selected by run in the scratch copy and
// says how it ended.
func (r *runner) goTest(pkgs []string, run string) (Outcome, []string, string) {
	parent := r.ctx
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithTimeout(parent, r.timeout+time.Minute)
	defer cancel()
	args := append([]string{"test", "-count=1", "-timeout", r.timeout.String(), "-run", run}, pkgs...)
	cmd := exec.CommandContext(ctx, r.goBin, args...)
	cmd.Dir = r.s.dir
	killGroup(cmd)
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	text := out.String()
	switch {
	case err == nil:
		return Survived, nil, text
	case ctx.Err() != nil || strings.Contains(text, "panic: test timed out after"):
		return TimedOut, nil, text
	case buildFailRE.MatchString(text):
		return Invalid, nil, text
	}
	var by []string
	seen := map[string]bool{}
	for _, sm := range failRE.FindAllStringSubmatch(text, -1) {
		name := sm[1]
		if top := strings.SplitN(name, "/", 2)[0]; top != name && seen[top] {
			continue // a subtest of a test already named
		}
		if !seen[name] {
			seen[name] = true
			by = append(by, name)
		}
	}
	return Killed, by, text
}

// try applies m in the scratch copy, runs its tests, and puts the file back.
func (r *runner) try(m Mutant) (Result, error) {
	path := filepath.Join(r.s.dir, filepath.FromSlash(m.File))
	orig, err := os.ReadFile(path)
	if err != nil {
		return Result{}, err
	}
	mutated, err := m.apply(string(orig))
	if err != nil {
		return Result{}, err
	}
	if err := os.WriteFile(path, []byte(mutated), 0o644); err != nil {
		return Result{}, err
	}
	defer os.WriteFile(path, orig, 0o644)
	start := time.Now()
	outcome, by, out := r.goTest(m.Pkgs, m.Run)
	return Result{Mutant: m, Outcome: outcome, By: by, Elapsed: time.Since(start), Output: out}, nil
}

// baseline runs, unmutated, every test the mutants name, grouped by
// package set: a test that fails without a mutant would count every
// mutant it covers as killed.
func (r *runner) baseline(list []Mutant) error {
	type group struct {
		pkgs []string
		runs []string
	}
	var order []string
	groups := map[string]*group{}
	for _, m := range list {
		key := strings.Join(m.Pkgs, " ")
		g := groups[key]
		if g == nil {
			g = &group{pkgs: m.Pkgs}
			groups[key] = g
			order = append(order, key)
		}
		g.runs = append(g.runs, m.Run)
	}
	for _, key := range order {
		g := groups[key]
		for _, run := range joinRuns(g.runs) {
			outcome, by, out := r.goTest(g.pkgs, run)
			if outcome != Survived {
				return fmt.Errorf("without any mutant, go test -run %q %s: %s %v\n%s", run, key, outcome, by, out)
			}
		}
	}
	return nil
}

// joinRuns combines -run patterns into as few as select the same tests:
// patterns without subtest parts become one alternation; a pattern with
// "/" is kept on its own.
func joinRuns(runs []string) []string {
	var alt, alone []string
	seen := map[string]bool{}
	for _, r := range runs {
		if seen[r] {
			continue
		}
		seen[r] = true
		if strings.Contains(r, "/") {
			alone = append(alone, r)
		} else {
			alt = append(alt, "(?:"+r+")")
		}
	}
	if len(alt) > 0 {
		alone = append([]string{strings.Join(alt, "|")}, alone...)
	}
	return alone
}
