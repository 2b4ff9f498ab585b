package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeTree writes files (slash paths relative to dir) into dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const (
	migration1 = `-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION s.f() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;
-- +goose StatementEnd
CREATE VIEW s.v AS SELECT 10 AS ten;
SELECT 'outside';
-- +goose Down
CREATE FUNCTION s.g() RETURNS int LANGUAGE sql AS $$ SELECT 'down' $$;
`
	migration2 = `-- +goose Up
CREATE OR REPLACE FUNCTION s.f() RETURNS int LANGUAGE sql AS $$ SELECT 2 $$;
-- +goose Down
CREATE OR REPLACE FUNCTION s.f() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;
`
)

// checkRepo is a repository with two migrations (the second redefines the
// first's function s.f, not its view s.v) and a package with one test.
func checkRepo(t *testing.T) string {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"migrations/00001_a.sql":    migration1,
		"migrations/00002_b.sql":    migration2,
		"migrations/m_test.go":      "package migrations\n\nfunc TestMigrations(t *testing.T) {}\n",
		"pkg/twice.go":              "package pkg\n\nvar a, b = 1, 1\n",
		"pkg/pkg_test.go":           "package pkg\n\nfunc TestPkg(t *testing.T) {}\n",
		"pkg/nested/nested_test.go": "package nested\n\nfunc TestNested(t *testing.T) {}\n",
	})
	return dir
}

func TestCheckMutant(t *testing.T) {
	dir := checkRepo(t)
	m := func(file, search, run string) Mutant {
		return Mutant{Name: "m", Area: "a", File: file, Search: search, Replace: "X", Promise: "p", Pkgs: []string{"./migrations"}, Run: run}
	}
	for _, tc := range []struct {
		name string
		m    Mutant
		want string // "" for no error
	}{
		{"latest definition", m("migrations/00002_b.sql", "SELECT 2", "^TestMigrations$"), ""},
		{"a view no later migration replaces", m("migrations/00001_a.sql", "SELECT 10", "TestMig"), ""},
		{"subtest pattern", m("migrations/00002_b.sql", "SELECT 2", "^TestMigrations$/sub"), ""},
		{"redefined later", m("migrations/00001_a.sql", "SELECT 1 $$", "TestMigrations"),
			"s.f is redefined by migrations/00002_b.sql"},
		{"in the Down part", m("migrations/00001_a.sql", "SELECT 'down'", "TestMigrations"), "no longer in the Up part of migrations/00001_a.sql"},
		{"once in Up, again in Down", m("migrations/00002_b.sql", "RETURNS int", "TestMigrations"), ""},
		{"outside a definition", m("migrations/00001_a.sql", "SELECT 'outside'", "TestMigrations"), "not inside a CREATE"},
		{"text gone", m("migrations/00002_b.sql", "SELECT 3", "TestMigrations"), "no longer in the Up part of migrations/00002_b.sql"},
		{"text twice", m("pkg/twice.go", "1", "TestPkg"), "occurs 2 times"},
		{"no such file", m("pkg/none.go", "1", "TestPkg"), "none.go"},
		{"run selects nothing", m("migrations/00002_b.sql", "SELECT 2", "^TestOther$"), "selects no test function"},
		{"run does not compile", m("migrations/00002_b.sql", "SELECT 2", "Test("), "-run pattern"},
		{"same text", Mutant{Name: "m", Area: "a", File: "pkg/twice.go", Search: "var", Replace: "var", Promise: "p", Pkgs: []string{"./pkg"}, Run: "TestPkg"}, "same text"},
		{"missing field", Mutant{Name: "m", File: "pkg/twice.go", Search: "var", Replace: "const", Promise: "p", Pkgs: []string{"./pkg"}, Run: "TestPkg"}, "required"},
		{"package pattern", Mutant{Name: "m", Area: "a", File: "pkg/twice.go", Search: "var", Replace: "const", Promise: "p", Pkgs: []string{"./pkg/..."}, Run: "TestPkg"}, "name one package directory"},
		{"a nested package's test does not count", Mutant{Name: "m", Area: "a", File: "pkg/twice.go", Search: "var", Replace: "const", Promise: "p", Pkgs: []string{"./pkg"}, Run: "TestNested"}, "selects no test function"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkMutant(dir, tc.m)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("checkMutant: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("checkMutant accepted the mutant; want an error containing %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("checkMutant: %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestApplyUpOnly: in a migration whose Down part restores the same text,
// the mutant changes the Up part only.
func TestApplyUpOnly(t *testing.T) {
	m := Mutant{Name: "m", File: "migrations/00002_b.sql", Search: "RETURNS int", Replace: "RETURNS bigint"}
	got, err := m.apply(migration2)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(migration2, "RETURNS int", "RETURNS bigint", 1)
	if got != want || strings.Count(got, "RETURNS int") != 1 {
		t.Fatalf("apply =\n%s\nwant\n%s", got, want)
	}
	m.File = "pkg/other.go" // not a migration: the whole file, where the text occurs twice
	if _, err := m.apply(migration2); err == nil {
		t.Fatal("apply accepted a text found twice")
	}
}

func TestCheckListNamesTwice(t *testing.T) {
	dir := checkRepo(t)
	m := Mutant{Name: "dup", Area: "a", File: "migrations/00002_b.sql", Search: "SELECT 2", Replace: "SELECT 3", Promise: "p", Pkgs: []string{"./migrations"}, Run: "TestMigrations"}
	if err := checkList(dir, []Mutant{m}); err != nil {
		t.Fatalf("control: one mutant: %v", err)
	}
	err := checkList(dir, []Mutant{m, m})
	if err == nil || !strings.Contains(err.Error(), "the name is used twice") {
		t.Fatalf("checkList: %v; want the duplicate name refused", err)
	}
}

// TestListApplies is CI's check (go run ./mutate -check) as a test: every
// mutant of the real list applies to the repository this module lives in.
func TestListApplies(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "pgadvisory")); err != nil {
		t.Fatalf("the repository root is not two directories up: %v", err)
	}
	if err := checkList(root, Mutants); err != nil {
		t.Fatal(err)
	}
	areas := map[string]int{}
	for _, m := range Mutants {
		areas[m.Area]++
	}
	for _, a := range []string{"fencing", "election", "run-once", "loss", "commit"} {
		if areas[a] == 0 {
			t.Errorf("no mutant for the area %q", a)
		}
	}
}

func TestJoinRuns(t *testing.T) {
	got := joinRuns([]string{"^TestA$", "TestB", "^TestA$", "^TestC$/sub"})
	want := []string{"(?:^TestA$)|(?:TestB)", "^TestC$/sub"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("joinRuns = %q, want %q", got, want)
	}
}

// maxRepo is a Go module whose one function has a test that a mutant can
// break, and one that it cannot.
func maxRepo(t *testing.T, test string) string {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"go.mod":        "module example.com/m\n\ngo 1.21\n",
		"p/max.go":      "package p\n\n// Max is the larger of a and b.\nfunc Max(a, b int) int {\n\tif a > b {\n\t\treturn a\n\t}\n\treturn b\n}\n",
		"p/max_test.go": "package p\n\nimport \"testing\"\n\n" + test,
	})
	return dir
}

const maxTest = `func TestMax(t *testing.T) {
	if Max(1, 2) != 2 || Max(2, 1) != 2 {
		t.Fatal("Max is wrong")
	}
}

func TestOther(t *testing.T) {}
`

// TestRunOutcomes applies mutants to a scratch copy of a small module and
// runs its tests: each outcome is recognised, the failing test is named,
// and the original tree is never written.
func TestRunOutcomes(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	dir := maxRepo(t, maxTest)
	before, err := os.ReadFile(filepath.Join(dir, "p", "max.go"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := newScratch(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.remove()
	r := &runner{s: s, timeout: 20 * time.Second, goBin: goBin}
	base := Mutant{Area: "a", File: "p/max.go", Search: "if a > b {", Promise: "Max is the larger", Pkgs: []string{"./p"}, Run: "^TestMax$"}
	for _, tc := range []struct {
		name    string
		replace string
		run     string
		want    Outcome
		by      []string
	}{
		{"killed", "if a < b {", "", Killed, []string{"TestMax"}},
		{"equivalent", "if a >= b {", "", Survived, nil},
		{"untested", "if a < b {", "^TestOther$", Survived, nil},
		{"does not build", "if a >> {", "", Invalid, nil},
		{"hangs", "for a > b {\n\t}\n\tif a > b {", "", TimedOut, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := base
			m.Name, m.Replace = tc.name, tc.replace
			if tc.run != "" {
				m.Run = tc.run
			}
			if tc.name == "hangs" {
				r.timeout = 3 * time.Second
				defer func() { r.timeout = 20 * time.Second }()
			}
			res, err := r.try(m)
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome != tc.want || strings.Join(res.By, " ") != strings.Join(tc.by, " ") {
				t.Fatalf("outcome %s by %q, want %s by %q; output:\n%s", res.Outcome, res.By, tc.want, tc.by, res.Output)
			}
			after, err := os.ReadFile(filepath.Join(s.dir, "p", "max.go"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(after, before) {
				t.Fatalf("the scratch copy was not restored after the mutant:\n%s", after)
			}
		})
	}
	after, err := os.ReadFile(filepath.Join(dir, "p", "max.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(after, before) {
		t.Fatal("the working tree was written")
	}
}

// TestBaselineRefusesFailingTests: a test that fails without any mutant
// would count every mutant it covers as killed; the baseline refuses to go
// on. The control: the same run passes with a test that passes.
func TestBaselineRefusesFailingTests(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	m := Mutant{Name: "m", Area: "a", File: "p/max.go", Search: "if a > b {", Replace: "if a < b {", Promise: "p", Pkgs: []string{"./p"}, Run: "^TestMax$"}
	for _, tc := range []struct {
		test string
		ok   bool
	}{
		{maxTest, true},
		{"func TestMax(t *testing.T) { t.Fatal(\"always\") }\n", false},
	} {
		s, err := newScratch(maxRepo(t, tc.test))
		if err != nil {
			t.Fatal(err)
		}
		r := &runner{s: s, timeout: 20 * time.Second, goBin: goBin}
		err = r.baseline([]Mutant{m})
		s.remove()
		if tc.ok && err != nil {
			t.Fatalf("control: baseline: %v", err)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), "without any mutant")) {
			t.Fatalf("baseline: %v; want the failing test refused", err)
		}
	}
}

func TestReport(t *testing.T) {
	killed := Result{Mutant: Mutant{Name: "k", Area: "x"}, Outcome: Killed, By: []string{"TestK"}}
	equivalent := Result{Mutant: Mutant{Name: "e", Area: "y", Equivalent: "because"}, Outcome: Survived}
	survived := Result{Mutant: Mutant{Name: "s", Area: "x", Promise: "the promise"}, Outcome: Survived}
	wronglyEquivalent := Result{Mutant: Mutant{Name: "w", Area: "y", Equivalent: "because"}, Outcome: Killed}
	timedOut := Result{Mutant: Mutant{Name: "t", Area: "x"}, Outcome: TimedOut}
	for _, tc := range []struct {
		results []Result
		clean   bool
		says    []string
	}{
		{[]Result{killed, equivalent}, true, []string{"TestK", "survived (equivalent)", "because"}},
		{[]Result{killed, survived}, false, []string{"the promise"}},
		{[]Result{wronglyEquivalent}, false, []string{"killed, but marked equivalent"}},
		{[]Result{timedOut}, false, []string{"timed out"}},
	} {
		var out bytes.Buffer
		if clean := report(&out, tc.results); clean != tc.clean {
			t.Errorf("report = %v, want %v:\n%s", clean, tc.clean, out.String())
		}
		if tc.clean {
			var total string
			for _, line := range strings.Split(out.String(), "\n") {
				if f := strings.Fields(line); len(f) > 0 && f[0] == "total" {
					total = strings.Join(f, " ")
				}
			}
			if total != "total 2 1 0 1 0 0" {
				t.Errorf("the totals are %q, want %q", total, "total 2 1 0 1 0 0")
			}
		}
		for _, s := range tc.says {
			if !strings.Contains(out.String(), s) {
				t.Errorf("the report does not say %q:\n%s", s, out.String())
			}
		}
	}
}

func TestUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-run", "^no such mutant$"}, &stdout, &stderr); code != 2 {
		t.Fatalf("exit %d, want 2; %s", code, stderr.String())
	}
	if code := run([]string{"extra"}, &stdout, &stderr); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	stdout.Reset()
	if code := run([]string{"-list", "-run", "^fence-publish-equal-token$"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	if !strings.Contains(stdout.String(), "fence-publish-equal-token") || strings.Count(stdout.String(), "\n") != 2 {
		t.Fatalf("-list -run printed:\n%s", stdout.String())
	}
}

func TestReadGremlins(t *testing.T) {
	data := []byte(`{"go_module":"m","files":[{"file_name":"a.go","mutations":[
		{"type":"CONDITIONALS_BOUNDARY","status":"KILLED","line":1,"column":2},
		{"type":"CONDITIONALS_BOUNDARY","status":"LIVED","line":3,"column":4},
		{"type":"ARITHMETIC_BASE","status":"NOT COVERED","line":5,"column":6},
		{"type":"ARITHMETIC_BASE","status":"KILLED","line":7,"column":8},
		{"type":"ARITHMETIC_BASE","status":"KILLED","line":9,"column":1},
		{"type":"INCREMENT_DECREMENT","status":"TIMED OUT","line":9,"column":2}]}]}`)
	r, err := readGremlins("./internal/p", data)
	if err != nil {
		t.Fatal(err)
	}
	if r.killed != 3 || r.lived != 1 || r.notCovered != 1 || r.timedOut != 1 {
		t.Fatalf("counts %+v", r)
	}
	if e := r.efficacy(); e != 75 {
		t.Fatalf("efficacy %v, want 75", e)
	}
	if len(r.livedAt) != 1 || r.livedAt[0] != "internal/p/a.go:3:4 CONDITIONALS_BOUNDARY" {
		t.Fatalf("lived at %q", r.livedAt)
	}
	if _, err := readGremlins("./p", []byte("not json")); err == nil {
		t.Fatal("a report that is not JSON was read")
	}
}
