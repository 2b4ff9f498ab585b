package gogen_test

import (
	"fmt"
	"go/format"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/decl"
	"github.com/lockgen/lockgen/internal/gogen"
)

// declarations returns a locks.yaml with n locks: mostly plain, every
// fourth parameterized, every tenth with options and a doc.
func declarations(n int) []byte {
	var b strings.Builder
	b.WriteString("version: \"1\"\npackage: locks\nlocks:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - name: service%d.job_%d\n", i%97, i)
		if i%10 == 0 {
			b.WriteString("    doc: Runs the job once per schedule tick.\n    shared: true\n    wait: 5s\n")
		}
		if i%4 == 0 {
			b.WriteString("    params:\n      - {name: tenant_id, type: int64}\n      - {name: region, type: string}\n")
		}
	}
	return []byte(b.String())
}

// generateInMemory is lockgen generate without files: load (parse, check)
// and emit.
func generateInMemory(src []byte) (*decl.File, []byte, error) {
	loaded, err := decl.LoadBytes("locks.yaml", src, nil)
	if err != nil {
		return nil, nil, err
	}
	out, err := gogen.Emit(loaded.File)
	return loaded.File, out, err
}

func TestDeclarationsGenerate(t *testing.T) {
	f, out, err := generateInMemory(declarations(100))
	require.NoError(t, err)
	require.Len(t, f.Locks, 100)
	formatted, err := format.Source(out)
	require.NoError(t, err)
	require.Equal(t, string(formatted), string(out), "gofmt-clean")
}

// BenchmarkGenerate is lockgen generate in memory (parse, check, emit,
// gofmt) for 1,000 and 10,000 declarations. Time and B/op should grow
// linearly with the number of locks.
//
//	go test -run '^$' -bench Generate -benchmem ./internal/gogen/
func BenchmarkGenerate(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		src := declarations(n)
		b.Run(fmt.Sprintf("locks=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				if _, _, err := generateInMemory(src); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
