package doctor_test

import (
	"context"
	"database/sql"
	"net/url"
	"strconv"
	"testing"

	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/doctor"
	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/keyspace"
	"github.com/lockgen/lockgen/migrations"
	"github.com/lockgen/lockgen/pgadvisory"
)

// The schema check on databases in every state: never migrated, partly
// migrated, migrated, rolled back, migrated by a newer lockgen, by another
// tool, restored from a dump without the schema, and read by a role that
// may not read the version table.

var fenced = doctor.Config{Source: "locks.yaml", Declared: []pgadvisory.Declared{{Name: "ledger.post", ID: 1, Fencing: true}}}

func TestSchema(t *testing.T) {
	ctx := context.Background()
	list, err := pgadvisory.Migrations()
	require.NoError(t, err)
	latest := list[len(list)-1].Version

	t.Run("missing", func(t *testing.T) {
		url := emptyDatabase(t, nil)
		requireStatus(t, run(t, url, doctor.Schema), doctor.Warn, "lockgen's schema is missing", "no table public.pgadvisory_db_version", "RunExclusive and RunSession do not")
		requireStatus(t, run(t, url, doctor.Schema, fenced), doctor.Fail, "declares fenced locks (ledger.post)", "ErrNotMigrated")
	})
	t.Run("partly", func(t *testing.T) {
		url := emptyDatabase(t, nil)
		m := migrator(t, url)
		_, err := m.UpTo(ctx, list[0].Version)
		require.NoError(t, err)
		requireStatus(t, run(t, url, doctor.Schema), doctor.Fail, list[1].File, "are missing")
	})
	t.Run("migrated", func(t *testing.T) {
		url := emptyDatabase(t, nil)
		_, err := migrator(t, url).Up(ctx)
		require.NoError(t, err)
		requireStatus(t, run(t, url, doctor.Schema), doctor.Pass, "lockgen's migrations are applied", "the objects they create exist")
		requireStatus(t, run(t, url, doctor.Schema, fenced), doctor.Pass, "lockgen's migrations are applied")
	})
	// The token sequence behind a published token (an asynchronous
	// failover lost its advance): fenced acquisitions of that lock fail with
	// LF004 until pgadvisory.fence_advance, which the fix names, runs.
	t.Run("tokens behind", func(t *testing.T) {
		url := emptyDatabase(t, nil)
		_, err := migrator(t, url).Up(ctx)
		require.NoError(t, err)
		db := openPlain(t, url)
		fencing.PublishAhead(t, db, testdb.Key(t))
		c := run(t, url, doctor.Schema)
		requireStatus(t, c, doctor.Fail, "the fencing token sequence is behind a published token")
		require.Contains(t, c.Fix, "SELECT pgadvisory.fence_advance()")
		require.Contains(t, c.Fix, "lockgen fence -advance")
		_, err = db.Exec(`SELECT pgadvisory.fence_advance()`)
		require.NoError(t, err)
		requireStatus(t, run(t, url, doctor.Schema), doctor.Pass, "lockgen's migrations are applied")
	})
	// Rolled back to 0, the version table exists and records nothing: the
	// same state as without it, so fenced locks fail here too (they only
	// warned).
	t.Run("rolled back", func(t *testing.T) {
		url := emptyDatabase(t, nil)
		m := migrator(t, url)
		_, err := m.Up(ctx)
		require.NoError(t, err)
		_, err = m.DownTo(ctx, 0)
		require.NoError(t, err)
		requireStatus(t, run(t, url, doctor.Schema), doctor.Warn, "lockgen's schema is missing", "records no migration")
		requireStatus(t, run(t, url, doctor.Schema, fenced), doctor.Fail, "declares fenced locks (ledger.post)", "ErrNotMigrated")
	})
	t.Run("newer", func(t *testing.T) {
		url := emptyDatabase(t, nil)
		m := migrator(t, url)
		_, err := m.Up(ctx)
		require.NoError(t, err)
		_, err = openPlain(t, url).Exec(`INSERT INTO `+pgadvisory.MigrationTable+` (version_id, is_applied) VALUES ($1, true)`, m.Latest()+1)
		require.NoError(t, err)
		requireStatus(t, run(t, url, doctor.Schema), doctor.Warn, "newer than this lockgen")
	})
	// Another tool sent every migration's SQL: lockgen's version table is
	// absent. pgadvisory.Migrate would refuse it, so this fails for every
	// use and warns when the service does not call Migrate.
	t.Run("another tool", func(t *testing.T) {
		url := emptyDatabase(t, nil)
		for _, m := range list {
			_, err := openPlain(t, url).Exec("BEGIN;\n" + m.UpSQL + "\nCOMMIT;")
			require.NoError(t, err)
		}
		c := run(t, url, doctor.Schema)
		requireStatus(t, c, doctor.Fail, "another migration tool", "up to "+strconv.FormatInt(latest, 10))
		require.Contains(t, c.Fix, "lockgen migrate up -reconcile")
		requireStatus(t, run(t, url, doctor.Schema, doctor.Config{Uses: []doctor.Use{doctor.UseExclusive, doctor.UseSession}}), doctor.Warn,
			"another migration tool", "pgadvisory.Migrate is not used")
	})
	// The application's goose table applied lockgen's first migrations, and
	// a pgadvisory.Migrate failed on them: doctor used to say "lockgen
	// migrate up", which failed again. It now says what happened and how
	// to get out, and migrate up -reconcile (Reconcile) does.
	t.Run("own goose", func(t *testing.T) {
		url := emptyDatabase(t, nil)
		db := openPlain(t, url)
		p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS, goose.WithDisableGlobalRegistry(true), goose.WithLogger(goose.NopLogger()))
		require.NoError(t, err)
		_, err = p.UpTo(ctx, list[2].Version)
		require.NoError(t, err)
		m := migrator(t, url)
		_, err = m.Up(ctx)
		require.ErrorContains(t, err, "lockgen migrate up -reconcile")
		c := run(t, url, doctor.Schema)
		requireStatus(t, c, doctor.Fail, "another migration tool (your own goose table?)", "up to "+strconv.FormatInt(list[2].Version, 10))
		require.NotContains(t, c.Fix, "lockgen migrate up -db", "advice that would fail again")
		require.Contains(t, c.Fix, "lockgen migrate up -reconcile")
		_, err = m.Reconcile(ctx)
		require.NoError(t, err)
		requireStatus(t, run(t, url, doctor.Schema), doctor.Pass, "lockgen's migrations are applied")
	})
	// pg_dump -n public restored: the version table claims every migration
	// and the schema does not exist. Doctor used to pass ("all applied").
	t.Run("restored without the schema", func(t *testing.T) {
		db, url := migrated.RestoredWithoutSchema(t)
		c := run(t, url, doctor.Schema)
		requireStatus(t, c, doctor.Fail, "records migrations up to "+strconv.FormatInt(latest, 10), "the schema pgadvisory does not exist", "pg_dump -n public")
		require.Contains(t, c.Fix, "lockgen migrate up -reconcile")
		requireStatus(t, run(t, url, doctor.Schema, fenced), doctor.Fail, "the schema pgadvisory does not exist")
		_, err := migrator(t, url).Reconcile(ctx)
		require.NoError(t, err)
		requireStatus(t, run(t, url, doctor.Schema), doctor.Pass, "the objects they create exist")
		_ = db
	})
	t.Run("an object dropped", func(t *testing.T) {
		url := emptyDatabase(t, nil)
		_, err := migrator(t, url).Up(ctx)
		require.NoError(t, err)
		_, err = openPlain(t, url).Exec(`DROP FUNCTION pgadvisory.fence_acquire(bigint[], boolean, text, text)`)
		require.NoError(t, err)
		requireStatus(t, run(t, url, doctor.Schema), doctor.Fail, "1 of their objects are missing: function pgadvisory.fence_acquire(bigint[],boolean,text,text)")
	})
}

// TestSchemaAsTheApplicationsRole: the application's own role may not read
// lockgen's version table, which the migrating role owns. Doctor used to
// fail schema on it without naming the grant; it now judges the schema by
// its objects, names the GRANT when the service calls pgadvisory.Migrate,
// and the GRANT it names fixes it.
func TestSchemaAsTheApplicationsRole(t *testing.T) {
	ctx := context.Background()
	name, url := testdb.EmptyDatabase(t)
	owner := openPlain(t, url)
	_, err := migrator(t, url).Up(ctx)
	require.NoError(t, err)
	role := fencing.AppRole(t, owner)
	asRole := urlAs(t, url, role)
	_ = name

	c := run(t, asRole, doctor.Schema)
	requireStatus(t, c, doctor.Fail, "the role "+role+" may not read lockgen's version table public.pgadvisory_db_version", "judged by their objects", "pgadvisory.Migrate run by this role fails")
	require.Contains(t, c.Fix, "GRANT SELECT ON public.pgadvisory_db_version TO "+role)
	requireStatus(t, run(t, asRole, doctor.Schema, doctor.Config{Uses: []doctor.Use{doctor.UseExclusive}}), doctor.Pass,
		"judged by their objects", "does not need the version table")

	grant := c.Fix[:len("GRANT SELECT ON public.pgadvisory_db_version TO "+role)]
	_, err = owner.Exec(grant)
	require.NoError(t, err, grant)
	requireStatus(t, run(t, asRole, doctor.Schema), doctor.Pass, "lockgen's migrations are applied")
	require.NoError(t, pgadvisory.Migrate(ctx, openPlain(t, asRole)), "Migrate with nothing pending works for the role after the GRANT")
}

// urlAs is url with role as its user.
func urlAs(t *testing.T, raw, role string) string {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	u.User = url.User(role)
	return u.String()
}

func migrator(t *testing.T, url string) *pgadvisory.Migrator {
	t.Helper()
	m, err := pgadvisory.NewMigrator(openPlain(t, url))
	require.NoError(t, err)
	return m
}

func openPlain(t *testing.T, url string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// TestRunAsTheApplicationsRole: every check, run with the application's
// own role (as docs/operations.md says to run doctor) on a database another role
// migrated and registered: none fails for want of a privilege without
// naming the GRANT, and the registry's GRANT, once run, lets it compare.
func TestRunAsTheApplicationsRole(t *testing.T) {
	ctx := context.Background()
	_, url := testdb.EmptyDatabase(t)
	owner := openPlain(t, url)
	_, err := migrator(t, url).Up(ctx)
	require.NoError(t, err)
	decl := pgadvisory.Declared{Name: "reports.daily_email", ID: keyspace.ID("reports.daily_email")}
	require.NoError(t, pgadvisory.Register(ctx, owner, []pgadvisory.Declared{decl}))
	role := fencing.AppRole(t, owner)
	asRole := urlAs(t, url, role)
	cfg := doctor.Config{Declared: []pgadvisory.Declared{decl}, Source: "locks.yaml", Uses: []doctor.Use{doctor.UseExclusive}}

	cfg.DB = open(t, asRole)
	r, err := doctor.Run(ctx, cfg)
	require.NoError(t, err)
	for _, c := range r.Checks {
		t.Logf("%s %s: %s | fix: %s", c.Status, c.Name, c.Detail, c.Fix)
		require.NotContains(t, c.Fix, "make sure the role can read", "%s: a privilege problem names its GRANT", c.Name)
		require.NotEqual(t, doctor.Fail, c.Status, c.Name)
	}
	reg := r.Checks[len(r.Checks)-1]
	require.Equal(t, doctor.Registry, reg.Name)
	requireStatus(t, reg, doctor.Warn, "this role may not read the registry")
	require.Equal(t, "GRANT SELECT ON pgadvisory.registry_declaration TO "+role+" (as its owner), or run doctor -f with the role that registers", reg.Fix)
	_, err = owner.Exec(`GRANT SELECT ON pgadvisory.registry_declaration TO ` + role)
	require.NoError(t, err)
	requireStatus(t, run(t, asRole, doctor.Registry, cfg), doctor.Pass, "as declared")
}
