package doctor_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/doctor"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// open connects to url the way lockgen doctor does: the simple protocol
// (PgBouncer before 1.21 cannot carry prepared statements), four
// connections.
func open(t testing.TB, url string) *sql.DB {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	if !strings.Contains(url, "default_query_exec_mode") {
		cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	}
	return openConfig(t, cfg)
}

// openConfig is open with a parsed configuration.
func openConfig(t testing.TB, cfg *pgx.ConnConfig) *sql.DB {
	t.Helper()
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(4)
	t.Cleanup(func() { db.Close() })
	return db
}

// run runs the check called name on url (and the declarations, if any).
func run(t testing.TB, url, name string, cfg ...doctor.Config) doctor.Check {
	t.Helper()
	c := doctor.Config{}
	if len(cfg) > 0 {
		c = cfg[0]
	}
	c.DB = open(t, url)
	// Closed at once: through a session pooler, idle client connections
	// keep their server connections.
	defer c.DB.Close()
	return runOn(t, name, c)
}

// runOn runs the check called name with cfg (cfg.DB set).
func runOn(t testing.TB, name string, c doctor.Config) doctor.Check {
	t.Helper()
	got, err := doctor.RunCheck(context.Background(), c, name)
	require.NoError(t, err)
	require.Equal(t, name, got.Name)
	t.Logf("%s %s: %s | fix: %s", got.Status, got.Name, got.Detail, got.Fix)
	return got
}

// requireStatus checks the outcome and that the detail holds every
// fragment; a warn or fail must say what to do.
func requireStatus(t testing.TB, c doctor.Check, want doctor.Status, fragments ...string) {
	t.Helper()
	require.Equal(t, want, c.Status, "%s: %s", c.Name, c.Detail)
	for _, f := range fragments {
		require.Contains(t, c.Detail, f)
	}
	if want != doctor.Pass {
		require.NotEmpty(t, c.Fix, "a %s must say what to do", want)
	}
}

// emptyDatabase is a database of t's own (testdb.EmptyDatabase), with
// database-level settings applied (ALTER DATABASE ... SET): the way an
// operator configures the server for one database.
func emptyDatabase(t *testing.T, settings map[string]string) string {
	t.Helper()
	name, url := testdb.EmptyDatabase(t)
	for k, v := range settings {
		_, err := testdb.DB(t).Exec(`ALTER DATABASE ` + pgx.Identifier{name}.Sanitize() + ` SET ` + k + ` = '` + v + `'`)
		require.NoError(t, err)
	}
	return url
}
