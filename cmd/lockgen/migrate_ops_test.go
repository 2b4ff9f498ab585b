package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/migrations"
	"github.com/lockgen/lockgen/pgadvisory"
)

// lockgen migrate against the states an operator meets: data that a
// rollback would drop, a rollback that fails half way, another migrator
// holding the lock, a standby, a restored dump without the schema, a schema
// the application's goose applied.

// TestMigrateDownNeedsForceToDropState: rolling back to 0 used to drop the
// run-once ledger and restart the token sequence at 1 without a word. It
// now refuses without -force (a usage error, nothing changed) and says what
// each dropped table and sequence holds; with -force it drops them.
func TestMigrateDownNeedsForceToDropState(t *testing.T) {
	ctx := testdb.Context(t)
	_, url := testdb.EmptyDatabase(t)
	db := openTestDB(t, url)
	code, _, errOut := lockgen("migrate", "up", "-db", url)
	require.Equal(t, exitOK, code, errOut)
	var token int64
	require.NoError(t, db.QueryRowContext(ctx, `SELECT nextval('pgadvisory.fencing_token_seq')`).Scan(&token))
	_, err := db.ExecContext(ctx, `INSERT INTO pgadvisory.run_once (lock_id, window_key, holder, started_at, finished_at) VALUES (1, '2026-12-03', 'test', now(), now())`)
	require.NoError(t, err)
	list := embedded(t)
	latest := list[len(list)-1].Version

	code, out, errOut := lockgen("migrate", "down", "-to", "0", "-db", url)
	require.Equal(t, exitUsage, code, out+errOut)
	require.Contains(t, errOut, "rolling back to 0 drops state that protects data:")
	require.Contains(t, errOut, "table pgadvisory.run_once (1 rows: the run-once ledger: those windows would run again)")
	require.Contains(t, errOut, fmt.Sprintf("sequence pgadvisory.fencing_token_seq (at %d: fencing tokens would start again at 1", token))
	require.Contains(t, errOut, "table pgadvisory.fence (0 rows")
	require.Contains(t, errOut, "run it again with -force")
	require.NotContains(t, out, "rolled back")
	requireVersion(t, url, latest)

	// One step down drops the queues of waiting calls (00011), down to 9
	// the limits of limited locks (00010), down to 8 the leases (00009),
	// down to 7 the list of fenced tables (00008), and down to 6 leaders'
	// terms (00007): -force too.
	code, _, errOut = lockgen("migrate", "down", "-db", url)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "rolling back the last migration drops state that protects data:\n\ttable pgadvisory.waiter (0 rows")
	requireVersion(t, url, latest)
	code, _, errOut = lockgen("migrate", "down", "-to", "9", "-db", url)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "table pgadvisory.slot_limit (0 rows")
	requireVersion(t, url, latest)
	code, _, errOut = lockgen("migrate", "down", "-to", "8", "-db", url)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "table pgadvisory.lease (0 rows")
	requireVersion(t, url, latest)
	code, _, errOut = lockgen("migrate", "down", "-to", "7", "-db", url)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "table pgadvisory.fenced_table (0 rows")
	requireVersion(t, url, latest)
	code, _, errOut = lockgen("migrate", "down", "-to", "6", "-db", url)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "table pgadvisory.leader (0 rows")
	requireVersion(t, url, latest)

	code, out, errOut = lockgen("migrate", "down", "-to", "0", "-force", "-db", url)
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, len(list), strings.Count(out, "rolled back "), out)
	require.False(t, schema(t, db))
}

// TestMigrateDownReportsAPartialRollback: a table using a trigger function
// of migration 6 makes rolling back 6 fail. migrate down used to print
// only the error, although the later ones had been rolled back; it now
// says so, and the server's detail names the dependent trigger.
func TestMigrateDownReportsAPartialRollback(t *testing.T) {
	_, url := testdb.EmptyDatabase(t)
	db := openTestDB(t, url)
	code, _, errOut := lockgen("migrate", "up", "-db", url)
	require.Equal(t, exitOK, code, errOut)
	_, err := db.Exec(`CREATE TABLE public.entries (id bigint, fencing_token bigint);
		CREATE TRIGGER entries_stamp BEFORE INSERT ON public.entries FOR EACH ROW EXECUTE FUNCTION pgadvisory.fence_stamp()`)
	require.NoError(t, err)
	list := embedded(t)
	var later []string // rolled back before 6 fails
	for _, m := range list {
		if m.Version > 6 {
			later = append(later, m.File)
		}
	}

	code, out, errOut := lockgen("migrate", "down", "-to", "0", "-force", "-db", url)
	require.Equal(t, exitFail, code)
	for _, file := range later {
		require.Regexp(t, `(?m)^rolled back `+regexp.QuoteMeta(file)+` \(`, out, "what ran before the error")
	}
	require.Equal(t, len(later), strings.Count(out, "rolled back"))
	require.Contains(t, errOut, "cannot drop function pgadvisory.fence_stamp()")
	require.Contains(t, errOut, "\tdetail: trigger entries_stamp on table entries depends on function pgadvisory.fence_stamp()")
	requireVersion(t, url, 6)
}

// TestMigrateUpSaysWhoHoldsTheLock: while another session holds the
// migration lock, migrate up used to wait in silence. It now says every
// few seconds which session holds it (pid and application_name), and
// carries an application_name of its own ("lockgen migrate") unless the
// URL sets one.
func TestMigrateUpSaysWhoHoldsTheLock(t *testing.T) {
	defer func(old time.Duration) { lockReportEvery = old }(lockReportEvery)
	lockReportEvery = 200 * time.Millisecond
	for _, tc := range []struct{ params, app string }{
		{"", "lockgen migrate"},
		{"application_name=ops-runbook", "ops-runbook"},
	} {
		t.Run(tc.app, func(t *testing.T) {
			ctx := testdb.Context(t)
			_, url := testdb.EmptyDatabase(t)
			db := openTestDB(t, url)
			holder, err := db.Conn(ctx)
			require.NoError(t, err)
			defer holder.Close()
			var holderPID int
			require.NoError(t, holder.QueryRowContext(ctx, `SELECT pg_backend_pid() FROM (SELECT set_config('application_name', 'billing-deploy', false), pg_advisory_lock($1)) AS l`,
				pgadvisory.MigrationLockID).Scan(&holderPID))

			type result struct {
				code        int
				out, errOut string
			}
			done := make(chan result, 1)
			go func() {
				code, out, errOut := lockgen("migrate", "up", "-db", withParams(url, tc.params))
				done <- result{code, out, errOut}
			}()
			// lockgen's own connection is there, named, while it waits.
			require.Eventually(t, func() bool {
				var n int
				return db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()`, tc.app).Scan(&n) == nil && n > 0
			}, 30*time.Second, 20*time.Millisecond, "application_name %q", tc.app)
			// Two reports' worth of waiting.
			time.Sleep(3 * lockReportEvery)
			_, err = holder.ExecContext(ctx, `SELECT pg_advisory_unlock($1)`, pgadvisory.MigrationLockID)
			require.NoError(t, err)
			r := frontdoor.Await(t, done, "lockgen migrate up")
			require.Equal(t, exitOK, r.code, r.errOut)
			require.Regexp(t, `(?m)^lockgen migrate: waiting for the migration lock \(another migrator's\), held by pid `+strconv.Itoa(holderPID)+
				` \(application_name "billing-deploy"(, client [0-9.:a-f]+)?\), for \d+s$`, r.errOut)
			require.Contains(t, r.out, "applied ")
		})
	}
}

// TestMigrateOnAStandby: migrate up on a hot standby used to return the
// server's raw read-only error from inside goose; it now says it is a
// standby and to migrate on the primary. status on a standby used to print
// "no advisory locks held or awaited" while the primary held one; it now
// exits 1 and says so.
func TestMigrateOnAStandby(t *testing.T) {
	ctx := testdb.Context(t)
	primary := pgcluster.Start(t)
	standby := primary.StartStandby(t)
	code, out, errOut := lockgen("migrate", "up", "-db", standby.URL())
	require.Equal(t, exitFail, code, out)
	require.Contains(t, errOut, "the server is a hot standby (pg_is_in_recovery() = true), which is read-only: migrate on the primary")
	require.NotContains(t, errOut, "25006")

	code, _, errOut = lockgen("migrate", "up", "-db", primary.URL())
	require.Equal(t, exitOK, code, errOut)
	pdb := openTestDB(t, primary.URL())
	held, err := pdb.Conn(ctx)
	require.NoError(t, err)
	defer held.Close()
	_, err = held.ExecContext(ctx, `SELECT pg_advisory_lock(4242)`)
	require.NoError(t, err)
	code, out, errOut = lockgen("status", "-db", primary.URL())
	require.Equal(t, exitOK, code, errOut)
	require.Regexp(t, `(?m)^4242 `, out, "control: the primary lists the lock")

	code, out, errOut = lockgen("status", "-db", standby.URL())
	require.Equal(t, exitFail, code, out)
	require.Empty(t, out)
	require.Contains(t, errOut, "the server is a hot standby")
	require.Contains(t, errOut, "run lockgen status against the primary")
}

// TestMigrateUpOnARestoredDump: pg_dump -n public restored: the version
// table claims every migration, the schema does not exist. migrate up used
// to say "nothing to do", so nothing could repair it; it now explains and
// exits 1, and migrate up -reconcile repairs it.
func TestMigrateUpOnARestoredDump(t *testing.T) {
	db, url := migrated.RestoredWithoutSchema(t)
	list := embedded(t)
	latest := list[len(list)-1].Version

	code, out, errOut := lockgen("migrate", "up", "-db", url)
	require.Equal(t, exitFail, code, out)
	require.NotContains(t, out, "nothing to do")
	require.Contains(t, errOut, fmt.Sprintf("records migrations up to %d, but the schema pgadvisory does not exist", latest))
	require.Contains(t, errOut, "lockgen migrate up -reconcile")
	code, out, _ = lockgen("migrate", "status", "-db", url)
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "but the schema pgadvisory does not exist")

	code, out, errOut = lockgen("migrate", "up", "-reconcile", "-db", url)
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, len(list), strings.Count(out, "removed the record of "), out)
	require.Len(t, regexp.MustCompile(`(?m)^applied `).FindAllString(out, -1), len(list), out)
	require.True(t, schema(t, db))
	code, out, _ = lockgen("migrate", "up", "-db", url)
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "nothing to do")
}

// TestMigrateOnASchemaTheAppsGooseApplied: the application's goose table
// applied lockgen's first migrations. migrate status used to say "never
// migrated", migrate up failed at migration 1 ("already exists"), and
// doctor's advice was "lockgen migrate up", which failed again. Following
// doctor's advice now gets out: status and up explain, doctor's fix is
// migrate up -reconcile, which records what the goose table applied and
// applies the rest; doctor's schema check then passes.
func TestMigrateOnASchemaTheAppsGooseApplied(t *testing.T) {
	ctx := testdb.Context(t)
	_, url := testdb.EmptyDatabase(t)
	db := openTestDB(t, url)
	list := embedded(t)
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS, goose.WithDisableGlobalRegistry(true), goose.WithLogger(goose.NopLogger()))
	require.NoError(t, err)
	_, err = p.UpTo(ctx, list[2].Version)
	require.NoError(t, err)

	code, out, _ := lockgen("migrate", "status", "-db", url)
	require.Equal(t, exitOK, code)
	require.NotContains(t, out, "never migrated")
	require.Contains(t, out, fmt.Sprintf("holds the objects of lockgen's migrations up to %d", list[2].Version))

	code, _, errOut := lockgen("migrate", "up", "-db", url)
	require.Equal(t, exitFail, code)
	require.NotContains(t, errOut, "already exists")
	require.Contains(t, errOut, "another migration tool (your own goose table?) applied them")

	code, out, _ = lockgen("doctor", "-db", url, "-json")
	require.Equal(t, exitFail, code, out)
	fix := schemaFix(t, out)
	require.NotContains(t, fix, "lockgen migrate up -db", "the advice that failed again")
	m := regexp.MustCompile(`lockgen migrate up -reconcile`).FindString(fix)
	require.NotEmpty(t, m, fix)
	code, out, errOut = lockgen("migrate", "up", "-reconcile", "-db", url)
	require.Equal(t, exitOK, code, errOut)
	require.Len(t, regexp.MustCompile(`(?m)^recorded `).FindAllString(out, -1), 3, out)
	require.Len(t, regexp.MustCompile(`(?m)^applied `).FindAllString(out, -1), len(list)-3, out)
	code, out, _ = lockgen("doctor", "-db", url, "-json")
	require.Contains(t, out, `"name": "schema",
      "status": "pass"`)
	_ = code
}

// schemaFix is the schema check's fix in doctor -json output.
func schemaFix(t *testing.T, out string) string {
	t.Helper()
	m := regexp.MustCompile(`"name": "schema",\s+"status": "\w+",\s+"detail": "(?:[^"\\]|\\.)*",\s+"fix": "((?:[^"\\]|\\.)*)"`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	return m[1]
}

// requireVersion checks the version migrate status reports.
func requireVersion(t *testing.T, url string, v int64) {
	t.Helper()
	code, out, errOut := lockgen("migrate", "status", "-db", url)
	require.Equal(t, exitOK, code, errOut)
	require.Regexp(t, fmt.Sprintf(`(?m)^(up to date: version %d|the database is at version %d )`, v, v), out)
}

// TestMigrateSQLGoose: migrate sql printed SQL without goose's annotations,
// which goose refuses; -goose prints one goose migration that goose itself
// applies and rolls back, next to the application's own migrations, in
// two files across an upgrade (-to, then -from).
func TestMigrateSQLGoose(t *testing.T) {
	ctx := testdb.Context(t)
	list := embedded(t)
	mid := list[2].Version

	// Control: the plain output is not a goose migration.
	plainDir := t.TempDir()
	code, plain, _ := lockgen("migrate", "sql")
	require.Equal(t, exitOK, code)
	require.NoError(t, os.WriteFile(filepath.Join(plainDir, "20260101000000_lockgen.sql"), []byte(plain), 0o644))
	_, plainURL := testdb.EmptyDatabase(t)
	pp, err := goose.NewProvider(goose.DialectPostgres, openTestDB(t, plainURL), os.DirFS(plainDir), goose.WithDisableGlobalRegistry(true), goose.WithLogger(goose.NopLogger()))
	if err == nil {
		_, err = pp.Up(ctx)
	}
	require.Error(t, err, "goose refuses the psql output")

	dir := t.TempDir()
	write := func(name, text string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644))
	}
	write("20250101000000_orders.sql", "-- +goose Up\nCREATE TABLE orders (id bigint PRIMARY KEY);\n-- +goose Down\nDROP TABLE orders;\n")
	code, first, errOut := lockgen("migrate", "sql", "-goose", "-to", strconv.FormatInt(mid, 10))
	require.Equal(t, exitOK, code, errOut)
	write("20260101000000_lockgen.sql", first)
	code, second, errOut := lockgen("migrate", "sql", "-goose", "-from", strconv.FormatInt(mid, 10))
	require.Equal(t, exitOK, code, errOut)
	write("20270101000000_lockgen_upgrade.sql", second)
	require.Contains(t, first, "-- +goose Up\n")
	require.Contains(t, first, "-- +goose StatementBegin\n")
	require.Contains(t, second, fmt.Sprintf("lockgen migration %d, %s (up)", list[len(list)-1].Version, list[len(list)-1].File))

	_, url := testdb.EmptyDatabase(t)
	db := openTestDB(t, url)
	p, err := goose.NewProvider(goose.DialectPostgres, db, os.DirFS(dir), goose.WithDisableGlobalRegistry(true), goose.WithLogger(goose.NopLogger()))
	require.NoError(t, err)
	res, err := p.Up(ctx)
	require.NoError(t, err)
	require.Len(t, res, 3)
	var id int64
	require.NoError(t, db.QueryRow(`SELECT pgadvisory.lock_id('reports.daily_email')`).Scan(&id))
	require.Equal(t, int64(-6078806957557529815), id)
	mg, err := pgadvisory.NewMigrator(db)
	require.NoError(t, err)
	st, err := mg.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, list[len(list)-1].Version, st.SchemaVersion, "every migration's objects, as lockgen's own would leave them")
	require.False(t, versionTable(t, db), "goose recorded it in its own table")

	_, err = p.DownTo(ctx, 20250101000000)
	require.NoError(t, err)
	require.False(t, schema(t, db), "goose's Down removes lockgen's schema")
	var orders bool
	require.NoError(t, db.QueryRow(`SELECT to_regclass('orders') IS NOT NULL`).Scan(&orders))
	require.True(t, orders)

	code, _, errOut = lockgen("migrate", "sql", "-goose", "-down")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "-goose prints both directions in one file")
	_ = context.Background
}

// withParams adds URL query parameters ("a=b&c=d") to url.
func withParams(url, params string) string {
	if params == "" {
		return url
	}
	if strings.Contains(url, "?") {
		return url + "&" + params
	}
	return url + "?" + params
}
