package gogen_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/decl"
	"github.com/lockgen/lockgen/internal/gogen"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden with the current output")

// cases returns the names of the testdata/NAME.yaml golden cases.
func cases(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("testdata/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".yaml"))
	}
	return names
}

// generate parses, checks (without history) and emits testdata/NAME.yaml.
func generate(t *testing.T, name string) (*decl.File, []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".yaml")
	src, err := os.ReadFile(path)
	require.NoError(t, err)
	loaded, err := decl.LoadBytes("locks.yaml", src, nil)
	require.NoError(t, err)
	out, err := gogen.Emit(loaded.File)
	require.NoError(t, err)
	return loaded.File, out
}

// TestGolden compares the output for each testdata/NAME.yaml with
// testdata/NAME.golden (go test -run TestGolden -update rewrites them), and
// checks the properties every output must have.
func TestGolden(t *testing.T) {
	for _, name := range cases(t) {
		t.Run(name, func(t *testing.T) {
			f, got := generate(t, name)
			golden := filepath.Join("testdata", name+".golden")
			if *update {
				require.NoError(t, os.WriteFile(golden, got, 0o644))
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err)
			require.Equal(t, string(want), string(got), "run go test -run TestGolden -update to accept")

			// Header line, then a blank line, so it stays out of the package doc.
			require.True(t, bytes.HasPrefix(got, []byte(decl.GeneratedHeader+"\n\npackage "+f.Package+"\n")))
			fset := token.NewFileSet()
			af, err := parser.ParseFile(fset, "x.go", got, parser.ParseComments)
			require.NoError(t, err)
			require.True(t, ast.IsGenerated(af))
			require.Nil(t, af.Doc, "no package doc comment")

			// gofmt-clean.
			formatted, err := format.Source(got)
			require.NoError(t, err)
			require.Equal(t, string(got), string(formatted))

			// Independent of declaration order, and of the directory.
			reversed := *f
			reversed.Locks = slices.Clone(f.Locks)
			slices.Reverse(reversed.Locks)
			reversed.Path = filepath.Join("some", "dir", "locks.yaml")
			again, err := gogen.Emit(&reversed)
			require.NoError(t, err)
			require.Equal(t, string(got), string(again))

			// The manifest reads back as what was declared.
			hist, err := decl.ReadManifest("locks_gen.go", got)
			require.NoError(t, err)
			require.Len(t, hist, len(f.Locks))
			for _, l := range f.Locks {
				e, ok := hist[l.Name]
				require.True(t, ok, l.Name)
				require.Equal(t, l.ParamTypes(), e.Params, l.Name)
				require.Equal(t, l.ID, e.ID, l.Name)
			}
		})
	}
}

// TestGoldenCompiles builds every golden file as a package of this module
// (through a build overlay, so nothing is written into the tree) against the
// real pgadvisory and keyspace: the generated code must type-check.
func TestGoldenCompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not found")
	}
	dir := t.TempDir()
	replace := map[string]string{}
	var pkgs []string
	for _, name := range cases(t) {
		src, err := os.ReadFile(filepath.Join("testdata", name+".golden"))
		require.NoError(t, err)
		file := filepath.Join(dir, name+".go")
		require.NoError(t, os.WriteFile(file, src, 0o644))
		pkgDir, err := filepath.Abs(filepath.Join("testdata", "compile", name))
		require.NoError(t, err)
		replace[filepath.Join(pkgDir, name+"_gen.go")] = file
		pkgs = append(pkgs, "./testdata/compile/"+name)
	}
	overlay, err := json.Marshal(map[string]any{"Replace": replace})
	require.NoError(t, err)
	overlayFile := filepath.Join(dir, "overlay.json")
	require.NoError(t, os.WriteFile(overlayFile, overlay, 0o644))

	build := func() ([]byte, error) {
		cmd := exec.Command(goTool, append([]string{"build", "-overlay", overlayFile}, pkgs...)...)
		return cmd.CombinedOutput()
	}
	out, err := build()
	require.NoError(t, err, "%s", out)

	// Control: the same build fails when a generated file is broken.
	broken := bytes.Replace(mustRead(t, replace[firstKey(replace)]), []byte("pgadvisory.Lock{"), []byte("pgadvisory.Lock{Bogus: 1, "), 1)
	require.NoError(t, os.WriteFile(replace[firstKey(replace)], broken, 0o644))
	out, err = build()
	require.Error(t, err, "a broken file must not compile")
	require.Contains(t, string(out), "Bogus")
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

func firstKey(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys[0]
}

func TestEmitRefusesUncheckedDeclarations(t *testing.T) {
	f, err := decl.Parse("locks.yaml", []byte("version: \"1\"\npackage: p\nlocks:\n  - name: a.B\n"))
	require.Error(t, err)
	_, err = gogen.Emit(f)
	require.ErrorContains(t, err, `gogen: lock "a.B" has no Go name`)

	f, err = decl.Parse("locks.yaml", []byte("version: \"1\"\npackage: p\nlocks:\n  - name: a.b\n    params: [{name: x, type: int}]\n"))
	require.Error(t, err)
	_, err = gogen.Emit(f)
	require.ErrorContains(t, err, `invalid parameter "x"`)
}
