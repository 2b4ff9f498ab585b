package migrations_test

import (
	"database/sql"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

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
	// Reads a lease's expiry for CurrentLeader.
	"pgadvisory.lease_expires(bigint,bigint)": "read",
	// Limited locks: register a limit (changing it only while no slot of
	// the old one is held). Callers need no privilege on
	// pgadvisory.slot_limit.
	"pgadvisory.slot_register(bigint,integer)": "semaphore",
	// Waiting calls: join, refresh and leave the queue of a lock, and take
	// the lock at the head of it. Callers need no privilege on
	// pgadvisory.waiter.
	"pgadvisory.wait_try(bigint[],bigint,bigint,bigint,boolean,boolean)": "waiting",
	"pgadvisory.wait_leave(bigint[],bigint)":                             "waiting",
	// A waiting fenced call's tries: the queue as above, and
	// fence_acquire's publish at the head of it.
	"pgadvisory.fence_wait_try(bigint[],bigint,bigint,bigint,text,bigint)": "waiting",
	// Records the caller's own backend's resigned term as it unlocks:
	// callers need no privilege on pgadvisory.leader_resigned.
	"pgadvisory.leader_resign(bigint,bigint)": "resign",
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
	"pgadvisory.lease_expires(bigint,bigint)":                  "pgadvisory.CurrentLeader of a lease leader; reads one lease's expiry",
	// Limited locks (RunLimited, RunSessionLimited, SQL jobs).
	"pgadvisory.slot_id(bigint,integer)":                            "pure: the slot key rule",
	"pgadvisory.slot_try(bigint,integer,integer,boolean,integer[])": "a limited call whose first slot is taken; takes advisory locks, runs as the caller",
	"pgadvisory.slot_registered(bigint)":                            "a limited call whose statement may have read its lock's limit before a change; reads, runs as the caller",
	"pgadvisory.slot_register(bigint,integer)":                      "a limited lock's first call, or a change of its limit while no slot of the old one is held",
	// Waiting calls (WithWait on transaction locks).
	"pgadvisory.wait_try(bigint[],bigint,bigint,bigint,boolean,boolean)":   "every waiting call's tries; takes the lock only at the head of its queue",
	"pgadvisory.wait_leave(bigint[],bigint)":                               "every wait that ends without the lock; removes one queue row",
	"pgadvisory.fence_wait_try(bigint[],bigint,bigint,bigint,text,bigint)": "every waiting fenced call's tries; publishes only at the head of its queue, for a caller it grants the lock",
	// A session-lock leader's resignation changes only its own backend's row.
	"pgadvisory.leader_resign(bigint,bigint)": "every session-lock resignation; records only the caller's own backend's leadership",
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

	bare = nil
	for name, def := range views {
		bare = append(bare, bareCasts(name, def)...)
	}
	require.Empty(t, bare, "casts to a type not written pg_catalog.type in the views' latest definitions")
}

// TestSecurityCastsQualified: every SQL and PL/pgSQL function of pgadvisory
// names the type of each cast with its schema (x::pg_catalog.int8,
// CAST(x AS pg_catalog.text), pg_catalog.interval '1s'), so that no cast
// depends on the search_path, pinned or not. The views, column defaults
// and check constraints of pgadvisory store the types, functions and
// operators they resolved when they were created: each must be
// pg_catalog's or lockgen's own.
func TestSecurityCastsQualified(t *testing.T) {
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
		bare = append(bare, bareCasts(name, src)...)
	}
	require.NoError(t, rows.Err())
	require.NotZero(t, n)
	require.Empty(t, bare, "casts to a type not written pg_catalog.type")

	require.Empty(t, foreignDependencies(t, db, "pgadvisory"),
		"views, defaults and check constraints using types, functions or operators outside pg_catalog and pgadvisory")
}

// TestForeignDependencies: the dependency scan finds a view, a default and
// a check constraint that use a type, a function and an operator of
// another schema, and nothing in a schema whose objects use pg_catalog's
// only (the control).
func TestForeignDependencies(t *testing.T) {
	db := migrated.DB(t)
	schema := fmt.Sprintf("deps_%d", time.Now().UnixNano())
	other := schema + "_other"
	for _, q := range []string{
		`CREATE SCHEMA ` + schema,
		`CREATE SCHEMA ` + other,
		`CREATE TABLE ` + schema + `.plain (a int DEFAULT pg_catalog.now()::pg_catalog.date OPERATOR(pg_catalog.-) '2000-01-01'::pg_catalog.date CHECK (a OPERATOR(pg_catalog.>=) 0))`,
		`CREATE VIEW ` + schema + `.v_plain AS SELECT a::pg_catalog.text AS t FROM ` + schema + `.plain`,
	} {
		_, err := db.Exec(q)
		require.NoError(t, err, q)
	}
	t.Cleanup(func() { _, _ = db.Exec(`DROP SCHEMA ` + schema + `, ` + other + ` CASCADE`) })
	require.Empty(t, foreignDependencies(t, db, schema), "the control: pg_catalog's only")

	for _, q := range []string{
		`CREATE DOMAIN ` + other + `.pos AS int`,
		`CREATE FUNCTION ` + other + `.zero() RETURNS int LANGUAGE sql AS 'SELECT 0'`,
		`CREATE FUNCTION ` + other + `.eq(int, int) RETURNS boolean LANGUAGE sql AS 'SELECT true'`,
		`CREATE OPERATOR ` + other + `.=== (LEFTARG = int, RIGHTARG = int, FUNCTION = ` + other + `.eq)`,
		`CREATE TABLE ` + schema + `.hostile (a int DEFAULT ` + other + `.zero() CHECK (a OPERATOR(` + other + `.===) a))`,
		`CREATE VIEW ` + schema + `.v_hostile AS SELECT a::` + other + `.pos AS p FROM ` + schema + `.hostile`,
	} {
		_, err := db.Exec(q)
		require.NoError(t, err, q)
	}
	got := strings.Join(foreignDependencies(t, db, schema), "\n")
	require.Contains(t, got, schema+".v_hostile: type "+other+".pos")
	require.Contains(t, got, schema+".hostile: function "+other+".zero()")
	require.Contains(t, got, schema+".hostile: operator "+other+".===(integer,integer)")
	require.NotContains(t, got, "plain")
}

// foreignDependencies returns, for the views, column defaults and check
// constraints of schema, each type, function and operator they depend on
// that is neither pg_catalog's nor schema's own, as "relation: kind name".
func foreignDependencies(t *testing.T, db *sql.DB, schema string) []string {
	t.Helper()
	rows, err := db.Query(`WITH owners AS (
			SELECT 'pg_rewrite'::regclass AS classid, rw.oid AS objid, rw.ev_class AS rel
			FROM pg_rewrite AS rw JOIN pg_class AS c ON c.oid = rw.ev_class
			WHERE c.relnamespace = $1::regnamespace
			UNION ALL
			SELECT 'pg_attrdef'::regclass, d.oid, d.adrelid
			FROM pg_attrdef AS d JOIN pg_class AS c ON c.oid = d.adrelid
			WHERE c.relnamespace = $1::regnamespace
			UNION ALL
			SELECT 'pg_constraint'::regclass, k.oid, k.conrelid
			FROM pg_constraint AS k JOIN pg_class AS c ON c.oid = k.conrelid
			WHERE c.relnamespace = $1::regnamespace
		), refs AS (
			SELECT DISTINCT o.rel, d.refclassid, d.refobjid
			FROM owners AS o JOIN pg_depend AS d ON d.classid = o.classid AND d.objid = o.objid
		)
		SELECT r.rel::regclass::text || ': type ' || x.oid::regtype::text
		FROM refs AS r JOIN pg_type AS x ON r.refclassid = 'pg_type'::regclass AND x.oid = r.refobjid
		WHERE x.typnamespace NOT IN ('pg_catalog'::regnamespace, $1::regnamespace)
		UNION
		SELECT r.rel::regclass::text || ': function ' || x.oid::regprocedure::text
		FROM refs AS r JOIN pg_proc AS x ON r.refclassid = 'pg_proc'::regclass AND x.oid = r.refobjid
		WHERE x.pronamespace NOT IN ('pg_catalog'::regnamespace, $1::regnamespace)
		UNION
		SELECT r.rel::regclass::text || ': operator ' || x.oid::regoperator::text
		FROM refs AS r JOIN pg_operator AS x ON r.refclassid = 'pg_operator'::regclass AND x.oid = r.refobjid
		WHERE x.oprnamespace NOT IN ('pg_catalog'::regnamespace, $1::regnamespace)
		ORDER BY 1`, schema)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
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

// castCode returns src with its comments, quoted identifiers and
// OPERATOR(...) spellings blanked and every string literal written ” (a
// typed literal stays visible), keeping the line breaks.
func castCode(src string) string {
	return sqlNoise.ReplaceAllStringFunc(src, func(s string) string {
		nl := strings.Repeat("\n", strings.Count(s, "\n"))
		if s[0] == '\'' || ((s[0] == 'e' || s[0] == 'E') && len(s) > 1 && s[1] == '\'') {
			return " ''" + nl + " "
		}
		return nl + " "
	})
}

// castTarget matches "::" and the type name after it; group 2 is the dot
// of a schema-qualified name. A quoted type name was blanked, so "::"
// followed by no name is reported too.
var castTarget = regexp.MustCompile(`::\s*(?:([A-Za-z_][\w$]*)\s*(\.)?)?`)

// typedLiteral matches a typed literal, type 'text', of a type whose
// name is not schema-qualified (the string already written ”).
var typedLiteral = regexp.MustCompile(`(?i)(^|[^.\w])(bigint|smallint|integer|int|int2|int4|int8|text|varchar|character|char|boolean|bool|uuid|bytea|bit|interval|timestamptz|timestamp|date|time|timetz|numeric|decimal|real|float4|float8|float|double\s+precision|json|jsonb|oid|name|regclass|regtype|regprocedure|regproc|regnamespace|regrole|inet|cidr)\s+''`)

// castCall matches the start of CAST(expr AS type).
var castCall = regexp.MustCompile(`(?i)\bCAST\s*\(`)

// castAs matches the AS of CAST(expr AS type) and the type name after it.
var castAs = regexp.MustCompile(`(?i)\bAS\s+([A-Za-z_][\w$]*)?\s*(\.)?`)

// bareCasts returns, for the function name with body src, each cast whose
// type name is not schema-qualified, with its line: x::type, CAST(x AS
// type) and type 'literal'. Such a type resolves through the search_path
// the body runs with.
func bareCasts(name, src string) []string {
	code := castCode(src)
	lineOf := func(i int) int { return strings.Count(code[:i], "\n") + 1 }
	excerpt := func(i int) string {
		start := strings.LastIndex(code[:i], "\n") + 1
		end := strings.Index(code[i:], "\n")
		if end < 0 {
			end = len(code) - i
		}
		return strings.TrimSpace(code[start : i+end])
	}
	var out []string
	for _, m := range castTarget.FindAllStringSubmatchIndex(code, -1) {
		if m[4] < 0 { // no dot after the name: no schema
			out = append(out, fmt.Sprintf("%s line %d: %q in %q", name, lineOf(m[0]), strings.TrimSpace(code[m[0]:m[1]]), excerpt(m[0])))
		}
	}
	// A string literal with "::" in it is SQL that EXECUTE runs (messages
	// and hints write no casts): its casts are held to the same rule.
	for _, lit := range sqlNoise.FindAllStringIndex(src, -1) {
		s := src[lit[0]:lit[1]]
		if s[0] != '\'' && !((s[0] == 'e' || s[0] == 'E') && len(s) > 1 && s[1] == '\'') {
			continue
		}
		for _, m := range castTarget.FindAllStringSubmatchIndex(s, -1) {
			if m[4] < 0 {
				out = append(out, fmt.Sprintf("%s line %d: %q in the string %s", name, strings.Count(src[:lit[0]], "\n")+1, strings.TrimSpace(s[m[0]:m[1]]), s))
			}
		}
	}
	for _, m := range typedLiteral.FindAllStringSubmatchIndex(code, -1) {
		out = append(out, fmt.Sprintf("%s line %d: typed literal %s in %q", name, lineOf(m[4]), code[m[4]:m[5]], excerpt(m[4])))
	}
	for _, m := range castCall.FindAllStringIndex(code, -1) {
		// The AS at the call's own depth, up to its closing parenthesis.
		depth, as := 0, -1
		for i := m[1]; i < len(code) && depth >= 0; i++ {
			switch code[i] {
			case '(':
				depth++
			case ')':
				depth--
			default:
				if depth == 0 && as < 0 {
					if a := castAs.FindStringSubmatchIndex(code[i:]); a != nil && a[0] == 0 && (i == 0 || !isWord(code[i-1])) {
						as = i
						if a[4] < 0 {
							out = append(out, fmt.Sprintf("%s line %d: CAST(... AS %s) in %q", name, lineOf(m[0]), strings.TrimSpace(code[i+a[0] : i+a[1]][2:]), excerpt(m[0])))
						}
					}
				}
			}
		}
	}
	return out
}

func isWord(c byte) bool {
	return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// TestBareCasts: the scan finds what it must and nothing else.
func TestBareCasts(t *testing.T) {
	for src, want := range map[string]int{
		"v := x::bigint;":                                         1,
		"v := x::pg_catalog.int8;":                                0,
		"v := x :: pg_catalog . int8;":                            0,
		"v := x::text[];":                                         1,
		"v := x::pg_catalog.text[];":                              0,
		"v := x::bigint::text;":                                   2,
		"v := x::pg_catalog.int8::text;":                          1,
		"SELECT NULL::text":                                       1,
		"SELECT ''::bytea":                                        1,
		"SELECT (y)::bit(64)::pg_catalog.int8":                    1,
		"SELECT x::pgadvisory.registry_declaration":               0,
		`SELECT x::"text"`:                                        1,
		"SELECT CAST(x AS text)":                                  1,
		"SELECT CAST(x AS pg_catalog.text)":                       0,
		"SELECT CAST(f(x) AS bigint) AS y":                        1,
		"SELECT CAST(f(x) AS pg_catalog.int8) AS y":               0,
		"SELECT interval '1s'":                                    1,
		"SELECT pg_catalog.interval '1s'":                         0,
		"RAISE EXCEPTION 'x' USING HINT = 'y';":                   0,
		"RAISE EXCEPTION 'x::text' USING HINT = 'a::b';":          2,
		"-- v := x::bigint":                                       0,
		"/* x::bigint */ y":                                       0,
		"v_text text := 'x';":                                     0,
		"pg_catalog.format('SELECT ($1).%I::text', c)":            1,
		"pg_catalog.format('SELECT ($1).%I::pg_catalog.text', c)": 0,
		"WHEN a THEN params[i]::pg_catalog.uuid::pg_catalog.text": 0,
	} {
		got := bareCasts("f", src)
		require.Len(t, got, want, "%s: %v", src, got)
	}
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
