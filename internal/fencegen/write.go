package fencegen

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// WriteNew writes data to a new file at path and never replaces an existing
// one: it writes a temporary file next to it and hard-links it into place,
// which fails when path exists, so the file appears whole or not at all.
func WriteNew(path string, data []byte) (err error) {
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("fencegen: %s already exists; lockgen fence does not overwrite files: remove it or choose another -version", path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("fencegen: writing %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("fencegen: writing %s: %w", path, err)
	}
	defer func() {
		tmp.Close()
		os.Remove(tmp.Name())
	}()
	if _, err = tmp.Write(data); err != nil {
		return fmt.Errorf("fencegen: writing %s: %w", path, err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("fencegen: writing %s: %w", path, err)
	}
	if err = tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("fencegen: writing %s: %w", path, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("fencegen: writing %s: %w", path, err)
	}
	if err = os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("fencegen: %s already exists; lockgen fence does not overwrite files: remove it or choose another -version", path)
		}
		return fmt.Errorf("fencegen: writing %s: %w", path, err)
	}
	return nil
}
