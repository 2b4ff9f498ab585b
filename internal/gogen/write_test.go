package gogen_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/gogen"
)

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "locks_gen.go")

	changed, err := gogen.WriteFile(path, []byte("one\n"))
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, "one\n", string(mustRead(t, path)))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o644), fi.Mode().Perm())

	// Unchanged bytes: the file is not touched, its mtime stays.
	past := time.Now().Add(-time.Hour).Truncate(time.Second)
	require.NoError(t, os.Chtimes(path, past, past))
	changed, err = gogen.WriteFile(path, []byte("one\n"))
	require.NoError(t, err)
	require.False(t, changed)
	fi, err = os.Stat(path)
	require.NoError(t, err)
	require.True(t, fi.ModTime().Equal(past), "unchanged file was rewritten")

	// Control: different bytes replace the file (new mtime), keeping its mode.
	require.NoError(t, os.Chmod(path, 0o600))
	changed, err = gogen.WriteFile(path, []byte("two\n"))
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, "two\n", string(mustRead(t, path)))
	fi, err = os.Stat(path)
	require.NoError(t, err)
	require.False(t, fi.ModTime().Equal(past))
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary files left")
}

func TestWriteFileError(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "missing", "locks_gen.go")
	_, err := gogen.WriteFile(path, []byte("x"))
	require.Error(t, err)
	require.Contains(t, err.Error(), "gogen: writing "+path)
	_, err = os.Stat(filepath.Join(dir, "missing"))
	require.True(t, os.IsNotExist(err), "nothing created")
}
