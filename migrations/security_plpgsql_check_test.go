package migrations_test

import (
	"database/sql"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// plpgsqlCheckAllowed are findings of plpgsql_check that are not defects:
// function, then message.
var plpgsqlCheckAllowed = map[[2]string]string{
	// v_canon text[] := '{}' and v_obj jsonb := '{}': an untyped literal.
	{"pgadvisory.register_instance(text,text[])", "target type is different type than source type"}: "literal",
}

// plpgsqlFindings runs plpgsql_check (security and extra warnings on) on
// every PL/pgSQL function of schema: trigger functions against a probe
// table with the columns lockgen's triggers read (fenced_table_sync against
// pgadvisory.fenced_table, its table), fence_check_statement with its
// transition tables. It returns "function: level: message (line)"
// for each error, warning and security warning that plpgsqlCheckAllowed does not list.
func plpgsqlFindings(t *testing.T, db *sql.DB, schema string) []string {
	t.Helper()
	rows, err := db.Query(`SELECT p.oid::regprocedure::text, r.level, r.message, COALESCE(r.lineno, 0)
		FROM pg_proc AS p JOIN pg_language AS l ON l.oid = p.prolang AND l.lanname = 'plpgsql'
		CROSS JOIN LATERAL plpgsql_check_function_tb(p.oid,
			CASE WHEN p.oid = 'pgadvisory.fenced_table_sync()'::regprocedure THEN 'pgadvisory.fenced_table'::regclass
				WHEN p.prorettype = 'trigger'::regtype THEN 'public.plpgsql_check_probe'::regclass ELSE 0 END,
			oldtable => CASE WHEN p.proname = 'fence_check_statement' THEN 'fence_old' END,
			newtable => CASE WHEN p.proname = 'fence_check_statement' THEN 'fence_new' END,
			security_warnings => true, extra_warnings => true) AS r
		WHERE p.pronamespace = $1::regnamespace AND r.level IN ('error', 'warning', 'security')`, schema)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var fn, level, msg string
		var line int
		require.NoError(t, rows.Scan(&fn, &level, &msg, &line))
		if _, ok := plpgsqlCheckAllowed[[2]string{fn, msg}]; ok {
			continue
		}
		out = append(out, fmt.Sprintf("%s: %s: %s (line %d)", fn, level, msg, line))
	}
	require.NoError(t, rows.Err())
	return out
}

// TestPlpgsqlCheck lints every PL/pgSQL function of pgadvisory with
// plpgsql_check (Debian package postgresql-15-plpgsql-check, installed by
// .ci/run). The control: a function that builds SQL from its argument
// is reported.
func TestPlpgsqlCheck(t *testing.T) {
	db := migrated.DB(t)
	var available bool
	require.NoError(t, db.QueryRow(`SELECT EXISTS (SELECT FROM pg_available_extensions WHERE name = 'plpgsql_check')`).Scan(&available))
	if !available {
		if os.Getenv("CI") != "" {
			t.Fatal("plpgsql_check is not installed (postgresql-15-plpgsql-check): .ci/run installs it")
		}
		t.Skip("plpgsql_check is not installed (apt-get install postgresql-15-plpgsql-check)")
	}
	_, err := db.Exec(`CREATE EXTENSION IF NOT EXISTS plpgsql_check;
		CREATE TABLE IF NOT EXISTS public.plpgsql_check_probe (id int, tenant_id bigint NOT NULL, fencing_token bigint, lock_id bigint, window_key text)`)
	require.NoError(t, err)
	require.Empty(t, plpgsqlFindings(t, db, "pgadvisory"))

	schema := testdb.Schema(t)
	_, err = db.Exec(`CREATE FUNCTION ` + schema + `.injectable(p text) RETURNS void LANGUAGE plpgsql AS $$
		BEGIN EXECUTE 'SELECT ' || p; END $$`)
	require.NoError(t, err)
	require.NotEmpty(t, plpgsqlFindings(t, db, schema), "the control: SQL built from an argument is reported")
}
