package pgadvisory_test

import (
	"context"
	"database/sql"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/migrations"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Migrator's stories: migrate to a version and back, report the status,
// refuse bad requests without changing anything, work on a pgx pool, and
// hand out the SQL for teams that apply it with their own tool. Each test
// has a database of its own (testdb.EmptyDatabase), so the number of
// migrations is read from Migrations(), never written down.

func TestMigrationsAreTheEmbeddedFiles(t *testing.T) {
	list, err := pgadvisory.Migrations()
	require.NoError(t, err)
	var versions []int64
	for _, m := range list {
		versions = append(versions, m.Version)
		require.True(t, strings.HasPrefix(m.File, "0"), m.File)
		require.NotEmpty(t, m.Name(), m.File)
		require.Contains(t, m.UpSQL, "CREATE", m.File)
		require.Contains(t, m.DownSQL, "DROP", m.File)
		require.NotContains(t, m.UpSQL+m.DownSQL, "+goose", "goose annotations are dropped: %s", m.File)
		require.NotContains(t, m.UpSQL, m.DownSQL, "the Down section is not part of Up: %s", m.File)
		require.Equal(t, m.UpSQL, m.SQL(true))
		require.Equal(t, m.DownSQL, m.SQL(false))
		file, err := fs.ReadFile(migrations.FS, m.File)
		require.NoError(t, err)
		require.Equal(t, string(file), m.Goose, "Goose is the file as embedded")
		for _, d := range m.Drops {
			require.Regexp(t, `^(table|sequence) pgadvisory\.\w+$`, d)
		}
	}
	require.Equal(t, embeddedVersions(t), versions)
	require.Equal(t, "lock_id", list[0].Name())
	// The state that rolling back 00002 destroys: the run-once ledger, the
	// published tokens and the token sequence.
	require.Equal(t, []string{"table pgadvisory.run_once", "table pgadvisory.fence", "sequence pgadvisory.fencing_token_seq"}, list[1].Drops)
	require.Empty(t, list[0].Drops, "00001 drops functions and the schema only")
}

// TestMigrationsAppliedByAnotherTool: the path of teams whose own migration
// tool applies lockgen's schema. Each migration's UpSQL, sent as one script
// in one transaction as flyway or golang-migrate would, gives the same
// objects as Migrate; DownSQL in reverse order removes them all. lockgen's
// version table is not involved, and Status says so.
func TestMigrationsAppliedByAnotherTool(t *testing.T) {
	ctx := testdb.Context(t)
	_, ownURL := testdb.EmptyDatabase(t)
	_, lockgenURL := testdb.EmptyDatabase(t)
	own, viaLockgen := openURL(t, ownURL), openURL(t, lockgenURL)

	list, err := pgadvisory.Migrations()
	require.NoError(t, err)
	for _, m := range list {
		runScript(t, own, m.UpSQL, m.NoTransaction)
	}
	require.NoError(t, pgadvisory.Migrate(ctx, viaLockgen))
	require.Equal(t, schemaObjects(t, viaLockgen), schemaObjects(t, own))
	var id int64
	require.NoError(t, own.QueryRow(`SELECT pgadvisory.lock_id('reports.daily_email')`).Scan(&id))
	require.Equal(t, int64(-6078806957557529815), id)

	mg, err := pgadvisory.NewMigrator(own)
	require.NoError(t, err)
	st, err := mg.Status(ctx)
	require.NoError(t, err)
	require.False(t, st.Tracked, "lockgen's version table is not part of the SQL")
	require.Len(t, st.Pending(), len(list))

	for i := len(list) - 1; i >= 0; i-- {
		runScript(t, own, list[i].DownSQL, list[i].NoTransaction)
	}
	require.False(t, schemaExists(t, own), "Down in reverse order removes the schema")
}

func TestMigratorUpToAndDownTo(t *testing.T) {
	ctx := testdb.Context(t)
	db := emptyDB(t)
	mg, err := pgadvisory.NewMigrator(db)
	require.NoError(t, err)
	list := mg.Migrations()
	first, latest := list[0].Version, mg.Latest()

	res, err := mg.UpTo(ctx, first)
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.True(t, res[0].Up)
	require.Equal(t, first, res[0].Migration.Version)
	st := requireStatus(t, mg, first)
	require.True(t, st.Migrations[0].Applied)
	require.False(t, st.Migrations[0].AppliedAt.IsZero())
	require.Len(t, st.Pending(), len(list)-1)
	require.False(t, st.UpToDate())

	res, err = mg.Up(ctx)
	require.NoError(t, err)
	require.Len(t, res, len(list)-1)
	require.True(t, requireStatus(t, mg, latest).UpToDate())

	res, err = mg.UpTo(ctx, first) // already above: nothing to do
	require.NoError(t, err)
	require.Empty(t, res)

	res, err = mg.DownTo(ctx, first)
	require.NoError(t, err)
	require.Len(t, res, len(list)-1)
	for i, r := range res {
		require.False(t, r.Up)
		require.Equal(t, list[len(list)-1-i].Version, r.Migration.Version, "newest first")
	}
	requireStatus(t, mg, first)
	require.True(t, schemaExists(t, db))

	res, err = mg.DownTo(ctx, 0)
	require.NoError(t, err)
	require.Len(t, res, 1)
	requireStatus(t, mg, 0)
	require.False(t, schemaExists(t, db))

	// Migrate after a full Down starts over.
	require.NoError(t, pgadvisory.Migrate(ctx, db))
	requireStatus(t, mg, latest)
}

func TestMigratorDownRollsBackOne(t *testing.T) {
	ctx := testdb.Context(t)
	db := emptyDB(t)
	mg, err := pgadvisory.NewMigrator(db)
	require.NoError(t, err)
	_, err = mg.Up(ctx)
	require.NoError(t, err)
	list := mg.Migrations()

	res, err := mg.Down(ctx)
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Equal(t, mg.Latest(), res[0].Migration.Version)
	require.False(t, res[0].Up)
	want := int64(0)
	if len(list) > 1 {
		want = list[len(list)-2].Version
	}
	requireStatus(t, mg, want)
}

// TestMigratorRefusesBadRequests: the requests a user gets wrong are refused
// with a typed error that says what is wrong, and change nothing: not even
// the version table appears on a database that lockgen never migrated.
func TestMigratorRefusesBadRequests(t *testing.T) {
	ctx := testdb.Context(t)
	db := emptyDB(t)
	mg, err := pgadvisory.NewMigrator(db)
	require.NoError(t, err)
	latest := mg.Latest()

	refused := func(kind error, want string, call func() ([]pgadvisory.MigrationResult, error)) {
		t.Helper()
		res, err := call()
		require.ErrorIs(t, err, kind)
		require.Empty(t, res)
		require.True(t, strings.HasPrefix(err.Error(), "pgadvisory: migrate: "), err.Error())
		require.Contains(t, err.Error(), want)
	}
	unmigrated := func() {
		t.Helper()
		require.False(t, versionTableExists(t, db), "a refused request must not create the version table")
		require.False(t, schemaExists(t, db))
	}

	st, err := mg.Status(ctx)
	require.NoError(t, err)
	require.False(t, st.Tracked)
	require.Zero(t, st.Current)
	unmigrated()

	refused(pgadvisory.ErrNotMigrated, "nothing to roll back", func() ([]pgadvisory.MigrationResult, error) { return mg.Down(ctx) })
	unmigrated()
	refused(pgadvisory.ErrNotMigrated, "does not exist", func() ([]pgadvisory.MigrationResult, error) { return mg.DownTo(ctx, 0) })
	unmigrated()
	refused(pgadvisory.ErrInvalidArgument, "a version is 0 (no migration) or more", func() ([]pgadvisory.MigrationResult, error) { return mg.DownTo(ctx, -1) })
	refused(pgadvisory.ErrInvalidArgument, "unknown version", func() ([]pgadvisory.MigrationResult, error) { return mg.UpTo(ctx, latest+1) })
	refused(pgadvisory.ErrInvalidArgument, "unknown version 0", func() ([]pgadvisory.MigrationResult, error) { return mg.UpTo(ctx, 0) })
	unmigrated()

	// Migrated: the same bad requests leave the version table as it is.
	_, err = mg.Up(ctx)
	require.NoError(t, err)
	before := readMigrationState(t, db)
	refused(pgadvisory.ErrInvalidArgument, "below", func() ([]pgadvisory.MigrationResult, error) { return mg.DownTo(ctx, -1) })
	refused(pgadvisory.ErrInvalidArgument, "unknown version", func() ([]pgadvisory.MigrationResult, error) { return mg.DownTo(ctx, latest+1) })
	refused(pgadvisory.ErrInvalidArgument, "unknown version", func() ([]pgadvisory.MigrationResult, error) { return mg.UpTo(ctx, latest+1) })
	require.Equal(t, before, readMigrationState(t, db))

	// All rolled back, with the version table left: nothing to roll back.
	_, err = mg.DownTo(ctx, 0)
	require.NoError(t, err)
	refused(pgadvisory.ErrNotMigrated, "no lockgen migration is applied", func() ([]pgadvisory.MigrationResult, error) { return mg.Down(ctx) })

	_, err = pgadvisory.NewMigrator(nil)
	require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument)
	_, err = pgadvisory.NewMigratorPgx(nil)
	require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument)
	_, err = pgadvisory.NewMigrator(db, pgadvisory.WithMigrationLockWait(0))
	require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument)
}

// TestMigratorRefusesUnknownAppliedVersions: a database migrated by a newer
// lockgen has versions this one does not know. Status lists them; rolling
// back across them is refused and changes nothing.
func TestMigratorRefusesUnknownAppliedVersions(t *testing.T) {
	ctx := testdb.Context(t)
	db := emptyDB(t)
	mg, err := pgadvisory.NewMigrator(db)
	require.NoError(t, err)
	_, err = mg.Up(ctx)
	require.NoError(t, err)
	future := mg.Latest() + 100
	_, err = db.Exec(`INSERT INTO `+pgadvisory.MigrationTable+` (version_id, is_applied) VALUES ($1, true)`, future)
	require.NoError(t, err)

	st, err := mg.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, []int64{future}, st.Unknown)
	require.Equal(t, future, st.Current)
	require.True(t, st.UpToDate(), "every migration this lockgen knows is applied")

	before := readMigrationState(t, db)
	for _, call := range []func() ([]pgadvisory.MigrationResult, error){
		func() ([]pgadvisory.MigrationResult, error) { return mg.Down(ctx) },
		func() ([]pgadvisory.MigrationResult, error) { return mg.DownTo(ctx, 0) },
	} {
		_, err := call()
		require.ErrorContains(t, err, "which this lockgen does not know")
		require.Equal(t, before, readMigrationState(t, db))
	}
}

// TestMigratorPgx: the pgx front door migrates through the pool, and Close
// leaves the pool open.
func TestMigratorPgx(t *testing.T) {
	ctx := testdb.Context(t)
	_, url := testdb.EmptyDatabase(t)
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	mg, err := pgadvisory.NewMigratorPgx(pool)
	require.NoError(t, err)
	res, err := mg.Up(ctx)
	require.NoError(t, err)
	require.Len(t, res, len(mg.Migrations()))
	st, err := mg.Status(ctx)
	require.NoError(t, err)
	require.True(t, st.UpToDate())
	require.NoError(t, mg.Close())

	var id int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT pgadvisory.lock_id('reports.daily_email')`).Scan(&id))
	require.Equal(t, int64(-6078806957557529815), id)
}

// TestMigratorDownWaitsForTheMigrationLock: Down takes the same lock as
// Migrate; WithMigrationLockWait bounds the wait, and a Down that gave up
// removed nothing. The control is TestMigratorUpToAndDownTo, where the same
// Down runs without a holder.
func TestMigratorDownWaitsForTheMigrationLock(t *testing.T) {
	ctx := testdb.Context(t)
	db := emptyDB(t)
	require.NoError(t, pgadvisory.Migrate(ctx, db))
	holder, err := db.Conn(ctx)
	require.NoError(t, err)
	defer holder.Close()
	_, err = holder.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, pgadvisory.MigrationLockID)
	require.NoError(t, err)

	mg, err := pgadvisory.NewMigrator(db, pgadvisory.WithMigrationLockWait(time.Second))
	require.NoError(t, err)
	before := readMigrationState(t, db)
	_, err = mg.DownTo(ctx, 0)
	require.Error(t, err)
	require.True(t, strings.HasPrefix(err.Error(), "pgadvisory: migrate: down to 0: "), err.Error())
	require.Equal(t, before, readMigrationState(t, db))
	require.True(t, schemaExists(t, db))
}

// TestMigratorRefusesTransactionPoolerForDown: like Migrate, a rollback
// through PgBouncer in transaction mode is refused before the session lock.
func TestMigratorRefusesTransactionPoolerForDown(t *testing.T) {
	ctx := testdb.Context(t)
	_, url := testdb.EmptyDatabase(t)
	direct := openURL(t, url)
	require.NoError(t, pgadvisory.Migrate(ctx, direct))
	bounced := openURL(t, pgcluster.StartPgBouncer(t, url, "transaction")+"&default_query_exec_mode=simple_protocol")

	mg, err := pgadvisory.NewMigrator(bounced)
	require.NoError(t, err)
	st, err := mg.Status(ctx) // reading needs no session lock
	require.NoError(t, err)
	require.True(t, st.UpToDate())
	_, err = mg.DownTo(ctx, 0)
	require.ErrorIs(t, err, pgadvisory.ErrTransactionPooler)
	require.True(t, schemaExists(t, direct))
}

// emptyDB is a database of t's own without lockgen's schema.
func emptyDB(t *testing.T) *sql.DB {
	t.Helper()
	_, url := testdb.EmptyDatabase(t)
	return openURL(t, url)
}

func openURL(t *testing.T, url string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// runScript sends one migration's SQL as one script, in a transaction
// unless noTx, the way migration tools that do not split statements do.
func runScript(t *testing.T, db *sql.DB, script string, noTx bool) {
	t.Helper()
	if !noTx {
		script = "BEGIN;\n" + script + "\nCOMMIT;"
	}
	_, err := db.Exec(script)
	require.NoError(t, err, script)
}

// requireStatus checks Status's current version and that Applied agrees
// with it, and returns the status.
func requireStatus(t *testing.T, mg *pgadvisory.Migrator, current int64) *pgadvisory.MigrationStatus {
	t.Helper()
	st, err := mg.Status(context.Background())
	require.NoError(t, err)
	require.True(t, st.Tracked)
	require.Equal(t, current, st.Current)
	require.Equal(t, mg.Latest(), st.Latest)
	require.Empty(t, st.Unknown)
	for _, s := range st.Migrations {
		require.Equal(t, s.Version <= current, s.Applied, "version %d", s.Version)
	}
	return st
}

func versionTableExists(t *testing.T, db *sql.DB) bool {
	t.Helper()
	var ok bool
	require.NoError(t, db.QueryRow(`SELECT to_regclass($1) IS NOT NULL`, pgadvisory.MigrationTable).Scan(&ok))
	return ok
}

// schemaObjects lists what the schema pgadvisory holds: relations,
// functions (with arguments), triggers' functions and the sequence.
func schemaObjects(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.Query(`
		SELECT 'rel ' || c.relname || ' ' || c.relkind::text FROM pg_class c
		WHERE c.relnamespace = 'pgadvisory'::regnamespace
		UNION ALL
		SELECT 'fn ' || p.oid::regprocedure::text FROM pg_proc p
		WHERE p.pronamespace = 'pgadvisory'::regnamespace
		UNION ALL
		SELECT 'col ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
		FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		WHERE c.relnamespace = 'pgadvisory'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY 1`)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, out)
	return out
}
