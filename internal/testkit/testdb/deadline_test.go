package testdb

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// Every test that can wait has a ctx deadline (Context), so that a broken
// refusal fails the named test instead of hanging until go test's timeout
// kills the whole package. TestWaitingTestsHaveADeadline holds that for the
// calls that wait as long as their ctx lets them: a leadership, a campaign,
// a watch of the leader, a session lock or a limited one (fn gets the
// lock's ctx and often waits on it), and any call with WithWait(0). Their ctx must not be one
// without a deadline: context.Background(), context.TODO(), t.Context(), a
// cancel or value context derived from those, or a local variable set to one
// of them.
//
// Left out: Example functions (they show application code, whose ctx is the
// application's; they take free keys and wait for nothing) and benchmarks
// (run only with -bench, where a deadline would cut a long -benchtime).
// Migrate waits for the migration lock at most five minutes by default
// (WithMigrationLockWait), within go test's timeout, so it is not listed.

// waitingVerbs are the calls that wait as long as their ctx lets them.
var waitingVerbs = map[string]bool{
	"Lead": true, "LeadPgx": true, "Campaign": true, "CampaignPgx": true,
	"WatchLeader": true, "RunSession": true, "RunSessionPgx": true, "RunSessionLimited": true,
}

// undeadlined reports whether e is a context without a deadline: one of
// the roots, a context derived from one without adding a deadline, or a
// name in plain.
func undeadlined(e ast.Expr, plain map[string]bool) bool {
	switch e := e.(type) {
	case *ast.Ident:
		return plain[e.Name]
	case *ast.CallExpr:
		sel, ok := e.Fun.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		x, ok := sel.X.(*ast.Ident)
		if !ok {
			return false
		}
		if x.Name != "context" {
			// t.Context(), b.Context(): canceled only once the test ends.
			return sel.Sel.Name == "Context" && len(e.Args) == 0 && (x.Name == "t" || x.Name == "b" || x.Name == "tb")
		}
		switch sel.Sel.Name {
		case "Background", "TODO":
			return true
		case "WithCancel", "WithCancelCause", "WithoutCancel", "WithValue":
			return len(e.Args) > 0 && undeadlined(e.Args[0], plain)
		}
	}
	return false
}

// waitsForever reports whether call waits as long as its ctx lets it: a
// waiting verb, or an option WithWait(0).
func waitsForever(call *ast.CallExpr) (string, bool) {
	var name string
	switch f := call.Fun.(type) {
	case *ast.SelectorExpr:
		name = f.Sel.Name
	case *ast.Ident:
		name = f.Name
	}
	if waitingVerbs[name] {
		return name, true
	}
	for _, a := range call.Args {
		opt, ok := a.(*ast.CallExpr)
		if !ok || len(opt.Args) != 1 {
			continue
		}
		sel, ok := opt.Fun.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "WithWait" {
			continue
		}
		if lit, ok := opt.Args[0].(*ast.BasicLit); ok && lit.Value == "0" {
			return name + " with WithWait(0)", true
		}
	}
	return "", false
}

// waitsWithoutDeadline lists the calls of src (a test file) that wait as
// long as a ctx without a deadline lets them, as "file:line: call in
// function".
func waitsWithoutDeadline(fset *token.FileSet, name string, src []byte) ([]string, error) {
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var found []string
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil || strings.HasPrefix(fd.Name.Name, "Example") || strings.HasPrefix(fd.Name.Name, "Benchmark") {
			continue
		}
		plain := map[string]bool{} // local names set to a context without a deadline
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt:
				for i, lhs := range n.Lhs {
					id, ok := lhs.(*ast.Ident)
					if !ok {
						continue
					}
					switch {
					case len(n.Rhs) == len(n.Lhs):
						plain[id.Name] = undeadlined(n.Rhs[i], plain)
					case len(n.Rhs) == 1 && i == 0:
						plain[id.Name] = undeadlined(n.Rhs[0], plain) // ctx, cancel := context.WithCancel(...)
					default:
						plain[id.Name] = false
					}
				}
			case *ast.CallExpr:
				if verb, ok := waitsForever(n); ok && len(n.Args) > 0 && undeadlined(n.Args[0], plain) {
					found = append(found, fmt.Sprintf("%s: %s in %s", fset.Position(n.Pos()), verb, fd.Name.Name))
				}
			}
			return true
		})
	}
	return found, nil
}

// repoRoot is the root of lockgen's repository: the directory of the
// go.mod that declares its module, above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(mod, []byte("module github.com/lockgen/lockgen\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("the repository's go.mod (module github.com/lockgen/lockgen) is not above the test's directory")
		}
		dir = parent
	}
}

// TestWaitingTestsHaveADeadline scans every test file of the repository
// (nested modules too).
func TestWaitingTestsHaveADeadline(t *testing.T) {
	root := repoRoot(t)
	fset := token.NewFileSet()
	var found []string
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		f, err := waitsWithoutDeadline(fset, filepath.ToSlash(rel), src)
		if err != nil {
			return err
		}
		files++
		found = append(found, f...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("scanned %d test files under %s; the repository has far more", files, root)
	}
	sort.Strings(found)
	for _, f := range found {
		t.Errorf("%s: its ctx has no deadline (use testdb.Context(t) or context.WithTimeout)", f)
	}
}

// TestWaitsWithoutDeadlineFinds: the scan finds each waiting call whose ctx
// has no deadline, and (the controls) none whose ctx has one, nor a call
// that does not wait.
func TestWaitsWithoutDeadlineFinds(t *testing.T) {
	const src = `package p

func TestA(t *testing.T) {
	ctx := context.Background()
	pgadvisory.Lead(ctx, db, 1, fn)                                  // found
	l.Campaign(context.TODO(), lock, fn)                              // found
	door.RunSession(t.Context(), key, fn)                             // found
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	l.WatchLeader(cctx, lock, fn)                                     // found
	pgadvisory.RunExclusive(ctx, db, 1, fn, pgadvisory.WithWait(0))   // found
	pgadvisory.RunExclusive(ctx, db, 1, fn)                           // no wait
	pgadvisory.RunExclusive(ctx, db, 1, fn, pgadvisory.WithWait(time.Second)) // bounded
	ctx = testdb.Context(t)
	pgadvisory.Lead(ctx, db, 1, fn)                                   // deadline
	tctx, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	l.Campaign(tctx, lock, fn)                                        // deadline
	l.Lead(context.WithoutCancel(tctx), lock, fn)                     // deadline kept
}

func ExampleLead() {
	pgadvisory.Lead(context.Background(), db, 1, fn) // an example: application code
}
`
	got, err := waitsWithoutDeadline(token.NewFileSet(), "x_test.go", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"x_test.go:5:2: Lead in TestA",
		"x_test.go:6:2: Campaign in TestA",
		"x_test.go:7:2: RunSession in TestA",
		"x_test.go:10:2: WatchLeader in TestA",
		"x_test.go:11:2: RunExclusive with WithWait(0) in TestA",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("found:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
