package main

import (
	"database/sql"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// lockgen migrate's stories, each on a database of its own. The number of
// migrations is read from pgadvisory.Migrations, never written down.

func TestMigrateCommandUpStatusDown(t *testing.T) {
	_, url := testdb.EmptyDatabase(t)
	db := openTestDB(t, url)
	list := embedded(t)
	first, latest := list[0], list[len(list)-1]

	code, out, errOut := lockgen("migrate", "status", "-db", url)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "lockgen never migrated this database")
	require.Equal(t, len(list), strings.Count(out, " pending "), out)
	require.False(t, versionTable(t, db), "status creates nothing")

	code, out, errOut = lockgen("migrate", "up", "-db", url, "-to", fmt.Sprint(first.Version))
	require.Equal(t, exitOK, code, errOut)
	require.Regexp(t, `(?m)^applied `+regexp.QuoteMeta(first.File)+` \(`, out)
	require.Contains(t, out, fmt.Sprintf("the database is at version %d; this lockgen's latest is %d", first.Version, latest.Version))

	code, out, errOut = lockgen("migrate", "status", "-db", url)
	require.Equal(t, exitOK, code, errOut)
	require.Regexp(t, fmt.Sprintf(`(?m)^%d +%s +applied +\d{4}-`, first.Version, regexp.QuoteMeta(first.File)), out)
	require.Contains(t, out, fmt.Sprintf("%d pending: run lockgen migrate up", len(list)-1))

	// -db may come first, flags after the action too.
	code, out, errOut = lockgen("migrate", "-db", url, "up")
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, len(list)-1, strings.Count(out, "applied "), out)
	code, out, _ = lockgen("migrate", "up", "-db", url)
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "nothing to do: the database is at version")
	code, out, _ = lockgen("migrate", "status", "-db", url)
	require.Equal(t, exitOK, code)
	require.Contains(t, out, fmt.Sprintf("up to date: version %d", latest.Version))

	code, out, errOut = lockgen("migrate", "down", "-force", "-db", url)
	require.Equal(t, exitOK, code, errOut)
	require.Regexp(t, `(?m)^database \S+/lockgen_test_empty_\w+ \(from -db\)$`, out, "says which database it changes")
	require.Regexp(t, `(?m)^rolled back `+regexp.QuoteMeta(latest.File), out)
	require.Equal(t, 1, strings.Count(out, "rolled back"))

	code, out, errOut = lockgen("migrate", "down", "-to", "0", "-force", "-db", url)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "rolled back "+first.File)
	require.Contains(t, out, "the database is at version 0")
	require.False(t, schema(t, db))

	// The same version table as pgadvisory.Migrate.
	require.NoError(t, pgadvisory.Migrate(testdb.Context(t), db))
	code, out, _ = lockgen("migrate", "status", "-db", url)
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "up to date")
}

// TestMigrateCommandRefusesBadInputs: what a user gets wrong is reported
// with a clear message and changes nothing.
func TestMigrateCommandRefusesBadInputs(t *testing.T) {
	_, url := testdb.EmptyDatabase(t)
	db := openTestDB(t, url)
	unchanged := func() {
		t.Helper()
		require.False(t, versionTable(t, db), "the version table must not appear")
		require.False(t, schema(t, db))
	}
	fails := func(wantCode int, wantErr string, args ...string) {
		t.Helper()
		code, out, errOut := lockgen(args...)
		require.Equal(t, wantCode, code, "lockgen %v: %s%s", args, out, errOut)
		require.Contains(t, errOut, wantErr, "lockgen %v", args)
		unchanged()
	}

	fails(exitFail, "nothing to roll back: lockgen's version table public.pgadvisory_db_version does not exist", "migrate", "down", "-db", url)
	fails(exitFail, "nothing to roll back", "migrate", "down", "-to", "0", "-db", url)
	// A version that does not exist is a wrong command line for every
	// action (migrate sql -from 9 said 2, migrate up -to 99 said 1).
	fails(exitUsage, "-to 999: unknown version", "migrate", "up", "-to", "999", "-db", url)
	fails(exitUsage, "-to 999: unknown version", "migrate", "down", "-to", "999", "-db", url)
	fails(exitUsage, "unknown version 999", "migrate", "sql", "-from", "999")
	fails(exitUsage, "-to -1: below zero", "migrate", "down", "-to", "-1", "-db", url)
	fails(exitUsage, "-to 0 selects no migration to apply", "migrate", "up", "-to", "0", "-db", url)
	fails(exitUsage, "-force is a flag of migrate down", "migrate", "up", "-force", "-db", url)
	fails(exitUsage, "-reconcile is a flag of migrate up", "migrate", "down", "-reconcile", "-db", url)
	fails(exitUsage, "-goose is a flag of migrate sql", "migrate", "up", "-goose", "-db", url)
	fails(exitUsage, `invalid value "two" for flag -to: "two" is not a version number`, "migrate", "up", "-to", "two", "-db", url)
	fails(exitUsage, `unknown action "sideways"`, "migrate", "sideways", "-db", url)
	fails(exitUsage, "missing up, down, status or sql", "migrate")
	fails(exitUsage, "-down is a flag of migrate sql", "migrate", "up", "-down", "-db", url)
	fails(exitUsage, `unexpected argument "now"`, "migrate", "up", "now")

	// A wrong URL: a database that does not exist, a port nobody listens on.
	fails(exitFail, "connecting to", "migrate", "up", "-db", strings.Replace(url, "lockgen_test_empty_", "lockgen_missing_", 1))
	fails(exitFail, "@127.0.0.1:1/test (from -db)", "migrate", "status", "-db", "postgres://127.0.0.1:1/test?connect_timeout=5")
	fails(exitUsage, "-db: cannot parse the connection string", "migrate", "status", "-db", "postgres://[::1")
}

// TestMigrateCommandRefusesPooler: up through PgBouncer in transaction mode
// is refused before the session lock, and changes nothing.
func TestMigrateCommandRefusesPooler(t *testing.T) {
	_, url := testdb.EmptyDatabase(t)
	db := openTestDB(t, url)
	bounced := pgcluster.StartPgBouncer(t, url, "transaction") + "&default_query_exec_mode=simple_protocol"
	code, _, errOut := lockgen("migrate", "up", "-db", bounced)
	require.Equal(t, exitFail, code)
	require.Contains(t, errOut, "connection goes through a pooler")
	require.False(t, schema(t, db))
	require.False(t, versionTable(t, db))
}

// TestMigrateSQLAppliedByAnotherTool: the printed SQL, run as a psql-like
// script, creates lockgen's schema; the printed down SQL removes it. lockgen
// then sees a schema another tool applied.
func TestMigrateSQLAppliedByAnotherTool(t *testing.T) {
	_, url := testdb.EmptyDatabase(t)
	db := openTestDB(t, url)

	code, up, errOut := lockgen("migrate", "sql")
	require.Equal(t, exitOK, code, errOut)
	for _, m := range embedded(t) {
		require.Contains(t, up, fmt.Sprintf("-- lockgen migration %d, %s (up)\n", m.Version, m.File))
	}
	require.NotContains(t, up, "+goose")
	_, err := db.Exec(up)
	require.NoError(t, err)
	var id int64
	require.NoError(t, db.QueryRow(`SELECT pgadvisory.lock_id('reports.daily_email')`).Scan(&id))
	require.Equal(t, int64(-6078806957557529815), id)
	require.False(t, versionTable(t, db), "your tool keeps its own version table")

	code, out, _ := lockgen("migrate", "status", "-db", url)
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "another migration tool (your own goose table?) applied them", "it used to say: never migrated")

	code, down, errOut := lockgen("migrate", "sql", "-down")
	require.Equal(t, exitOK, code, errOut)
	_, err = db.Exec(down)
	require.NoError(t, err)
	require.False(t, schema(t, db))
}

// TestMigrateSQLSelectsVersions: -from and -to select the migrations, in
// order (newest first for -down); bad selections are usage errors.
func TestMigrateSQLSelectsVersions(t *testing.T) {
	list := embedded(t)
	if len(list) < 2 {
		t.Skip("needs two migrations")
	}
	first, second, latest := list[0], list[1], list[len(list)-1]
	headers := regexp.MustCompile(`(?m)^-- lockgen migration (\d+), `)
	versions := func(out string) []string {
		var vs []string
		for _, m := range headers.FindAllStringSubmatch(out, -1) {
			vs = append(vs, m[1])
		}
		return vs
	}

	code, out, _ := lockgen("migrate", "sql", "-to", fmt.Sprint(first.Version))
	require.Equal(t, exitOK, code)
	require.Equal(t, []string{fmt.Sprint(first.Version)}, versions(out))
	require.Contains(t, out, first.UpSQL)

	code, out, _ = lockgen("migrate", "sql", "-from", fmt.Sprint(first.Version))
	require.Equal(t, exitOK, code)
	require.Len(t, versions(out), len(list)-1)
	require.Equal(t, fmt.Sprint(second.Version), versions(out)[0])

	code, out, _ = lockgen("migrate", "sql", "-down", "-to", fmt.Sprint(first.Version))
	require.Equal(t, exitOK, code)
	require.Len(t, versions(out), len(list)-1)
	require.Equal(t, fmt.Sprint(latest.Version), versions(out)[0], "newest first")
	require.Contains(t, out, latest.DownSQL)
	require.NotContains(t, out, first.DownSQL)

	for _, bad := range [][]string{
		{"-to", "999"}, {"-to", "-1"}, {"-from", "2", "-to", "1"}, {"-down", "-from", "1", "-to", "2"}, {"-db", "postgres://x/y"},
	} {
		code, _, errOut := lockgen(append([]string{"migrate", "sql"}, bad...)...)
		require.Equal(t, exitUsage, code, "%v", bad)
		require.NotEmpty(t, errOut)
	}
}

func embedded(t *testing.T) []pgadvisory.Migration {
	t.Helper()
	list, err := pgadvisory.Migrations()
	require.NoError(t, err)
	return list
}

func openTestDB(t *testing.T, url string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

func versionTable(t *testing.T, db *sql.DB) bool {
	t.Helper()
	var ok bool
	require.NoError(t, db.QueryRow(`SELECT to_regclass($1) IS NOT NULL`, pgadvisory.MigrationTable).Scan(&ok))
	return ok
}

func schema(t *testing.T, db *sql.DB) bool {
	t.Helper()
	var ok bool
	require.NoError(t, db.QueryRow(`SELECT to_regnamespace('pgadvisory') IS NOT NULL`).Scan(&ok))
	return ok
}
