package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// A Mutant is one deliberate breakage of a promise: in File, the text
// Search (which must occur exactly once) becomes Replace. The tests named
// by Pkgs and Run must fail when it is applied.
type Mutant struct {
	Name    string   // unique, short: how the table and -run name it
	Area    string   // the part of lockgen it breaks (fencing, election, ...)
	File    string   // slash-separated, relative to the repository root
	Search  string   // exact text, found exactly once in File
	Replace string   // what Search becomes
	Promise string   // the promise the mutant breaks, in a sentence
	Pkgs    []string // packages whose tests must kill it ("./pgadvisory")
	Run     string   // go test -run pattern selecting those tests
	// Equivalent, when set, says why no test can tell the mutant from the
	// original: it is expected to survive, and one that is killed is a
	// mistake in the list.
	Equivalent string
}

// checkList verifies the list itself: every mutant has its fields, names
// are unique, and each one still applies to the repository at root (see
// checkMutant). It returns every problem found, one per line.
func checkList(root string, list []Mutant) error {
	var errs []error
	seen := map[string]bool{}
	for _, m := range list {
		if seen[m.Name] {
			errs = append(errs, fmt.Errorf("mutant %q: the name is used twice", m.Name))
		}
		seen[m.Name] = true
		if err := checkMutant(root, m); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// checkMutant verifies that m still applies: its text is found exactly once
// in its file (in a migration, in its Up part); a mutant of a migration lies in the Up part of a function or
// view that no later migration redefines (mutating a body that a later
// migration replaces changes nothing that runs); its -run pattern selects
// at least one test of its packages.
func checkMutant(root string, m Mutant) error {
	if m.Name == "" || m.Area == "" || m.File == "" || m.Search == "" || m.Promise == "" || len(m.Pkgs) == 0 || m.Run == "" {
		return fmt.Errorf("mutant %q: Name, Area, File, Search, Promise, Pkgs and Run are all required", m.Name)
	}
	if m.Search == m.Replace {
		return fmt.Errorf("mutant %q: Replace is the same text as Search", m.Name)
	}
	src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(m.File)))
	if err != nil {
		return fmt.Errorf("mutant %q: %w", m.Name, err)
	}
	text := string(src)
	start, end := m.region(text)
	where := m.File
	if isMigration(m.File) {
		where = "the Up part of " + m.File
	}
	switch n := strings.Count(text[start:end], m.Search); n {
	case 1:
	case 0:
		return fmt.Errorf("mutant %q: its text is no longer in %s (the code changed: update the mutant)", m.Name, where)
	default:
		return fmt.Errorf("mutant %q: its text occurs %d times in %s (it must occur once: make it longer)", m.Name, n, where)
	}
	if isMigration(m.File) {
		if err := checkMigrationTarget(root, m, text); err != nil {
			return err
		}
	}
	if err := checkRunPattern(root, m); err != nil {
		return err
	}
	return nil
}

// isMigration reports whether file is one of lockgen's goose migrations.
func isMigration(file string) bool {
	return strings.HasPrefix(file, "migrations/") && strings.HasSuffix(file, ".sql")
}

// createRE finds the definitions a migration makes: functions, views and
// tables (a later migration may change a table with ALTER TABLE, which this
// does not see).
var createRE = regexp.MustCompile(`(?i)CREATE\s+(?:OR\s+REPLACE\s+)?(FUNCTION|VIEW|TABLE)\s+([a-z0-9_]+\.[a-z0-9_]+)`)

// upPart is the goose Up part of a migration: from "-- +goose Up" to
// "-- +goose Down" (or the end); start is its offset in text.
func upPart(text string) (part string, start int) {
	start = strings.Index(text, "-- +goose Up")
	if start < 0 {
		return "", 0
	}
	part = text[start:]
	if end := strings.Index(part, "-- +goose Down"); end >= 0 {
		part = part[:end]
	}
	return part, start
}

// checkMigrationTarget verifies that m's text is in the Up part of its
// migration, inside a function or view definition that no later
// migration's Up part redefines.
func checkMigrationTarget(root string, m Mutant, text string) error {
	start, end := m.region(text)
	if start == end {
		return fmt.Errorf("mutant %q: %s has no goose Up part", m.Name, m.File)
	}
	at := start + strings.Index(text[start:end], m.Search)
	var object string
	var from int
	for _, loc := range createRE.FindAllStringSubmatchIndex(text[:at], -1) {
		if loc[0] >= start {
			object, from = strings.ToLower(text[loc[4]:loc[5]]), loc[0]
		}
	}
	if object == "" || at+len(m.Search) > statementEnd(text, from) {
		return fmt.Errorf("mutant %q: its text in %s is not inside a CREATE FUNCTION, VIEW or TABLE", m.Name, m.File)
	}
	dir := filepath.Join(root, "migrations")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("mutant %q: %w", m.Name, err)
	}
	var later []string
	base := filepath.Base(m.File)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".sql") && e.Name() > base {
			later = append(later, e.Name())
		}
	}
	sort.Strings(later)
	for _, name := range later {
		src, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return fmt.Errorf("mutant %q: %w", m.Name, err)
		}
		up, _ := upPart(string(src))
		for _, sm := range createRE.FindAllStringSubmatch(up, -1) {
			if strings.ToLower(sm[2]) == object {
				return fmt.Errorf("mutant %q: %s is redefined by migrations/%s: a mutant of the body in %s changes nothing that runs; target the latest definition",
					m.Name, object, name, m.File)
			}
		}
	}
	return nil
}

// statementEnd is the offset just past the statement that begins at from:
// its first ";", or, when a dollar-quoted body ($$) comes first, the first
// ";" after the body's closing $$.
func statementEnd(text string, from int) int {
	rest := text[from:]
	semi := strings.Index(rest, ";")
	if dollar := strings.Index(rest, "$$"); dollar >= 0 && (semi < 0 || dollar < semi) {
		if closing := strings.Index(rest[dollar+2:], "$$"); closing >= 0 {
			after := dollar + 2 + closing + 2
			semi = strings.Index(rest[after:], ";")
			if semi >= 0 {
				semi += after
			}
		}
	}
	if semi < 0 {
		return len(text)
	}
	return from + semi + 1
}

// testFuncRE finds top-level test functions.
var testFuncRE = regexp.MustCompile(`(?m)^func (Test\w*)\(`)

// checkRunPattern verifies that m.Run compiles and that its first element
// (before any "/", which selects subtests) matches a test function in one
// of m's packages, so that a renamed test does not leave a mutant that
// no test is run against (and that survives for that reason alone).
func checkRunPattern(root string, m Mutant) error {
	top := strings.SplitN(m.Run, "/", 2)[0]
	re, err := regexp.Compile(top)
	if err != nil {
		return fmt.Errorf("mutant %q: -run pattern: %w", m.Name, err)
	}
	for _, pkg := range m.Pkgs {
		if !strings.HasPrefix(pkg, "./") || strings.Contains(pkg, "...") {
			return fmt.Errorf("mutant %q: package %q: name one package directory, as ./dir", m.Name, pkg)
		}
		files, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(pkg), "*_test.go"))
		if err != nil {
			return fmt.Errorf("mutant %q: %w", m.Name, err)
		}
		for _, f := range files {
			src, err := os.ReadFile(f)
			if err != nil {
				return fmt.Errorf("mutant %q: %w", m.Name, err)
			}
			for _, sm := range testFuncRE.FindAllStringSubmatch(string(src), -1) {
				if re.MatchString(sm[1]) {
					return nil
				}
			}
		}
	}
	return fmt.Errorf("mutant %q: -run %q selects no test function in %s", m.Name, m.Run, strings.Join(m.Pkgs, " "))
}

// region is where in text (m.File's contents) m's text is looked for: the
// goose Up part of a migration (its Down part, which often restores the
// previous definition word for word, never runs in the mutants' tests),
// the whole of any other file.
func (m Mutant) region(text string) (start, end int) {
	if !isMigration(m.File) {
		return 0, len(text)
	}
	up, start := upPart(text)
	return start, start + len(up)
}

// apply returns src with m applied; m must have been checked.
func (m Mutant) apply(src string) (string, error) {
	start, end := m.region(src)
	if strings.Count(src[start:end], m.Search) != 1 {
		return "", fmt.Errorf("mutant %q: its text is not found exactly once in %s", m.Name, m.File)
	}
	return src[:start] + strings.Replace(src[start:end], m.Search, m.Replace, 1) + src[end:], nil
}
