package migrations_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/migrations"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestFencingMigrationsUpDownUp: 00005 and 00006 go down to exactly what
// version 4 had (00002's functions as 00002 created them, nothing of their
// own left behind) and up again to the same functions.
func TestFencingMigrationsUpDownUp(t *testing.T) {
	ctx := context.Background()
	want4 := fencingFunctions(t, migrated.UpTo(t, 4))
	require.NotContains(t, want4, "pgadvisory.fence_acquire(bigint[],boolean,text,text)")

	db := migrated.UpTo(t, 6)
	want6 := fencingFunctions(t, db)
	for _, fn := range []string{"pgadvisory.fence_acquire(bigint[],boolean,text,text)", "pgadvisory.fence_handover()",
		"pgadvisory.fence_stamp()", "pgadvisory.fence_check_statement()"} {
		require.Contains(t, want6, fn)
	}
	require.NotEqual(t, want4["pgadvisory.fence_check()"], want6["pgadvisory.fence_check()"], "00006 replaced it")
	require.NotEqual(t, want4["pgadvisory.fence_require_current(bigint,bigint,text,text[])"],
		want6["pgadvisory.fence_require_current(bigint,bigint,text,text[])"], "00005 made it SECURITY DEFINER")

	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithTableName(pgadvisory.MigrationTable), goose.WithDisableGlobalRegistry(true), goose.WithLogger(goose.NopLogger()))
	require.NoError(t, err)
	res, err := p.DownTo(ctx, 4)
	require.NoError(t, err)
	require.Len(t, res, 2)
	require.Equal(t, want4, fencingFunctions(t, db), "Down restores version 4 exactly")

	_, err = p.Up(ctx)
	require.NoError(t, err)
	require.Equal(t, want6, fencingFunctions(t, db), "and Up brings back the same")
}

// fencingFunctions maps each function in schema pgadvisory whose name
// starts with fence_ to its definition, comment, privileges and owner-side
// settings.
func fencingFunctions(t *testing.T, db *sql.DB) map[string]string {
	t.Helper()
	rows, err := db.Query(`SELECT p.oid::regprocedure::text,
			pg_get_functiondef(p.oid) || E'\n-- comment: ' || COALESCE(obj_description(p.oid, 'pg_proc'), '')
			|| E'\n-- acl: ' || COALESCE(p.proacl::text, 'default')
		FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
		WHERE n.nspname = 'pgadvisory' AND p.proname LIKE 'fence\_%'`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var name, def string
		require.NoError(t, rows.Scan(&name, &def))
		out[name] = def
	}
	require.NoError(t, rows.Err())
	return out
}
