package gogen

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// WriteFile replaces the file at path with data atomically: it writes a
// temporary file in the same directory and renames it over path, so readers
// see the old or the new contents, never a part. It leaves an unchanged file
// alone (keeping its modification time) and reports whether it wrote.
func WriteFile(path string, data []byte) (changed bool, err error) {
	perm := fs.FileMode(0o644)
	switch old, err := os.ReadFile(path); {
	case err == nil && bytes.Equal(old, data):
		return false, nil
	case err == nil:
		if fi, err := os.Stat(path); err == nil {
			perm = fi.Mode().Perm()
		}
	case !errors.Is(err, fs.ErrNotExist):
		return false, fmt.Errorf("gogen: writing %s: %w", path, err)
	}

	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return false, fmt.Errorf("gogen: writing %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return false, fmt.Errorf("gogen: writing %s: %w", path, err)
	}
	if err = tmp.Sync(); err != nil {
		return false, fmt.Errorf("gogen: writing %s: %w", path, err)
	}
	if err = tmp.Chmod(perm); err != nil {
		return false, fmt.Errorf("gogen: writing %s: %w", path, err)
	}
	if err = tmp.Close(); err != nil {
		return false, fmt.Errorf("gogen: writing %s: %w", path, err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return false, fmt.Errorf("gogen: writing %s: %w", path, err)
	}
	return true, nil
}
