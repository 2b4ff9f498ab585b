package pgcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// EnvBinDir is the environment variable naming the directory of the
// PostgreSQL server binaries. When set, no other directory is searched.
const EnvBinDir = "LOCKGEN_PG_BINDIR"

// EnvPgBouncer is the environment variable naming the pgbouncer binary.
// When set, no other place is searched: set it to a path that does not
// exist to see how the PgBouncer tests behave on a machine without it.
const EnvPgBouncer = "LOCKGEN_PGBOUNCER"

// errUnavailable marks errors that mean "this machine cannot run throwaway
// servers" (missing binaries, no postgres OS user, unsupported OS): the test
// is skipped locally and fails under CI. Other errors always fail the test.
var errUnavailable = errors.New("pgcluster: throwaway servers are unavailable")

// fail ends t because of err: skip or fail for errUnavailable, fail otherwise.
func fail(t testing.TB, err error) {
	t.Helper()
	if !errors.Is(err, errUnavailable) {
		t.Fatal(err)
	}
	if testdb.InCI() {
		t.Fatal(err.Error() + " [CI is set, so this is a failure, not a skip]")
	}
	t.Skip(err.Error())
}

// Binary returns the path of a PostgreSQL client or server program (for
// example "pg_dump" or "psql") from the directory the clusters' binaries
// come from. It skips t (fails it under CI) when the program is missing.
func Binary(t testing.TB, name string) string {
	t.Helper()
	dir, err := findPostgres(name)
	if err != nil {
		fail(t, err)
	}
	return filepath.Join(dir, name)
}

// findPostgres returns the first candidate directory holding all of the
// named PostgreSQL binaries.
func findPostgres(names ...string) (string, error) {
	dirs := postgresBinDirs()
	for _, dir := range dirs {
		if hasExecutables(dir, names) {
			return dir, nil
		}
	}
	where := "PATH"
	if len(dirs) > 0 {
		where = strings.Join(dirs, ", ")
	}
	return "", fmt.Errorf("%w: PostgreSQL binaries %s not found in %s (install PostgreSQL or set %s)",
		errUnavailable, strings.Join(names, ", "), where, EnvBinDir)
}

// postgresBinDirs lists where to look for the server binaries, best first.
func postgresBinDirs() []string {
	if dir := os.Getenv(EnvBinDir); dir != "" {
		return []string{dir}
	}
	var dirs []string
	for _, pattern := range []string{"/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin"} {
		matches, _ := filepath.Glob(pattern)
		// Newest major version first: "15" before "13", "13" before "9.6".
		slices.SortFunc(matches, func(a, b string) int {
			return compareVersions(versionOf(b), versionOf(a))
		})
		dirs = append(dirs, matches...)
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	return dirs
}

// versionOf extracts the version from a directory such as
// /usr/lib/postgresql/15/bin or /usr/pgsql-15/bin.
func versionOf(binDir string) float64 {
	name := filepath.Base(filepath.Dir(binDir))
	name = strings.TrimPrefix(name, "pgsql-")
	v, _ := strconv.ParseFloat(name, 64)
	return v
}

func compareVersions(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func hasExecutables(dir string, names []string) bool {
	for _, name := range names {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}

// findPgBouncer returns the path of the pgbouncer binary.
func findPgBouncer() (string, error) {
	if p := os.Getenv(EnvPgBouncer); p != "" {
		if !hasExecutables(filepath.Dir(p), []string{filepath.Base(p)}) {
			return "", fmt.Errorf("%w: pgbouncer not found at %s (%s)", errUnavailable, p, EnvPgBouncer)
		}
		return p, nil
	}
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer", "/usr/local/bin/pgbouncer"} {
		if hasExecutables(filepath.Dir(p), []string{filepath.Base(p)}) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: pgbouncer not found in PATH or /usr/sbin (Debian: apt-get install pgbouncer; or set %s)", errUnavailable, EnvPgBouncer)
}
