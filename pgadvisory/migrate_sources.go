package pgadvisory

import (
	"bufio"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/lockgen/lockgen/migrations"
)

// Migration is one of lockgen's embedded migrations (package migrations),
// as [Migrations] returns it: for teams that apply lockgen's schema with
// their own migration tool, and for [Migrator.Status].
type Migration struct {
	// Version is the number the file name starts with: 1 for
	// 00001_lock_id.sql. Versions are recorded in [MigrationTable].
	Version int64
	// File is the file name in migrations.FS, e.g. "00001_lock_id.sql".
	File string
	// UpSQL is the SQL that applies the migration: the file's leading
	// comment, which documents it, and its "-- +goose Up" section, without
	// goose's annotation lines. It runs in one transaction unless
	// NoTransaction is set.
	UpSQL string
	// DownSQL is the "-- +goose Down" section, without goose's annotation
	// lines: the SQL that removes what UpSQL created.
	DownSQL string
	// NoTransaction is true when the file says "-- +goose NO TRANSACTION":
	// its statements must run outside a transaction block.
	NoTransaction bool
	// Goose is the file as embedded: the goose migration, with its
	// annotations ("-- +goose Up", StatementBegin and StatementEnd).
	Goose string
	// Drops are the tables and sequences that DownSQL drops, e.g. "table
	// pgadvisory.run_once": state (the run-once ledger, published fencing
	// tokens, the token sequence, the registry) that rolling the migration
	// back destroys, so lockgen migrate down asks for -force.
	Drops []string
}

// Name is the file name without the version and extension: "lock_id".
func (m Migration) Name() string {
	_, rest, _ := strings.Cut(strings.TrimSuffix(m.File, ".sql"), "_")
	return rest
}

// SQL returns UpSQL when up is true, DownSQL otherwise.
func (m Migration) SQL(up bool) string {
	if up {
		return m.UpSQL
	}
	return m.DownSQL
}

var embedded struct {
	once sync.Once
	list []Migration
	err  error
}

// Migrations returns lockgen's migrations in ascending version order: what
// [Migrate] and [Migrator] apply, with each one's SQL split by direction.
// lockgen migrate sql prints the same text.
func Migrations() ([]Migration, error) {
	embedded.once.Do(func() { embedded.list, embedded.err = readMigrations(migrations.FS) })
	if embedded.err != nil {
		return nil, migrateError(nil, embedded.err)
	}
	return append([]Migration(nil), embedded.list...), nil
}

// readMigrations reads the goose SQL files at the root of fsys.
func readMigrations(fsys fs.FS) ([]Migration, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, err
	}
	var list []Migration
	for _, name := range names { // fs.Glob sorts; zero-padded versions sort numerically
		src, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		m, err := parseMigration(path.Base(name), string(src))
		if err != nil {
			return nil, err
		}
		if n := len(list); n > 0 && list[n-1].Version >= m.Version {
			return nil, fmt.Errorf("migration %s: version %d does not follow %s", name, m.Version, list[n-1].File)
		}
		list = append(list, m)
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("no migrations embedded")
	}
	return list, nil
}

// parseMigration splits a goose SQL file into its directions. Everything
// before "-- +goose Up" is the file's documentation and goes with UpSQL;
// annotation lines ("-- +goose ...") are dropped: other tools read them as
// comments, and goose's own statement splitting is not needed by tools that
// send the whole text.
func parseMigration(name, src string) (Migration, error) {
	digits, _, ok := strings.Cut(name, "_")
	v, err := strconv.ParseInt(digits, 10, 64)
	if !ok || err != nil || v <= 0 {
		return Migration{}, fmt.Errorf("migration %s: the name does not start with a version number and '_'", name)
	}
	var up, down strings.Builder
	section := &up
	seenUp, seenDown, noTx := false, false, false
	sc := bufio.NewScanner(strings.NewReader(src))
	sc.Buffer(make([]byte, 0, 64*1024), len(src)+1)
	for sc.Scan() {
		line := sc.Text()
		if ann, ok := strings.CutPrefix(strings.TrimSpace(line), "-- +goose "); ok {
			switch strings.TrimSpace(ann) {
			case "Up":
				seenUp = true
			case "Down":
				seenDown, section = true, &down
			case "NO TRANSACTION":
				noTx = true
			}
			continue
		}
		section.WriteString(line)
		section.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return Migration{}, fmt.Errorf("migration %s: %w", name, err)
	}
	if !seenUp || !seenDown {
		return Migration{}, fmt.Errorf("migration %s: missing -- +goose Up or Down", name)
	}
	downSQL := strings.TrimSpace(down.String()) + "\n"
	var drops []string
	for _, m := range dropsState.FindAllStringSubmatch(downSQL, -1) {
		drops = append(drops, strings.ToLower(m[1])+" "+m[2])
	}
	return Migration{
		Version: v,
		File:    name,
		UpSQL:   strings.TrimSpace(up.String()) + "\n",
		DownSQL: downSQL,
		Goose:   src,
		Drops:   drops,

		NoTransaction: noTx,
	}, nil
}

// dropsState finds the statements of a down section that drop a table or
// a sequence.
var dropsState = regexp.MustCompile(`(?im)^\s*DROP\s+(TABLE|SEQUENCE)\s+(?:IF\s+EXISTS\s+)?([A-Za-z_][\w.]*)`)
