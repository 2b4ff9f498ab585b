package main

import (
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

var update = flag.Bool("update", false, "rewrite the expected output in testdata/script/*.txtar")

// TestMain makes the test binary double as lockgen for the scripts, and
// drops the package's test database (register and status tests) at the end.
func TestMain(m *testing.M) {
	os.Exit(testscript.RunMain(dbTests{m}, map[string]func() int{
		"lockgen": func() int { return run(os.Args[1:], os.Stdout, os.Stderr) },
	}))
}

// dbTests runs the tests through testdb.Run.
type dbTests struct{ m *testing.M }

func (d dbTests) Run() int { return testdb.Run(d.m) }

// TestScripts runs the CLI scenarios in testdata/script. Besides the
// standard commands, scripts have:
//
//	status CODE lockgen ARGS...  run lockgen and require exit status CODE
//	[!] notmp                    fail if a temporary file of lockgen is left
//	                             (with !, fail unless there is one)
//	crlf FILE...                 turn LF line ends into CRLF, as a Windows
//	                             checkout with core.autocrlf=true does
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		UpdateScripts:       *update,
		RequireExplicitExec: true,
		RequireUniqueNames:  true,
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"status": cmdStatus,
			"notmp":  cmdNoTemp,
			"crlf":   cmdCRLF,
		},
	})
}

func cmdStatus(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: status CODE command [args...]")
	}
	want, err := strconv.Atoi(args[0])
	ts.Check(err)
	err = ts.Exec(args[1], args[2:]...)
	got := 0
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		got = exitErr.ExitCode()
	case err != nil:
		ts.Fatalf("%s: %v", args[1], err)
	}
	if got != want {
		ts.Fatalf("%s exited with status %d, want %d", args[1], got, want)
	}
}

func cmdNoTemp(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 0 {
		ts.Fatalf("usage: [!] notmp")
	}
	var found []string
	err := filepath.WalkDir(ts.MkAbs("."), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path == ts.MkAbs(".tmp") {
			return filepath.SkipDir // testscript's own temporary directory
		}
		if strings.Contains(d.Name(), ".go.tmp") {
			found = append(found, path)
		}
		return nil
	})
	ts.Check(err)
	switch {
	case !neg && len(found) > 0:
		ts.Fatalf("temporary files left behind: %v", found)
	case neg && len(found) == 0:
		ts.Fatalf("no temporary file found")
	}
}

func cmdCRLF(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: crlf FILE...")
	}
	for _, name := range args {
		src, err := os.ReadFile(ts.MkAbs(name))
		ts.Check(err)
		crlf := strings.ReplaceAll(strings.ReplaceAll(string(src), "\r\n", "\n"), "\n", "\r\n")
		ts.Check(os.WriteFile(ts.MkAbs(name), []byte(crlf), 0o644))
	}
}
