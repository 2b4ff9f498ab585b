// Package migrated gives a test the package database (testdb) with
// lockgen's schema applied, as an application has it after
// pgadvisory.Migrate: the ID functions, fencing, the run-once ledger, the
// registry and the status view.
//
// Tests that change the schema itself (Migrate's own tests, which drop it)
// share the package database with the tests that use it, so every test that
// needs the schema asks for it here: Migrate is idempotent and cheap once
// applied.
package migrated

import (
	"context"
	"database/sql"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/migrations"
	"github.com/lockgen/lockgen/pgadvisory"
)

// DB returns a database/sql handle on the package database (testdb.DB)
// after applying lockgen's migrations with pgadvisory.Migrate.
func DB(t testing.TB) *sql.DB {
	t.Helper()
	db := testdb.DB(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, pgadvisory.Migrate(ctx, db))
	return db
}

// UpTo returns a database/sql handle on a new, empty database of t's own
// (testdb.EmptyDatabase) with lockgen's migrations applied up to version
// only, as a database that a release of lockgen before version+1 left: the
// controls of tests about what a later migration changed.
func UpTo(t testing.TB, version int64) *sql.DB {
	t.Helper()
	_, url := testdb.EmptyDatabase(t)
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithTableName(pgadvisory.MigrationTable),
		goose.WithDisableGlobalRegistry(true),
		goose.WithLogger(goose.NopLogger()))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = p.UpTo(ctx, version)
	require.NoError(t, err)
	return db
}

// RestoredWithoutSchema migrates a new database of t's own, adds a table of
// the application's (public.orders, two rows), dumps schema public with
// pg_dump -n public (lockgen's version table is there; its schema
// pgadvisory is not) and restores the dump into another new database, as
// an operator copying an application's tables would. It returns a handle
// on the restored database and its URL: its version table claims every
// migration, and the schema pgadvisory does not exist.
func RestoredWithoutSchema(t testing.TB) (*sql.DB, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, srcURL := testdb.EmptyDatabase(t)
	src, err := sql.Open("pgx", srcURL)
	require.NoError(t, err)
	defer src.Close()
	require.NoError(t, pgadvisory.Migrate(ctx, src))
	_, err = src.ExecContext(ctx, `CREATE TABLE public.orders (id bigint PRIMARY KEY); INSERT INTO public.orders VALUES (1), (2)`)
	require.NoError(t, err)
	require.NoError(t, src.Close())

	dump := filepath.Join(t.TempDir(), "public.sql")
	out, err := exec.CommandContext(ctx, pgcluster.Binary(t, "pg_dump"), "-n", "public", "--no-owner", "-f", dump, srcURL).CombinedOutput()
	require.NoError(t, err, string(out))
	_, dstURL := testdb.EmptyDatabase(t)
	dst, err := sql.Open("pgx", dstURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = dst.Close() })
	_, err = dst.ExecContext(ctx, `DROP SCHEMA public`) // the dump creates it
	require.NoError(t, err)
	out, err = exec.CommandContext(ctx, pgcluster.Binary(t, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", dump, dstURL).CombinedOutput()
	require.NoError(t, err, string(out))
	return dst, dstURL
}
