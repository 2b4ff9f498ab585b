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

	_, err = p.UpTo(ctx, 6)
	require.NoError(t, err)
	require.Equal(t, want6, fencingFunctions(t, db), "and Up brings back the same")
}

// fencingFunctions maps each function in schema pgadvisory whose name
// starts with fence_ to its definition, comment, privileges and owner-side
// settings.
func fencingFunctions(t *testing.T, db *sql.DB) map[string]string {
	t.Helper()
	return schemaFunctions(t, db, `fence\_%`)
}

// schemaFunctions is [fencingFunctions] for the functions whose name is
// LIKE pattern. Privileges are compared as the ACL they grant (a default
// ACL reads as the owner's and PUBLIC's EXECUTE).
func schemaFunctions(t *testing.T, db *sql.DB, pattern string) map[string]string {
	t.Helper()
	rows, err := db.Query(`SELECT p.oid::regprocedure::text,
			pg_get_functiondef(p.oid) || E'\n-- comment: ' || COALESCE(obj_description(p.oid, 'pg_proc'), '')
			|| E'\n-- acl: ' || (SELECT pg_catalog.array_agg(a::text ORDER BY a::text)
				FROM pg_catalog.unnest(COALESCE(p.proacl, pg_catalog.acldefault('f', p.proowner))) AS a)::text
		FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
		WHERE n.nspname = 'pgadvisory' AND p.proname LIKE $1`, pattern)
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

// TestSecurityMigrationDownUp: 00008's Down restores every function of
// 00007 exactly (definition, comment, settings, privileges) and drops what
// 00008 added; Up brings 00008's back.
func TestSecurityMigrationDownUp(t *testing.T) {
	ctx := context.Background()
	db := migrated.UpTo(t, 7)
	want7 := schemaFunctions(t, db, "%")
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithTableName(pgadvisory.MigrationTable), goose.WithDisableGlobalRegistry(true), goose.WithLogger(goose.NopLogger()))
	require.NoError(t, err)
	_, err = p.UpTo(ctx, 8)
	require.NoError(t, err)
	want8 := schemaFunctions(t, db, "%")
	require.Contains(t, want8, "pgadvisory.fence_register(regclass,text,text,text[])")
	for name, def := range want8 {
		require.Contains(t, def, "SET search_path TO 'pg_catalog', 'pg_temp'", "00008 pins the search_path of %s", name)
	}
	_, err = p.DownTo(ctx, 7)
	require.NoError(t, err)
	require.Equal(t, want7, schemaFunctions(t, db, "%"), "Down restores version 7 exactly")
	var fenced *string
	require.NoError(t, db.QueryRow(`SELECT to_regclass('pgadvisory.fenced_table')::text`).Scan(&fenced))
	require.Nil(t, fenced, "Down drops fenced_table")
	_, err = p.UpTo(ctx, 8)
	require.NoError(t, err)
	require.Equal(t, want8, schemaFunctions(t, db, "%"), "and Up brings back the same")
}
