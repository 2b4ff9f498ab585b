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

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
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
