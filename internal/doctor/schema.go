package doctor

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/lockgen/lockgen/pgadvisory"
)

// checkSchema compares the migrations applied with this lockgen's, by the
// version table and by the objects they create (a version table can claim
// migrations whose objects are gone, and another tool can apply the schema
// without it).
func checkSchema(ctx context.Context, e *env) Check {
	m, err := pgadvisory.NewMigrator(e.DB)
	if err != nil {
		return unanswered("lockgen's migrations", err)
	}
	var fenced []string
	for _, d := range e.Declared {
		if d.Fencing {
			fenced = append(fenced, d.Name)
		}
	}
	st, err := m.Status(ctx)
	if pgadvisory.SQLState(err) == "42501" {
		return schemaByObjects(ctx, e, m, fenced)
	}
	if err != nil {
		return unanswered("lockgen's version table", err)
	}
	const fix = "lockgen migrate up -db URL (over a direct connection), or pgadvisory.Migrate at start-up"
	needs := "fencing, run-once, leader election, the registry and lockgen status's names need it; RunExclusive and RunSession do not"
	fencedFails := func(c Check) Check {
		if len(fenced) > 0 {
			c.Status = Fail
			c.Detail += fmt.Sprintf("; %s declares fenced locks (%s), which fail with ErrNotMigrated", e.Source, strings.Join(fenced, ", "))
			if c.Fix == "" {
				c.Fix = fix
			}
		}
		return c
	}
	switch {
	case !st.InStep():
		c := Check{Status: Fail, Detail: st.Drift(), Fix: driftFix(st)}
		if len(st.Missing) == 0 && st.Reconcilable && st.SchemaVersion == st.Latest && !e.uses(UseMigrate) {
			// Another tool applied every migration; only pgadvisory.Migrate
			// would fail, and this service does not call it.
			c.Status = Warn
			c.Detail += "; " + e.usesText() + ": pgadvisory.Migrate is not used, and every migration's objects are there"
		}
		return c
	case st.SchemaVersion == 0:
		table := fmt.Sprintf("no table %s", pgadvisory.MigrationTable)
		if st.Tracked {
			table = fmt.Sprintf("the version table %s records no migration", pgadvisory.MigrationTable)
		}
		return fencedFails(Check{Status: Warn,
			Detail: fmt.Sprintf("lockgen's schema is missing (no schema pgadvisory; %s): %s", table, needs),
			Fix:    fix})
	case len(st.Unknown) > 0:
		return Check{Status: Warn,
			Detail: fmt.Sprintf("the database is at version %d, newer than this lockgen (its latest is %d): applied by a newer lockgen", st.Current, st.Latest),
			Fix:    "upgrade lockgen in this service to the version that migrated the database"}
	}
	if pending := st.Pending(); len(pending) > 0 {
		files := make([]string, len(pending))
		for i, p := range pending {
			files[i] = p.File
		}
		return Check{Status: Fail,
			Detail: fmt.Sprintf("%d of lockgen's %d migrations are missing: %s (the database is at version %d)", len(pending), len(st.Migrations), strings.Join(files, ", "), st.Current),
			Fix:    fix}
	}
	if c, behind := tokensBehind(ctx, e); behind {
		return c
	}
	return Check{Status: Pass, Detail: fmt.Sprintf("all %d of lockgen's migrations are applied (version %d, this lockgen's latest), and the objects they create exist", len(st.Migrations), st.Current)}
}

// tokensBehind fails the check when the fencing token sequence is behind a
// published token: the sequence went back (an asynchronous failover that
// lost its advance, a restore of part of the schema), and every fenced
// acquisition of that lock fails with LF004 until it is advanced. A
// restore of the whole database takes the sequence and the published
// tokens back together, which no check can tell (README: After a restore).
// A role that may read neither is not judged.
func tokensBehind(ctx context.Context, e *env) (Check, bool) {
	var behind sql.NullBool
	err := e.DB.QueryRowContext(ctx, `SELECT CASE
		WHEN pg_catalog.has_table_privilege('pgadvisory.fence', 'SELECT')
		 AND pg_catalog.has_sequence_privilege('pgadvisory.fencing_token_seq', 'SELECT')
		THEN (SELECT pg_catalog.max(f.token) FROM pgadvisory.fence AS f) > (SELECT s.last_value FROM pgadvisory.fencing_token_seq AS s)
		END`).Scan(&behind)
	if err != nil || !behind.Bool {
		return Check{}, false
	}
	return Check{Status: Fail,
		Detail: "the fencing token sequence is behind a published token: it went back (an asynchronous failover, a partial restore), so fenced acquisitions of that lock fail with LF004",
		Fix:    "as the owner of lockgen's schema: lockgen fence -advance (SELECT pgadvisory.fence_advance();) moves the sequence past every token the database shows; after a restore of the whole database run it too"}, true
}

// driftFix is the fix for a version table that disagrees with the objects.
func driftFix(st *pgadvisory.MigrationStatus) string {
	switch {
	case !st.Reconcilable:
		return "restore the missing objects, or drop the schema pgadvisory if it holds nothing worth keeping, then lockgen migrate up -reconcile (see the detail)"
	case len(st.Missing) > 0:
		return "lockgen migrate up -reconcile -db URL (records what exists, applies the rest), then advance the fencing token sequence if stores outside PostgreSQL saw tokens"
	}
	return fmt.Sprintf("keep applying lockgen's migrations with your tool (lockgen migrate sql -goose -from %d) and do not call pgadvisory.Migrate; or hand the schema to lockgen: lockgen migrate up -reconcile -db URL", st.SchemaVersion)
}

// schemaByObjects judges the schema by its objects when the role may not
// read lockgen's version table: the application's own role usually may
// not, and needs to only when it calls pgadvisory.Migrate.
func schemaByObjects(ctx context.Context, e *env, m *pgadvisory.Migrator, fenced []string) Check {
	var role, owner string
	if err := e.DB.QueryRowContext(ctx, `SELECT pg_catalog.quote_ident(current_user), pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(c.relowner))
		FROM pg_catalog.pg_class AS c WHERE c.oid = pg_catalog.to_regclass($1)`, pgadvisory.MigrationTable).Scan(&role, &owner); err != nil {
		return unanswered("the version table's owner", err)
	}
	v, err := m.SchemaVersion(ctx)
	if err != nil {
		return unanswered("lockgen's objects", err)
	}
	grant := fmt.Sprintf("GRANT SELECT ON %s TO %s (as %s or a superuser)", pgadvisory.MigrationTable, role, owner)
	latest := m.Latest()
	detail := fmt.Sprintf("the role %s may not read lockgen's version table %s (owned by %s), so the migrations were judged by their objects: the schema holds lockgen's migrations up to %d of %d",
		role, pgadvisory.MigrationTable, owner, v, latest)
	if e.uses(UseMigrate) {
		return Check{Status: Fail,
			Detail: detail + "; pgadvisory.Migrate run by this role fails on that table (" + e.usesText() + ")",
			Fix:    grant + "; or run migrations with the owner's role and leave migrate out of -uses"}
	}
	switch {
	case v == latest:
		return Check{Status: Pass, Detail: detail + "; " + e.usesText() + ": this role does not need the version table"}
	case v == 0 && len(fenced) > 0:
		return Check{Status: Fail, Detail: detail + fmt.Sprintf("; %s declares fenced locks (%s), which fail with ErrNotMigrated", e.Source, strings.Join(fenced, ", ")),
			Fix: "lockgen migrate up -db URL, with the role that owns the version table (" + owner + ")"}
	case v == 0:
		return Check{Status: Warn, Detail: detail + ": lockgen's schema is missing",
			Fix: "lockgen migrate up -db URL, with the role that owns the version table (" + owner + ")"}
	}
	return Check{Status: Fail, Detail: detail + fmt.Sprintf(": migrations %d to %d are missing", v+1, latest),
		Fix: "lockgen migrate up -db URL, with the role that owns the version table (" + owner + ")"}
}

// checkRegistry compares the declarations with pgadvisory.registry_declaration.
func checkRegistry(ctx context.Context, e *env) Check {
	if e.Declared == nil {
		return Check{Status: Pass, Detail: "not checked: no declarations file (-f locks.yaml)"}
	}
	register := fmt.Sprintf("lockgen register -f %s", e.Source)
	var exists bool
	if err := e.DB.QueryRowContext(ctx, `SELECT pg_catalog.to_regclass('pgadvisory.registry_declaration') IS NOT NULL`).Scan(&exists); err != nil {
		return unanswered("the registry", err)
	}
	if !exists {
		return Check{Status: Warn,
			Detail: "the registry (migration 00003, pgadvisory.registry_declaration) is missing: lockgen status shows raw keys instead of names",
			Fix:    "lockgen migrate up, then " + register}
	}
	rows, err := e.DB.QueryContext(ctx, `SELECT name, lock_id, declared_params::text FROM pgadvisory.registry_declaration ORDER BY name`)
	if err != nil {
		if pgadvisory.SQLState(err) == "42501" {
			return Check{Status: Warn,
				Detail: fmt.Sprintf("this role may not read the registry (pgadvisory.registry_declaration: %v), so it cannot be compared with %s", err, e.Source),
				Fix:    "GRANT SELECT ON pgadvisory.registry_declaration TO " + e.roleName(ctx) + " (as its owner), or run doctor -f with the role that registers"}
		}
		return unanswered("pgadvisory.registry_declaration", err)
	}
	defer rows.Close()
	type row struct {
		id     *int64
		params []registryParam // nil for a plain lock
	}
	registered := map[string]row{}
	for rows.Next() {
		var name string
		var r row
		var params sql.NullString
		if err := rows.Scan(&name, &r.id, &params); err != nil {
			return unanswered("pgadvisory.registry_declaration", err)
		}
		if params.Valid {
			if err := json.Unmarshal([]byte(params.String), &r.params); err != nil {
				return unanswered("pgadvisory.registry_declaration's declared_params of "+name, err)
			}
			if r.params == nil {
				r.params = []registryParam{}
			}
		}
		registered[name] = r
	}
	if err := rows.Err(); err != nil {
		return unanswered("pgadvisory.registry_declaration", err)
	}

	var missing, changed, stale []string
	declared := map[string]bool{}
	for _, d := range e.Declared {
		declared[d.Name] = true
		r, ok := registered[d.Name]
		switch {
		case !ok:
			missing = append(missing, d.Name)
		case d.Params == nil && (r.id == nil || *r.id != d.ID):
			changed = append(changed, fmt.Sprintf("%s (registered %s, declared ID %d)", d.Name, describe(r.id, r.params), d.ID))
		case d.Params != nil && (r.id != nil || !sameParams(r.params, d.Params)):
			changed = append(changed, fmt.Sprintf("%s (registered %s, declared with %s)", d.Name, describe(r.id, r.params), paramList(declaredParams(d.Params))))
		}
	}
	for name := range registered {
		if !declared[name] {
			stale = append(stale, name)
		}
	}
	slices.Sort(stale)
	if len(missing)+len(changed)+len(stale) == 0 {
		return Check{Status: Pass, Detail: fmt.Sprintf("the registry holds the %d lock(s) %s declares, as declared, and no other name", len(e.Declared), e.Source)}
	}
	var parts []string
	var fixes []string
	if len(missing) > 0 {
		parts = append(parts, fmt.Sprintf("declared in %s but not registered (lockgen status shows their raw keys): %s", e.Source, strings.Join(missing, ", ")))
	}
	if len(changed) > 0 {
		parts = append(parts, "registered differently than declared: "+strings.Join(changed, ", "))
	}
	if len(missing)+len(changed) > 0 {
		fixes = append(fixes, register)
	}
	if len(stale) > 0 {
		parts = append(parts, fmt.Sprintf("registered but not declared in %s (retired, renamed, or declared by another service sharing this database): %s", e.Source, strings.Join(stale, ", ")))
		fixes = append(fixes, fmt.Sprintf("if no service declares them any more: DELETE FROM pgadvisory.registry_declaration WHERE name IN (%s)", quoted(stale)))
	}
	return Check{Status: Warn, Detail: strings.Join(parts, "; "), Fix: strings.Join(fixes, "; ")}
}

// registryParam is one element of registry_declaration.declared_params.
type registryParam struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

func declaredParams(ps []pgadvisory.DeclaredParam) []registryParam {
	out := make([]registryParam, len(ps))
	for i, p := range ps {
		out[i] = registryParam{p.Name, string(p.Type)}
	}
	return out
}

// sameParams compares names and types, in order: another name or type
// gives other IDs for the same values, or other columns in lockgen status.
func sameParams(registered []registryParam, declared []pgadvisory.DeclaredParam) bool {
	return slices.Equal(registered, declaredParams(declared))
}

// paramList shows parameters as locks.yaml declares them: "(tenant_id int64)".
func paramList(ps []registryParam) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = p.Name + " " + p.Type
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

func describe(id *int64, params []registryParam) string {
	if id != nil {
		return fmt.Sprintf("with ID %d", *id)
	}
	return "with " + paramList(params)
}

// roleName is the current role, quoted as SQL needs it; "<role>" when it
// cannot be read.
func (e *env) roleName(ctx context.Context) string {
	var role string
	if err := e.DB.QueryRowContext(ctx, `SELECT pg_catalog.quote_ident(current_user)`).Scan(&role); err != nil {
		return "<role>"
	}
	return role
}

func quoted(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = "'" + strings.ReplaceAll(n, "'", "''") + "'"
	}
	return strings.Join(q, ", ")
}
