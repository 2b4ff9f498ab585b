package decl_test

import (
	"bytes"
	"errors"
	"go/format"
	"os"
	"testing"

	"github.com/lockgen/lockgen/internal/decl"
	"github.com/lockgen/lockgen/internal/gogen"
)

// FuzzParse feeds arbitrary bytes to the declarations parser. It must never
// panic; every problem must carry the file and a position inside it; and
// whatever Parse and Check accept must generate gofmt-clean Go that lockgen
// can read back and regenerate without complaint.
//
//	go test -run '^$' -fuzz FuzzParse -fuzztime 30s ./internal/decl/
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"",
		"version: \"1\"\npackage: locks\n",
		"version: \"1\"\npackage: locks\nlocks:\n  - name: reports.daily_email\n    doc: Sends it.\n  - name: billing.invoice\n    params:\n      - {name: tenant_id, type: int64}\n",
		"version: 1\npackage: p\nlocks:\n  - name: a.b\n    id: 7\n  - name: a.c\n    shared: true\n    wait: 1500ms\n",
		"version: 1\npackage: p\nlocks:\n  - name: a.x\n    renamed_from: a.y\n    on_rename: keep_id\nretired: [a.z]\n",
		"version: 1\npackage: p\nlocks:\n  - name: a.b_c\n  - name: a_b.c\n  - name: 'a..b'\n",
		"locks: [{name: \"x\\u0000y\", params: [{name: type, type: uuid}]}]\n",
		"a: &x [*x]\n",
		"version: \"1\"\n---\nversion: \"1\"\n",
		"version: 1\npackage: p\nlocks:\n  - name: a.b\n    doc: |\n      Para one.\n\n      - item\n      - item two\n\n      # Heading\n\n      \tcode\n        indented\n      [link]: https://go.dev\n      go:generate x\n",
	} {
		f.Add([]byte(seed))
	}
	if src, err := os.ReadFile("../testkit/generatedlocks/locks.yaml"); err == nil {
		f.Add(src)
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		// YAML breaks lines at \n, \r, NEL, LS and PS: count them all.
		lines := 1
		for _, br := range []string{"\n", "\r", "\u0085", "\u2028", "\u2029"} {
			lines += bytes.Count(src, []byte(br))
		}
		file, perr := decl.Parse("locks.yaml", src)
		checkPositions(t, perr, lines)
		if file == nil {
			if perr == nil {
				t.Fatal("Parse returned neither a file nor an error")
			}
			return
		}
		cerr := decl.Check(file, nil)
		checkPositions(t, cerr, lines)
		if perr != nil || cerr != nil {
			return
		}

		out, err := gogen.Emit(file)
		if err != nil {
			t.Fatalf("accepted declarations do not generate: %v\n%s", err, src)
		}
		formatted, err := format.Source(out)
		if err != nil {
			t.Fatalf("generated code does not parse: %v\n%s", err, out)
		}
		if !bytes.Equal(formatted, out) {
			t.Fatalf("generated code is not gofmt-clean:\n%s", gogen.Diff("generated", "gofmt", out, formatted))
		}
		hist, err := decl.ReadManifest("locks_gen.go", out)
		if err != nil {
			t.Fatalf("cannot read back the manifest: %v", err)
		}
		if len(hist) != len(file.Locks) {
			t.Fatalf("manifest has %d locks, declarations %d", len(hist), len(file.Locks))
		}
		// Regenerating over its own output is accepted and byte-identical.
		again, err := decl.Parse("locks.yaml", src)
		if err != nil {
			t.Fatal(err)
		}
		if err := decl.Check(again, hist); err != nil {
			t.Fatalf("regenerating over its own output is refused: %v", err)
		}
		out2, err := gogen.Emit(again)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, out2) {
			t.Fatalf("regenerating changed the output:\n%s", gogen.Diff("first", "second", out, out2))
		}
	})
}

func checkPositions(t *testing.T, err error, lines int) {
	t.Helper()
	if err == nil {
		return
	}
	var list decl.ErrorList
	if !errors.As(err, &list) || len(list) == 0 {
		t.Fatalf("problems are not an ErrorList: %v", err)
	}
	for _, e := range list {
		if e.File != "locks.yaml" || e.Pos.Line < 1 || e.Pos.Col < 1 || e.Pos.Line > lines+1 || e.Msg == "" {
			t.Fatalf("problem without a valid position: %#v (%d lines)", e, lines)
		}
	}
}
