package gogen_test

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/gogen"
)

// TestWriteFileFailedWriteLeavesNothing: a write that fails once the
// temporary file exists (here the process's file size limit, ulimit -f, as
// a full disk would) returns the error and removes the temporary file; the
// target is not created. The control: under the same limit, a file that
// fits is written and leaves no temporary file either. Go ignores SIGXFSZ,
// so the write returns EFBIG.
func TestWriteFileFailedWriteLeavesNothing(t *testing.T) {
	const limit = 1 << 20
	var old syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old))
	if old.Cur < 4*limit { // RLIM_INFINITY is the largest value
		t.Skipf("the file size limit is already %d bytes", old.Cur)
	}
	lowered := old
	lowered.Cur = limit
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lowered))
	defer func() { require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old)) }()

	dir := t.TempDir()
	path := filepath.Join(dir, "locks_gen.go")
	_, err := gogen.WriteFile(path, bytes.Repeat([]byte("x"), 2*limit))
	require.ErrorIs(t, err, syscall.EFBIG)
	require.ErrorContains(t, err, "gogen: writing "+path)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "neither the file nor a temporary file")

	// CONTROL: a file within the limit is written, and nothing else is left.
	changed, err := gogen.WriteFile(path, []byte("fits\n"))
	require.NoError(t, err)
	require.True(t, changed)
	entries, err = os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	require.Equal(t, "locks_gen.go", entries[0].Name())
}
