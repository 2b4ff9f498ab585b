package fencegen_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/fencegen"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestGeneratedMigrationParameterColumns: a parameterized lock's migration
// refuses, before it changes anything, a parameter column whose type is
// not one of its declared parameter type's (a date, timestamptz, float or
// numeric reads differently under the writer's DateStyle, TimeZone or
// extra_float_digits; a domain over bigint has its own type) or that does
// not exist. A nullable column is made NOT NULL by the migration, which
// fails while a row has no parameter. The controls: smallint, integer and
// bigint columns for an int64 parameter, uuid, boolean and varchar for
// the others, and a nullable column without NULL rows.
func TestGeneratedMigrationParameterColumns(t *testing.T) {
	db := testdb.DB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, pgadvisory.Migrate(ctx, db))
	intLock := checkedLock(t, "  - name: billing.invoice\n    params:\n      - {name: tenant, type: int64}\n", "billing.invoice")
	mixed := checkedLock(t, "  - name: exports.archive\n    params:\n      - {name: id, type: uuid}\n      - {name: full, type: bool}\n      - {name: label, type: string}\n", "exports.archive")

	// apply generates the migration for lock over a table with the given
	// columns (and rows), applies it with goose and returns its error.
	apply := func(t *testing.T, lockName string, columns, cols, rows string) (table string, err error) {
		t.Helper()
		lock := intLock
		if lockName == mixed.Name {
			lock = mixed
		}
		schema := testdb.Schema(t)
		table = schema + ".invoice"
		_, err = db.ExecContext(ctx, `CREATE DOMAIN `+schema+`.tenant_id AS bigint;
			CREATE TABLE `+table+` (id int PRIMARY KEY, `+strings.ReplaceAll(columns, "DOMAIN", schema+".tenant_id")+`)`)
		require.NoError(t, err)
		if rows != "" {
			_, err = db.ExecContext(ctx, `INSERT INTO `+table+` VALUES `+rows)
			require.NoError(t, err)
		}
		dir := t.TempDir()
		_, err = fencegen.Generate(fencegen.Request{Lock: lock, Table: table, Columns: cols, Policy: "strict", Dir: dir})
		require.NoError(t, err)
		_, err = provider(t, db, dir, schema).Up(ctx)
		return table, err
	}

	// DOMAIN is a domain over bigint in the table's schema.
	for _, typ := range []string{"date", "timestamptz", "double precision", "real", "numeric", "text", "DOMAIN"} {
		t.Run("refused "+typ, func(t *testing.T) {
			table, err := apply(t, "billing.invoice", "tenant "+typ+" NOT NULL", "tenant", "")
			require.Error(t, err)
			require.Equal(t, "42804", sqlstateOf(err), "%v", err)
			require.Contains(t, err.Error(), "lockgen fence: column tenant of "+table+" is ")
			require.Contains(t, err.Error(), "parameter tenant (int64) of lock billing.invoice needs smallint, integer or bigint")
			requireUnfenced(t, db, table)
		})
	}
	t.Run("refused missing column", func(t *testing.T) {
		table, err := apply(t, "billing.invoice", "tenant_no bigint NOT NULL", "tenant", "")
		require.Error(t, err)
		require.Equal(t, "42703", sqlstateOf(err), "%v", err)
		require.Contains(t, err.Error(), "lockgen fence: "+table+" has no column tenant (parameter tenant of lock billing.invoice)")
		requireUnfenced(t, db, table)
	})
	t.Run("refused mixed: text for a uuid", func(t *testing.T) {
		table, err := apply(t, "exports.archive", "a text NOT NULL, b boolean NOT NULL, c text NOT NULL", "a,b,c", "")
		require.Error(t, err)
		require.Equal(t, "42804", sqlstateOf(err), "%v", err)
		require.Contains(t, err.Error(), "column a of "+table+" is text: parameter id (uuid) of lock exports.archive needs uuid")
		requireUnfenced(t, db, table)
	})
	t.Run("refused nullable with a NULL row", func(t *testing.T) {
		table, err := apply(t, "billing.invoice", "tenant bigint", "tenant", "(1, 7), (2, NULL)")
		require.Error(t, err)
		require.Equal(t, "23502", sqlstateOf(err), "%v", err)
		requireUnfenced(t, db, table)
		require.False(t, notNull(t, db, table, "tenant"), "the failed migration left the column as it was")
	})

	for _, typ := range []string{"smallint", "integer", "bigint"} {
		t.Run("control "+typ, func(t *testing.T) {
			table, err := apply(t, "billing.invoice", "tenant "+typ+" NOT NULL", "tenant", "(1, 7)")
			require.NoError(t, err)
			requireFenced(t, db, table)
		})
	}
	t.Run("control uuid boolean varchar", func(t *testing.T) {
		table, err := apply(t, "exports.archive", "a uuid NOT NULL, b boolean NOT NULL, c varchar(20) NOT NULL", "a,b,c", "")
		require.NoError(t, err)
		requireFenced(t, db, table)
	})
	t.Run("control nullable made NOT NULL", func(t *testing.T) {
		table, err := apply(t, "billing.invoice", "tenant bigint", "tenant", "(1, 7)")
		require.NoError(t, err)
		requireFenced(t, db, table)
		require.True(t, notNull(t, db, table, "tenant"), "the migration made the parameter column NOT NULL")
	})
}

// requireUnfenced: the table has none of what a fence migration adds, and
// pgadvisory.fenced_table does not list it.
func requireUnfenced(t *testing.T, db *sql.DB, table string) {
	t.Helper()
	triggers, column := fenceState(t, db, table)
	require.Empty(t, triggers, table)
	require.False(t, column, table)
	require.False(t, listed(t, db, table), table)
}

// requireFenced: the table has the current layout and is listed.
func requireFenced(t *testing.T, db *sql.DB, table string) {
	t.Helper()
	triggers, column := fenceState(t, db, table)
	require.Equal(t, currentTriggers, triggers, table)
	require.True(t, column, table)
	require.True(t, listed(t, db, table), table)
}

func listed(t *testing.T, db *sql.DB, table string) bool {
	t.Helper()
	var ok bool
	require.NoError(t, db.QueryRow(`SELECT EXISTS (SELECT FROM pgadvisory.fenced_table WHERE relid = $1::regclass)`, table).Scan(&ok))
	return ok
}

func notNull(t *testing.T, db *sql.DB, table, column string) bool {
	t.Helper()
	var ok bool
	require.NoError(t, db.QueryRow(`SELECT attnotnull FROM pg_attribute WHERE attrelid = $1::regclass AND attname = $2`, table, column).Scan(&ok))
	return ok
}
