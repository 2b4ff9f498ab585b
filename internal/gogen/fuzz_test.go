package gogen_test

import (
	"bytes"
	"go/format"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/lockgen/lockgen/internal/decl"
	"github.com/lockgen/lockgen/internal/gogen"
)

// FuzzEmitDoc checks that any doc text decl.Parse can accept comes out as
// gofmt-clean Go: Emit writes gofmt's layout itself, doc comments included.
//
//	go test -run '^$' -fuzz FuzzEmitDoc -fuzztime 30s ./internal/gogen/
func FuzzEmitDoc(f *testing.F) {
	for _, seed := range []string{
		"Sends the report.",
		"Para one.\n\n- item\n- item two\n\n# Heading\n\n\tcode\n  indented\n[link]: https://go.dev\ngo:generate x",
		"1. first\n2. second\n\nText with `code`, \"quotes\" and back\\slash.",
		"lockgen:manifest v1\nlockgen:emitted a.b id=1",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		doc = strings.TrimSpace(doc)
		if !utf8.ValidString(doc) || strings.ContainsFunc(doc, func(r rune) bool {
			return (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f || r == utf8.RuneError
		}) {
			t.Skip("decl.Parse refuses this doc")
		}
		file, err := decl.Parse("locks.yaml", []byte("version: \"1\"\npackage: p\nlocks:\n  - name: a.b\n    params: [{name: x, type: int64}]\n  - name: a.c\n"))
		if err != nil {
			t.Fatal(err)
		}
		if err := decl.Check(file, nil); err != nil {
			t.Fatal(err)
		}
		for _, l := range file.Locks {
			l.Doc = doc
		}
		out, err := gogen.Emit(file)
		if err != nil {
			t.Fatal(err)
		}
		formatted, err := format.Source(out)
		if err != nil {
			t.Fatalf("does not parse: %v\n%s", err, out)
		}
		if !bytes.Equal(formatted, out) {
			t.Fatalf("not gofmt-clean for doc %q:\n%s", doc, gogen.Diff("generated", "gofmt", out, formatted))
		}
	})
}
