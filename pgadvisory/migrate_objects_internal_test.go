package pgadvisory

import (
	"database/sql"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// TestMigrationObjectsMatchTheCatalog: after each migration the schema
// pgadvisory holds exactly the functions, relations and triggers that
// migrationObjects lists up to that version, no more and no fewer: a new
// migration must list its objects, so that Status sees them go missing.
// Status then agrees with the version table (SchemaVersion is that
// version, nothing missing or untracked).
func TestMigrationObjectsMatchTheCatalog(t *testing.T) {
	ctx := testdb.Context(t)
	_, url := testdb.EmptyDatabase(t)
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	defer db.Close()
	mg, err := NewMigrator(db)
	require.NoError(t, err)
	var want []string
	for _, m := range mg.Migrations() {
		_, err := mg.UpTo(ctx, m.Version)
		require.NoError(t, err)
		for _, o := range migrationObjects[m.Version] {
			switch o.kind {
			case "schema", "column":
			case "trigger":
				want = append(want, "TRIGGER "+o.name+" ON "+o.on)
			default:
				want = append(want, strings.ToUpper(o.kind)+" "+o.name)
			}
		}
		slices.Sort(want)
		require.Equal(t, want, catalogObjects(t, db), "after %s: migrationObjects and the catalog disagree", m.File)
		st, err := mg.Status(ctx)
		require.NoError(t, err)
		require.True(t, st.InStep(), "after %s: %s", m.File, st.Drift())
		require.Equal(t, m.Version, st.SchemaVersion, "after %s", m.File)
		require.Equal(t, m.Version, st.Current)
		require.NotEmpty(t, migrationObjects[m.Version], "%s lists no object", m.File)
	}
	require.Len(t, migrationObjects, len(mg.Migrations()), "an entry per migration, no other")
}

// catalogObjects lists what schema pgadvisory holds as DROP statements
// name them: functions with their arguments, tables, views, sequences and
// triggers.
func catalogObjects(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.Query(`
		SELECT 'FUNCTION ' || p.oid::regprocedure::text FROM pg_proc p WHERE p.pronamespace = 'pgadvisory'::regnamespace
		UNION ALL
		SELECT CASE c.relkind WHEN 'r' THEN 'TABLE ' WHEN 'v' THEN 'VIEW ' WHEN 'S' THEN 'SEQUENCE ' END || c.oid::regclass::text
		FROM pg_class c WHERE c.relnamespace = 'pgadvisory'::regnamespace AND c.relkind IN ('r', 'v', 'S')
		UNION ALL
		SELECT 'TRIGGER ' || tg.tgname || ' ON ' || tg.tgrelid::regclass::text FROM pg_trigger tg
		JOIN pg_class c ON c.oid = tg.tgrelid WHERE c.relnamespace = 'pgadvisory'::regnamespace AND NOT tg.tgisinternal`)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	slices.Sort(out)
	return out
}
