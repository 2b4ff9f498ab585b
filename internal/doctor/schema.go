package doctor

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/lockgen/lockgen/pgadvisory"
)

// checkSchema compares the migrations applied with this lockgen's.
func checkSchema(ctx context.Context, e *env) Check {
	m, err := pgadvisory.NewMigrator(e.DB)
	if err != nil {
		return unanswered("lockgen's migrations", err)
	}
	st, err := m.Status(ctx)
	if err != nil {
		return unanswered("lockgen's version table", err)
	}
	const fix = "lockgen migrate up -db URL (over a direct connection), or pgadvisory.Migrate at start-up"
	needs := "fencing, run-once, the registry and lockgen status's names need it; RunExclusive and RunSession do not"
	var fenced []string
	for _, d := range e.Declared {
		if d.Fencing {
			fenced = append(fenced, d.Name)
		}
	}
	if !st.Tracked {
		var exists bool
		if err := e.DB.QueryRowContext(ctx, `SELECT pg_catalog.to_regnamespace('pgadvisory') IS NOT NULL`).Scan(&exists); err != nil {
			return unanswered("the schema pgadvisory", err)
		}
		if exists {
			return Check{Status: Warn,
				Detail: fmt.Sprintf("the schema pgadvisory exists but lockgen's version table %s does not: another migration tool applied it, so lockgen cannot tell which of its %d migrations it has", pgadvisory.MigrationTable, st.Latest),
				Fix:    "compare with lockgen migrate sql, and apply the migrations after the last one you copied (lockgen migrate sql -from N) with your tool"}
		}
		c := Check{Status: Warn,
			Detail: fmt.Sprintf("lockgen's schema is missing (no schema pgadvisory, no table %s): %s", pgadvisory.MigrationTable, needs),
			Fix:    fix}
		if len(fenced) > 0 {
			c.Status = Fail
			c.Detail += fmt.Sprintf("; %s declares fenced locks (%s), which fail with ErrNotMigrated", e.Source, strings.Join(fenced, ", "))
		}
		return c
	}
	if len(st.Unknown) > 0 {
		return Check{Status: Warn,
			Detail: fmt.Sprintf("the database is at version %d, newer than this lockgen (its latest is %d): applied by a newer lockgen", st.Current, st.Latest),
			Fix:    "upgrade lockgen in this service to the version that migrated the database"}
	}
	if pending := st.Pending(); len(pending) > 0 {
		files := make([]string, len(pending))
		for i, p := range pending {
			files[i] = p.File
		}
		status := Fail
		detail := fmt.Sprintf("%d of lockgen's %d migrations are missing: %s (the database is at version %d)", len(pending), st.Latest, strings.Join(files, ", "), st.Current)
		if st.Current == 0 {
			status = Warn
			detail = fmt.Sprintf("no lockgen migration is applied (the version table exists, at version 0): %s", needs)
		}
		return Check{Status: status, Detail: detail, Fix: fix}
	}
	return Check{Status: Pass, Detail: fmt.Sprintf("all %d of lockgen's migrations are applied (version %d, this lockgen's latest)", len(st.Migrations), st.Current)}
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
	rows, err := e.DB.QueryContext(ctx, `SELECT name, lock_id, COALESCE(pg_catalog.jsonb_array_length(declared_params), 0)
		FROM pgadvisory.registry_declaration ORDER BY name`)
	if err != nil {
		return unanswered("pgadvisory.registry_declaration", err)
	}
	defer rows.Close()
	type row struct {
		id     *int64
		params int
	}
	registered := map[string]row{}
	for rows.Next() {
		var name string
		var r row
		if err := rows.Scan(&name, &r.id, &r.params); err != nil {
			return unanswered("pgadvisory.registry_declaration", err)
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
		case d.Params != nil && (r.id != nil || r.params != len(d.Params)):
			changed = append(changed, fmt.Sprintf("%s (registered %s, declared with %d parameter(s))", d.Name, describe(r.id, r.params), len(d.Params)))
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

func describe(id *int64, params int) string {
	if id != nil {
		return fmt.Sprintf("with ID %d", *id)
	}
	return fmt.Sprintf("with %d parameter(s)", params)
}

func quoted(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = "'" + strings.ReplaceAll(n, "'", "''") + "'"
	}
	return strings.Join(q, ", ")
}
