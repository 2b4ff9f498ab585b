package migrations_test

import (
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/migrations"
)

// securityDefiner lists the functions of pgadvisory that run as their
// owner, and why each must.
var securityDefiner = map[string]string{
	// Publishes a fresh token for a caller that holds the locks: callers
	// need no privilege on pgadvisory.fence or the sequence.
	"pgadvisory.fence_acquire(bigint[],boolean,text,text)": "publish",
	// Publishes a leader's term for a caller that holds the lock.
	"pgadvisory.leader_elect(bigint,text,text)": "publish",
	// Take, renew and vacate a row of pgadvisory.lease for the holder of
	// its owner secret; lease_acquire publishes the term through
	// leader_elect. Callers need no privilege on lockgen's tables.
	"pgadvisory.lease_acquire(bigint,text,uuid,interval,text)": "lease",
	"pgadvisory.lease_renew(bigint[],uuid,interval)":           "lease",
	"pgadvisory.lease_release(bigint,uuid)":                    "lease",
	// Reads pgadvisory.leader and pgadvisory.fence for any reader.
	"pgadvisory.current_leader(bigint)": "read",
	// The per-lock check: locks a fence row FOR SHARE (needs UPDATE on
	// pgadvisory.fence). Owner only: called by the trigger functions below.
	"pgadvisory.fence_require_current(bigint,bigint,text,text[])": "check",
	// Trigger functions that lock fence rows FOR SHARE for writers without
	// privileges on pgadvisory.fence; each checks its table in
	// pgadvisory.fenced_table and the types of the columns it reads.
	"pgadvisory.fence_check_statement()": "trigger",
	"pgadvisory.fence_check()":           "trigger",
	"pgadvisory.fence_check_param()":     "trigger",
	"pgadvisory.fence_truncate_guard()":  "trigger",
	// Sets finished_at in pgadvisory.run_once at commit; refuses any other
	// table.
	"pgadvisory.run_once_finish()": "trigger",
	// Write pgadvisory.fenced_table; owner only (and the roles it grants).
	"pgadvisory.fence_register(regclass,text,text,text[])": "registry",
	"pgadvisory.fence_unregister(regclass)":                "registry",
	// Moves the token sequence after a restore; owner only (and the roles
	// it grants).
	"pgadvisory.fence_advance(bigint)": "restore",
}

// publicExecute lists the functions PUBLIC may execute: what applications
// call.
var publicExecute = map[string]string{
	"pgadvisory.lock_id(text,text[])":                      "pure: the lock ID rule",
	"pgadvisory.valid_lock_name(text)":                     "pure: the lock name rule",
	"pgadvisory.register_instance(text,text[])":            "runs as the caller, who needs the registry's table rights",
	"pgadvisory.fence_acquire(bigint[],boolean,text,text)": "every fenced acquisition; publishes only for a caller holding the locks",
	"pgadvisory.fence_handover()":                          "every fenced acquisition; runs as the caller",
	"pgadvisory.leader_elect(bigint,text,text)":            "every election; publishes only for a caller holding the lock",
	"pgadvisory.current_leader(bigint)":                    "pgadvisory.CurrentLeader; reads one leader row",
	// Leases (WithLease): whoever may elect a leader may take a lease; a
	// lease is renewed or released only with its owner secret.
	"pgadvisory.lease_acquire(bigint,text,uuid,interval,text)": "every lease acquisition; takes only a vacant or expired lease",
	"pgadvisory.lease_renew(bigint[],uuid,interval)":           "every renewal; renews only the leases of the owner secret",
	"pgadvisory.lease_release(bigint,uuid)":                    "every resignation; vacates only the lease of the owner secret",
}

// TestSecurityCatalog: every function of pgadvisory pins its search_path;
// the SECURITY DEFINER functions are the listed ones, and PUBLIC may
// execute only the listed ones.
func TestSecurityCatalog(t *testing.T) {
	db := migrated.DB(t)
	rows, err := db.Query(`SELECT p.oid::regprocedure::text, p.prosecdef,
			COALESCE('search_path=pg_catalog, pg_temp' = ANY (p.proconfig), false),
			EXISTS (SELECT FROM aclexplode(COALESCE(p.proacl, acldefault('f', p.proowner))) AS a
			        WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')
		FROM pg_proc AS p WHERE p.pronamespace = 'pgadvisory'::regnamespace`)
	require.NoError(t, err)
	defer rows.Close()
	var definers, public, unpinned []string
	n := 0
	for rows.Next() {
		var name string
		var definer, pinned, exec bool
		require.NoError(t, rows.Scan(&name, &definer, &pinned, &exec))
		n++
		if definer {
			definers = append(definers, name)
		}
		if exec {
			public = append(public, name)
		}
		if !pinned {
			unpinned = append(unpinned, name)
		}
	}
	require.NoError(t, rows.Err())
	require.NotZero(t, n)
	require.Empty(t, unpinned, "functions without search_path = pg_catalog, pg_temp")
	require.ElementsMatch(t, keys(securityDefiner), definers, "SECURITY DEFINER functions")
	require.ElementsMatch(t, keys(publicExecute), public, "functions PUBLIC may execute")
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// bareOperator matches a comparison, arithmetic or string operator written
// without OPERATOR(pg_catalog.…) in a function body whose string literals,
// quoted identifiers, comments and OPERATOR(...) spellings are removed: the
// operator then resolves through the search_path the body runs with, where
// a schema of the caller's could supply it if the search_path were not
// pinned. `x IN (…)` is matched too: write `x OPERATOR(pg_catalog.=) ANY
// (ARRAY[…])`.
var bareOperator = regexp.MustCompile(`(?i)\s(=|<>|!=|<|>|<=|>=|\+|-|/|\|\||~|!~|<<|>>|&|\||->|->>|NOT\s+IN\s*\(|IN\s*\()\s`)

// assignment matches the "=" of syntax that assigns rather than compares:
// UPDATE's SET a = b, c = d and RAISE's USING ERRCODE = …, HINT = ….
var assignment = regexp.MustCompile(`(?i)((?:\bSET|\bUSING|,)\s*(?:\w+\.)?\w+\s*)=`)

// simpleCase matches CASE x WHEN y, which compares with "=" resolved by
// name: write CASE WHEN x OPERATOR(pg_catalog.=) y.
var simpleCase = regexp.MustCompile(`(?i)\bCASE\s+(\S+)`)

// unqualifiable lists the constructs of PostgreSQL's grammar that resolve
// an operator by name with no way to schema-qualify it. They are allowed
// because every function pins search_path = pg_catalog, pg_temp, where
// pg_catalog comes first and pg_temp is never searched for operators, and
// because their operands have built-in types: IS [NOT] DISTINCT FROM
// (resolves "=" for its operands' types).
var unqualifiable = regexp.MustCompile(`(?i)\bIS\s+(NOT\s+)?DISTINCT\s+FROM\b`)

// sqlNoise matches what a body may contain that is not an operator in
// code: string literals (E'…' and '…' with ” inside), quoted identifiers,
// -- and /* */ comments, OPERATOR(schema.op) spellings, and PL/pgSQL's
// integer FOR loop range `a .. b` separator.
var sqlNoise = regexp.MustCompile(`(?s)[eE]?'(?:[^']|'')*'|"(?:[^"]|"")*"|--[^\n]*|/\*.*?\*/|(?i:OPERATOR)\s*\([a-z_]+\.[^)]+\)`)

// TestSecurityOperatorsQualified: every SQL and PL/pgSQL function of
// pgadvisory writes its operators OPERATOR(pg_catalog.op), so that none
// depends on the search_path for them, pinned or not. The views are
// checked through pg_depend: a view stores the operators and functions it
// resolved when it was created (pg_get_viewdef prints pg_catalog's
// operators bare whatever the definition said), and each must be
// pg_catalog's or lockgen's own.
func TestSecurityOperatorsQualified(t *testing.T) {
	db := migrated.DB(t)
	rows, err := db.Query(`SELECT p.oid::regprocedure::text, p.prosrc
		FROM pg_proc AS p JOIN pg_language AS l ON l.oid = p.prolang
		WHERE p.pronamespace = 'pgadvisory'::regnamespace AND l.lanname IN ('sql', 'plpgsql')
		ORDER BY 1`)
	require.NoError(t, err)
	defer rows.Close()
	var bare []string
	n := 0
	for rows.Next() {
		var name, src string
		require.NoError(t, rows.Scan(&name, &src))
		n++
		bare = append(bare, bareOperators(name, src)...)
	}
	require.NoError(t, rows.Err())
	require.NotZero(t, n)
	require.Empty(t, bare, "operators not written OPERATOR(pg_catalog.op)")

	var foreign []string
	rows, err = db.Query(`SELECT DISTINCT v.oid::regclass::text, d.refobjid::regoperator::text
		FROM pg_class AS v
		JOIN pg_rewrite AS rw ON rw.ev_class = v.oid
		JOIN pg_depend AS d ON d.classid = 'pg_rewrite'::regclass AND d.objid = rw.oid
		JOIN pg_operator AS o ON d.refclassid = 'pg_operator'::regclass AND o.oid = d.refobjid
		WHERE v.relnamespace = 'pgadvisory'::regnamespace AND v.relkind = 'v'
		  AND o.oprnamespace <> 'pg_catalog'::regnamespace
		UNION
		SELECT DISTINCT v.oid::regclass::text, d.refobjid::regprocedure::text
		FROM pg_class AS v
		JOIN pg_rewrite AS rw ON rw.ev_class = v.oid
		JOIN pg_depend AS d ON d.classid = 'pg_rewrite'::regclass AND d.objid = rw.oid
		JOIN pg_proc AS p ON d.refclassid = 'pg_proc'::regclass AND p.oid = d.refobjid
		WHERE v.relnamespace = 'pgadvisory'::regnamespace AND v.relkind = 'v'
		  AND p.pronamespace NOT IN ('pg_catalog'::regnamespace, 'pgadvisory'::regnamespace)`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var view, obj string
		require.NoError(t, rows.Scan(&view, &obj))
		foreign = append(foreign, view+": "+obj)
	}
	require.NoError(t, rows.Err())
	require.Empty(t, foreign, "views using operators or functions outside pg_catalog and pgadvisory")

	// The views' latest definitions in the migrations' Up parts write their
	// operators qualified too, so that the migration resolves none through
	// the search_path of the role that runs it.
	views := map[string]string{}
	files, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	sort.Strings(files)
	for _, f := range files {
		b, err := fs.ReadFile(migrations.FS, f)
		require.NoError(t, err)
		up, _, _ := strings.Cut(string(b), "-- +goose Down")
		for _, m := range viewDefinition.FindAllStringSubmatch(up, -1) {
			views["pgadvisory."+m[1]] = f + ": " + m[2]
		}
	}
	require.NotEmpty(t, views)
	bare = nil
	for name, def := range views {
		bare = append(bare, bareOperators(name, def)...)
	}
	require.Empty(t, bare, "operators not written OPERATOR(pg_catalog.op) in the views' latest definitions")
}

// viewDefinition matches a view's definition in a migration: its name and
// its query, up to the semicolon that ends a line.
var viewDefinition = regexp.MustCompile(`(?s)CREATE (?:OR REPLACE )?VIEW pgadvisory\.(\w+) AS\n(.*?);\n`)

// bareOperators returns, for the function name with body src, each bare
// operator with its line.
func bareOperators(name, src string) []string {
	code := sqlNoise.ReplaceAllStringFunc(src, func(s string) string {
		// Keep line breaks, so that lines still count.
		return strings.Repeat("\n", strings.Count(s, "\n")) + " "
	})
	code = unqualifiable.ReplaceAllString(code, " ")
	code = assignment.ReplaceAllString(code, "$1 ")
	var out []string
	for i, line := range strings.Split(code, "\n") {
		// PL/pgSQL's ".." in FOR i IN a .. b is no operator.
		line = strings.ReplaceAll(line, " .. ", " ")
		for _, m := range simpleCase.FindAllStringSubmatch(line, -1) {
			if !strings.EqualFold(m[1], "WHEN") {
				out = append(out, fmt.Sprintf("%s line %d: CASE %s WHEN in %q", name, i+1, m[1], strings.TrimSpace(line)))
			}
		}
		for _, m := range bareOperator.FindAllStringSubmatch(" "+line+" ", -1) {
			out = append(out, fmt.Sprintf("%s line %d: %q in %q", name, i+1, strings.TrimSpace(m[1]), strings.TrimSpace(line)))
		}
	}
	return out
}

// TestBareOperators: the scan finds what it must and nothing else.
func TestBareOperators(t *testing.T) {
	for src, want := range map[string]int{
		"IF a = b THEN":                                  1,
		"IF a OPERATOR(pg_catalog.=) b THEN":             0,
		"x := y + 1;":                                    1,
		"x := y OPERATOR(pg_catalog.+) 1;":               0,
		"RAISE 'a = b' USING ERRCODE = 'x', HINT = 'y';": 0,
		"UPDATE t SET a = b, c = d WHERE e = f":          1,
		"SELECT * FROM t":                                0,
		"-- a = b":                                       0,
		"/* a <> b */ c":                                 0,
		"WHERE p NOT IN ('a', 'b')":                      1,
		"WHERE p IN ('a')":                               1,
		"FOR i IN 2 .. n LOOP":                           0,
		"FOREACH v IN ARRAY a LOOP":                      0,
		"WHERE a IS DISTINCT FROM b":                     0,
		"SELECT 'x' || y":                                1,
		"v := a[i OPERATOR(pg_catalog.-) 1];":            0,
		`SELECT "a = b" FROM t`:                          0,
		"pg_catalog.format('%s = %s', a, b)":             0,
	} {
		got := bareOperators("f", src)
		require.Len(t, got, want, "%s: %v", src, got)
	}
}
