package pgadvisory_test

import (
	"database/sql"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/migrations"
	"github.com/lockgen/lockgen/pgadvisory"
)

// The Migrator judges a database by its objects, not only by what the
// version table claims: a restored dump without the schema, a schema that
// the application's own goose table applied, a standby, a partial
// rollback, a wait for the migration lock.

// restoreWithoutSchema migrates a database, dumps its schema public with
// pg_dump -n public (lockgen's version table lives there, its schema
// pgadvisory does not) and restores the dump into a new database, as an
// operator copying an application's tables would. It returns the new
// database.
func restoreWithoutSchema(t *testing.T) (*sql.DB, string) {
	t.Helper()
	ctx := testdb.Context(t)
	_, srcURL := testdb.EmptyDatabase(t)
	src := openURL(t, srcURL)
	require.NoError(t, pgadvisory.Migrate(ctx, src))
	_, err := src.Exec(`CREATE TABLE public.orders (id bigint PRIMARY KEY); INSERT INTO public.orders VALUES (1), (2)`)
	require.NoError(t, err)

	dump := filepath.Join(t.TempDir(), "public.sql")
	out, err := exec.CommandContext(ctx, pgcluster.Binary(t, "pg_dump"), "-n", "public", "--no-owner", "-f", dump, srcURL).CombinedOutput()
	require.NoError(t, err, string(out))
	_, dstURL := testdb.EmptyDatabase(t)
	dst := openURL(t, dstURL)
	_, err = dst.Exec(`DROP SCHEMA public`) // the dump creates it
	require.NoError(t, err)
	out, err = exec.CommandContext(ctx, pgcluster.Binary(t, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", dump, dstURL).CombinedOutput()
	require.NoError(t, err, string(out))
	return dst, dstURL
}

// TestMigrateRefusesAVersionTableWithoutItsSchema: after the restore the
// version table claims every migration and the schema does not exist.
// Migrate used to say nothing (nothing pending) and leave fencing and
// run-once broken; it now refuses and says what happened and what to do,
// and Reconcile repairs it.
func TestMigrateRefusesAVersionTableWithoutItsSchema(t *testing.T) {
	ctx := testdb.Context(t)
	db, _ := restoreWithoutSchema(t)
	mg, err := pgadvisory.NewMigrator(db)
	require.NoError(t, err)
	latest := mg.Latest()

	// Control: the version table claims every migration.
	st, err := mg.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, latest, st.Current)
	require.Empty(t, st.Pending())
	require.False(t, schemaExists(t, db))

	require.False(t, st.InStep())
	require.Zero(t, st.SchemaVersion)
	require.True(t, st.Reconcilable)
	require.Contains(t, st.Missing, "function pgadvisory.lock_id(text,text[])")
	require.Contains(t, st.Missing, "table pgadvisory.fence")

	for name, call := range map[string]func() error{
		"Migrate": func() error { return pgadvisory.Migrate(ctx, db) },
		"DownTo":  func() error { _, err := mg.DownTo(ctx, 0); return err },
	} {
		err := call()
		require.Error(t, err, name)
		require.ErrorContains(t, err, "but the schema pgadvisory does not exist", name)
		require.ErrorContains(t, err, "pg_dump -n public", name)
		require.ErrorContains(t, err, "lockgen migrate up -reconcile", name)
		require.ErrorContains(t, err, "setval('pgadvisory.fencing_token_seq'", name)
	}
	require.False(t, schemaExists(t, db), "a refusal changes nothing")

	res, err := mg.Reconcile(ctx)
	require.NoError(t, err)
	var forgot, applied int
	for _, r := range res {
		switch {
		case r.Recorded && !r.Up:
			forgot++
		case !r.Recorded && r.Up:
			applied++
		default:
			t.Fatalf("unexpected result %+v", r)
		}
	}
	require.Equal(t, len(mg.Migrations()), forgot, "every record of a gone migration is removed")
	require.Equal(t, len(mg.Migrations()), applied, "and every migration applied again")
	requireMigrated(t, db)
	require.NoError(t, pgadvisory.Migrate(ctx, db))
	st = requireStatus(t, mg, latest)
	require.True(t, st.InStep())
	var orders int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM public.orders`).Scan(&orders))
	require.Equal(t, 2, orders, "the application's tables are untouched")
}

// applyWithOwnGoose applies lockgen's migrations up to version with the
// application's own goose (its default table goose_db_version), as README's
// second path does, and without lockgen's version table.
func applyWithOwnGoose(t *testing.T, db *sql.DB, version int64) {
	t.Helper()
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithDisableGlobalRegistry(true), goose.WithLogger(goose.NopLogger()))
	require.NoError(t, err)
	_, err = p.UpTo(testdb.Context(t), version)
	require.NoError(t, err)
}

// TestMigrateRefusesASchemaAnotherGooseApplied: the application's goose
// table applied lockgen's schema. Migrate used to fail at migration 1
// ("schema already exists") and Status said "never migrated"; it now says
// which migrations the objects show and what to do, creating nothing, and
// Reconcile hands the schema to lockgen. It also works when a failed
// Migrate of an older lockgen left lockgen's version table empty.
func TestMigrateRefusesASchemaAnotherGooseApplied(t *testing.T) {
	ctx := testdb.Context(t)
	list, err := pgadvisory.Migrations()
	require.NoError(t, err)
	latest := list[len(list)-1].Version
	for _, tc := range []struct {
		name       string
		upTo       int64
		emptyTable bool
	}{
		{"all", latest, false},
		{"all, lockgen's table empty", latest, true},
		{"some", list[2].Version, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := emptyDB(t)
			applyWithOwnGoose(t, db, tc.upTo)
			if tc.emptyTable {
				// What goose leaves when Migrate failed at migration 1.
				_, err := db.Exec(`CREATE TABLE ` + pgadvisory.MigrationTable + ` (id integer PRIMARY KEY GENERATED BY DEFAULT AS IDENTITY,
					version_id bigint NOT NULL, is_applied boolean NOT NULL, tstamp timestamp NOT NULL DEFAULT now());
					INSERT INTO ` + pgadvisory.MigrationTable + ` (version_id, is_applied) VALUES (0, true)`)
				require.NoError(t, err)
			}
			mg, err := pgadvisory.NewMigrator(db)
			require.NoError(t, err)
			st, err := mg.Status(ctx)
			require.NoError(t, err)
			require.Equal(t, tc.emptyTable, st.Tracked)
			require.Zero(t, st.Current)
			require.Equal(t, tc.upTo, st.SchemaVersion)
			require.True(t, st.Reconcilable)
			require.NotEmpty(t, st.Untracked)

			err = pgadvisory.Migrate(ctx, db)
			require.Error(t, err)
			require.NotContains(t, err.Error(), "already exists", "refused before goose runs migration 1")
			require.ErrorContains(t, err, "another migration tool (your own goose table?) applied them")
			require.ErrorContains(t, err, "lockgen migrate sql -goose -from")
			require.ErrorContains(t, err, "lockgen migrate up -reconcile")
			require.Equal(t, tc.emptyTable, versionTableExists(t, db), "a refusal creates nothing")

			res, err := mg.Reconcile(ctx)
			require.NoError(t, err)
			var recorded, applied []int64
			for _, r := range res {
				require.True(t, r.Up, "%+v", r)
				if r.Recorded {
					recorded = append(recorded, r.Migration.Version)
				} else {
					applied = append(applied, r.Migration.Version)
				}
			}
			for _, m := range list {
				if m.Version <= tc.upTo {
					require.Contains(t, recorded, m.Version)
				} else {
					require.Contains(t, applied, m.Version)
				}
			}
			requireMigrated(t, db)
			require.NoError(t, pgadvisory.Migrate(ctx, db))
			var own int
			require.NoError(t, db.QueryRow(`SELECT count(*) FROM goose_db_version WHERE version_id > 0`).Scan(&own))
			require.Equal(t, int(tc.upTo), own, "the application's goose table is left as it was")
		})
	}
}

// TestReconcileRefusesObjectsOfNoVersion: a schema missing one object of
// an early migration while later ones exist matches no version; Reconcile
// changes nothing and says what is missing.
func TestReconcileRefusesObjectsOfNoVersion(t *testing.T) {
	ctx := testdb.Context(t)
	db := emptyDB(t)
	require.NoError(t, pgadvisory.Migrate(ctx, db))
	_, err := db.Exec(`DROP FUNCTION pgadvisory.register_instance(text, text[])`)
	require.NoError(t, err)
	mg, err := pgadvisory.NewMigrator(db)
	require.NoError(t, err)
	st, err := mg.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"function pgadvisory.register_instance(text,text[])"}, st.Missing)
	require.False(t, st.Reconcilable)
	before := readMigrationState(t, db)
	err = pgadvisory.Migrate(ctx, db)
	require.ErrorContains(t, err, "1 of their objects are missing: function pgadvisory.register_instance(text,text[])")
	_, err = mg.Reconcile(ctx)
	require.ErrorContains(t, err, "match no version of lockgen's schema")
	require.Equal(t, before, readMigrationState(t, db))
}

// TestMigrateRefusesAStandby: on a hot standby, Migrate and DownTo used to
// return the server's raw read-only error (25006) from inside goose; they
// now refuse first with ErrStandby and say to migrate on the primary.
func TestMigrateRefusesAStandby(t *testing.T) {
	ctx := testdb.Context(t)
	primary := pgcluster.Start(t)
	standby := primary.StartStandby(t)
	db := openURL(t, standby.URL())
	err := pgadvisory.Migrate(ctx, db)
	require.ErrorIs(t, err, pgadvisory.ErrStandby)
	require.ErrorContains(t, err, "migrate on the primary")
	mg, err := pgadvisory.NewMigrator(db)
	require.NoError(t, err)
	_, err = mg.DownTo(ctx, 0)
	require.ErrorIs(t, err, pgadvisory.ErrNotMigrated, "nothing to roll back is said before the standby")
	// Control: the primary migrates.
	require.NoError(t, pgadvisory.Migrate(ctx, openURL(t, primary.URL())))
	require.Eventually(t, func() bool { return schemaExists(t, db) }, 30*time.Second, 20*time.Millisecond)
	_, err = mg.DownTo(ctx, 0)
	require.ErrorIs(t, err, pgadvisory.ErrStandby)
}

// TestMigratorDownReportsWhatRanBeforeAnError: a table using a trigger
// function of migration 6 makes rolling back 6 fail after 7 was rolled
// back. DownTo used to return no result with the error; it now reports 7.
func TestMigratorDownReportsWhatRanBeforeAnError(t *testing.T) {
	ctx := testdb.Context(t)
	db := emptyDB(t)
	mg, err := pgadvisory.NewMigrator(db)
	require.NoError(t, err)
	_, err = mg.Up(ctx)
	require.NoError(t, err)
	_, err = db.Exec(`CREATE TABLE public.entries (id bigint, fencing_token bigint);
		CREATE TRIGGER entries_stamp BEFORE INSERT ON public.entries FOR EACH ROW EXECUTE FUNCTION pgadvisory.fence_stamp()`)
	require.NoError(t, err)
	list := mg.Migrations()
	latest := list[len(list)-1]
	res, err := mg.DownTo(ctx, 0)
	require.Error(t, err)
	require.ErrorContains(t, err, "cannot drop function pgadvisory.fence_stamp()")
	require.Len(t, res, 1, "what ran before the error")
	require.Equal(t, latest.Version, res[0].Migration.Version)
	require.False(t, res[0].Up)
	requireStatus(t, mg, list[len(list)-2].Version)
}

// TestMigratorReportsTheLockHolder: while another session holds the
// migration lock, Up reports who holds it (pid, application_name) every
// interval, and its error names the holder when the wait ends.
func TestMigratorReportsTheLockHolder(t *testing.T) {
	ctx := testdb.Context(t)
	_, url := testdb.EmptyDatabase(t)
	db := openURL(t, url)
	holder, err := db.Conn(ctx)
	require.NoError(t, err)
	defer holder.Close()
	_, err = holder.ExecContext(ctx, `SET application_name = 'holder-of-the-migration-lock'`)
	require.NoError(t, err)
	var holderPID int
	require.NoError(t, holder.QueryRowContext(ctx, `SELECT pg_backend_pid() FROM (SELECT pg_advisory_lock($1)) AS l`, pgadvisory.MigrationLockID).Scan(&holderPID))

	_, err = pgadvisory.NewMigrator(db, pgadvisory.WithMigrationLockReport(time.Millisecond, func(pgadvisory.MigrationLockHolder) {}))
	require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument)

	var mu sync.Mutex
	var reports []pgadvisory.MigrationLockHolder
	mg, err := pgadvisory.NewMigrator(db, pgadvisory.WithMigrationLockWait(2*time.Second),
		pgadvisory.WithMigrationLockReport(200*time.Millisecond, func(h pgadvisory.MigrationLockHolder) {
			mu.Lock()
			defer mu.Unlock()
			reports = append(reports, h)
		}))
	require.NoError(t, err)
	_, err = mg.Up(ctx)
	require.Error(t, err)
	require.ErrorContains(t, err, "was not free within 2s: held by pid ")
	require.ErrorContains(t, err, `application_name "holder-of-the-migration-lock"`)
	require.False(t, schemaExists(t, db))
	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, len(reports), 3, "a report every 200ms for 2s")
	for _, r := range reports {
		require.Equal(t, holderPID, r.PID)
		require.Equal(t, "holder-of-the-migration-lock", r.ApplicationName)
		require.Positive(t, r.Waited)
	}
}
