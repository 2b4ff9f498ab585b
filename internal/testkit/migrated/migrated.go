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
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

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
