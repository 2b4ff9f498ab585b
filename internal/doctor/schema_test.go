package doctor_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/doctor"
	"github.com/lockgen/lockgen/pgadvisory"
)

// The schema check on databases in every state: never migrated, partly
// migrated, migrated, migrated by a newer lockgen, or by another tool.

func TestSchema(t *testing.T) {
	ctx := context.Background()
	list, err := pgadvisory.Migrations()
	require.NoError(t, err)

	t.Run("missing", func(t *testing.T) {
		url := emptyDatabase(t, nil)
		requireStatus(t, run(t, url, doctor.Schema), doctor.Warn, "lockgen's schema is missing", "RunExclusive and RunSession do not")
		fenced := doctor.Config{Source: "locks.yaml", Declared: []pgadvisory.Declared{{Name: "ledger.post", ID: 1, Fencing: true}}}
		requireStatus(t, run(t, url, doctor.Schema, fenced), doctor.Fail, "declares fenced locks (ledger.post)", "ErrNotMigrated")
	})
	t.Run("partly", func(t *testing.T) {
		if len(list) < 2 {
			t.Skip("needs two migrations")
		}
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
		requireStatus(t, run(t, url, doctor.Schema), doctor.Pass, "lockgen's migrations are applied")
	})
	t.Run("rolled back", func(t *testing.T) {
		url := emptyDatabase(t, nil)
		m := migrator(t, url)
		_, err := m.Up(ctx)
		require.NoError(t, err)
		_, err = m.DownTo(ctx, 0)
		require.NoError(t, err)
		requireStatus(t, run(t, url, doctor.Schema), doctor.Warn, "no lockgen migration is applied")
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
	t.Run("another tool", func(t *testing.T) {
		url := emptyDatabase(t, nil)
		for _, m := range list {
			_, err := openPlain(t, url).Exec("BEGIN;\n" + m.UpSQL + "\nCOMMIT;")
			require.NoError(t, err)
		}
		requireStatus(t, run(t, url, doctor.Schema), doctor.Warn, "another migration tool applied it")
	})
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
