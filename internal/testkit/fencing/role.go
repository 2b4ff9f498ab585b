package fencing

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// AppRole creates a login role that is not a superuser and owns nothing:
// an application's role, with only what PUBLIC has on lockgen's schema. It
// is dropped when t ends, after its privileges in the databases of admins
// (handles of a superuser) are dropped. The test server trusts every role,
// so [OpenAs] can connect as it.
func AppRole(t testing.TB, admins ...*sql.DB) string {
	t.Helper()
	require.NotEmpty(t, admins)
	name := fmt.Sprintf("lockgen_app_%d", testdb.Key(t))
	_, err := admins[0].Exec(`CREATE ROLE ` + name + ` LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE`)
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, db := range admins {
			_, _ = db.Exec(`DROP OWNED BY ` + name)
		}
		_, _ = admins[0].Exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, name)
		if _, err := admins[0].Exec(`DROP ROLE ` + name); err != nil {
			t.Logf("fencing: dropping role %s: %v", name, err)
		}
	})
	return name
}

// OpenAs opens a database/sql handle on admin's database (on the test
// server) that connects as role, closed when t ends.
func OpenAs(t testing.TB, admin *sql.DB, role string) *sql.DB {
	t.Helper()
	var dbname string
	require.NoError(t, admin.QueryRowContext(context.Background(), `SELECT current_database()`).Scan(&dbname))
	cfg, err := pgx.ParseConfig(testdb.URL(t))
	require.NoError(t, err)
	cfg.Database, cfg.User = dbname, role
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { _ = db.Close() })
	return db
}
