package fencegen

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"time"
)

// migrationFile matches goose migration files: a positive version, an
// underscore, a description, and .sql or .go.
var (
	migrationFile = regexp.MustCompile(`^(\d+)_.+\.(sql|go)$`)
	goTestFile    = regexp.MustCompile(`_test\.go$`)
	digitsOnly    = regexp.MustCompile(`^\d+$`)
)

// timestampLayout is goose's timestamp version format (goose create without
// -s): 20260102150405.
const timestampLayout = "20060102150405"

// defaultWidth is the zero padding of the first sequential version in an
// empty directory: 00001, as in lockgen's own migrations and goose fix.
const defaultWidth = 5

// existing is a migration file already in the directory.
type existing struct {
	version int64
	digits  string
	file    string
}

// scan lists the goose migrations in dir.
func scan(dir string) ([]existing, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("fencegen: reading the migrations directory: %w", err)
	}
	var out []existing
	for _, e := range entries {
		m := migrationFile.FindStringSubmatch(e.Name())
		if e.IsDir() || m == nil || goTestFile.MatchString(e.Name()) {
			continue
		}
		v, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil || v <= 0 {
			continue
		}
		out = append(out, existing{version: v, digits: m[1], file: e.Name()})
	}
	return out, nil
}

// isTimestamp reports whether digits is a goose timestamp version.
func isTimestamp(digits string) bool {
	if len(digits) != len(timestampLayout) {
		return false
	}
	_, err := time.Parse(timestampLayout, digits)
	return err == nil
}

// NextVersion returns the version for a new migration in dir, in the style
// of the migrations already there: the next number after the highest,
// zero-padded to the same width (00001 in a directory without migrations),
// or, when the highest is a goose timestamp (20260102150405), now in UTC in
// that format (or a second after the highest if now is not later).
func NextVersion(dir string, now time.Time) (string, error) {
	files, err := scan(dir)
	if err != nil {
		return "", err
	}
	if len(files) == 0 {
		return fmt.Sprintf("%0*d", defaultWidth, 1), nil
	}
	high := files[0]
	for _, f := range files[1:] {
		if f.version > high.version {
			high = f
		}
	}
	if isTimestamp(high.digits) {
		last, _ := time.Parse(timestampLayout, high.digits)
		if now = now.UTC().Truncate(time.Second); !now.After(last) {
			now = last.Add(time.Second)
		}
		return now.Format(timestampLayout), nil
	}
	return fmt.Sprintf("%0*d", len(high.digits), high.version+1), nil
}

// CheckVersion checks a version given by hand: digits, a positive number,
// and not used by a migration in dir already (goose refuses duplicates).
func CheckVersion(dir, version string) error {
	v, err := strconv.ParseInt(version, 10, 64)
	if err != nil || v <= 0 || !digitsOnly.MatchString(version) {
		return invalid("version %q: want a positive decimal number, e.g. 00003 or 20260102150405", version)
	}
	files, err := scan(dir)
	if err != nil {
		return err
	}
	for _, f := range files {
		if f.version == v {
			return fmt.Errorf("fencegen: version %s is already used by %s", version, f.file)
		}
	}
	return nil
}

// FileName is the migration's file name: <version>_fence_<table>.sql, or
// <version>_fence_<table>_upgrade.sql for an upgrade.
func FileName(version string, s *Spec) string {
	if s.Upgrade {
		return version + "_fence_" + s.Table + "_upgrade.sql"
	}
	return version + "_fence_" + s.Table + ".sql"
}
