package pgadvisory

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// schemaObject is one object that a migration creates and later migrations
// keep: what [Migrator.Status] looks for, so that it judges the schema by
// what exists, not only by what the version table claims.
type schemaObject struct {
	kind string // schema, function, table, view, sequence, trigger or column
	name string // schema-qualified, functions with their argument types; a trigger's or column's own name
	on   string // the table or view of a trigger or column
}

// String names the object as messages show it.
func (o schemaObject) String() string {
	switch o.kind {
	case "trigger":
		return fmt.Sprintf("trigger %s on %s", o.name, o.on)
	case "column":
		return fmt.Sprintf("column %s of %s", o.name, o.on)
	}
	return o.kind + " " + o.name
}

// regName is the name as to_regprocedure reads it: argument types
// qualified with pg_catalog, so that no type of the caller's search_path is
// found instead.
func (o schemaObject) regName() string {
	if o.kind != "function" {
		return o.name
	}
	fn, args, _ := strings.Cut(strings.TrimSuffix(o.name, ")"), "(")
	if args == "" {
		return fn + "()"
	}
	parts := strings.Split(args, ",")
	for i, p := range parts {
		typ, array := strings.CutSuffix(strings.TrimSpace(p), "[]")
		if catalog, ok := catalogTypeNames[typ]; ok {
			typ = catalog // "bigint" is SQL syntax; qualified, only the catalog's name resolves
		}
		parts[i] = "pg_catalog." + typ
		if array {
			parts[i] += "[]"
		}
	}
	return fn + "(" + strings.Join(parts, ",") + ")"
}

// catalogTypeNames maps the SQL names of the argument types used below to
// their names in pg_type.
var catalogTypeNames = map[string]string{"bigint": "int8", "boolean": "bool", "integer": "int4"}

// migrationObjects are, per version, the objects its Up SQL creates (a
// CREATE OR REPLACE of an earlier version's function is that version's).
// TestMigrationObjectsMatchTheCatalog holds this list to the catalog after
// every migration: a new migration adds its objects here.
var migrationObjects = map[int64][]schemaObject{
	1: {
		{kind: "schema", name: "pgadvisory"},
		{kind: "function", name: "pgadvisory.lock_id(text,text[])"},
		{kind: "function", name: "pgadvisory.valid_lock_name(text)"},
	},
	2: {
		{kind: "sequence", name: "pgadvisory.fencing_token_seq"},
		{kind: "table", name: "pgadvisory.fence"},
		{kind: "table", name: "pgadvisory.run_once"},
		{kind: "function", name: "pgadvisory.fence_require_current(bigint,bigint,text,text[])"},
		{kind: "function", name: "pgadvisory.fence_check()"},
		{kind: "function", name: "pgadvisory.fence_check_param()"},
		{kind: "function", name: "pgadvisory.fence_truncate_guard()"},
	},
	3: {
		{kind: "table", name: "pgadvisory.registry_declaration"},
		{kind: "table", name: "pgadvisory.registry"},
		{kind: "function", name: "pgadvisory.register_instance(text,text[])"},
		{kind: "view", name: "pgadvisory.status"},
	},
	4: {
		{kind: "function", name: "pgadvisory.run_once_finish()"},
		{kind: "trigger", name: "run_once_finish", on: "pgadvisory.run_once"},
	},
	5: {
		{kind: "function", name: "pgadvisory.fence_acquire(bigint[],boolean,text,text)"},
		{kind: "function", name: "pgadvisory.fence_handover()"},
	},
	6: {
		{kind: "function", name: "pgadvisory.fence_stamp()"},
		{kind: "function", name: "pgadvisory.fence_check_statement()"},
	},
	7: {
		{kind: "table", name: "pgadvisory.leader"},
		{kind: "function", name: "pgadvisory.leader_elect(bigint,text,text)"},
		{kind: "function", name: "pgadvisory.current_leader(bigint)"},
		{kind: "column", name: "leader_holder", on: "pgadvisory.status"},
		{kind: "column", name: "leader_term", on: "pgadvisory.status"},
		{kind: "column", name: "leader_since", on: "pgadvisory.status"},
	},
	8: {
		{kind: "table", name: "pgadvisory.fenced_table"},
		{kind: "function", name: "pgadvisory.fence_table_verify(oid,text,text[],boolean)"},
		{kind: "function", name: "pgadvisory.fence_register(regclass,text,text,text[])"},
		{kind: "function", name: "pgadvisory.fence_unregister(regclass)"},
		{kind: "function", name: "pgadvisory.fence_advance(bigint)"},
		{kind: "column", name: "fenced_strict", on: "pgadvisory.fence"},
		{kind: "column", name: "fenced_permissive", on: "pgadvisory.fence"},
		{kind: "function", name: "pgadvisory.fenced_table_sync()"},
		{kind: "trigger", name: "fenced_table_sync", on: "pgadvisory.fenced_table"},
		{kind: "trigger", name: "fenced_table_sync_truncate", on: "pgadvisory.fenced_table"},
	},
	9: {
		{kind: "table", name: "pgadvisory.lease"},
		{kind: "function", name: "pgadvisory.lease_acquire(bigint,text,uuid,interval,text)"},
		{kind: "function", name: "pgadvisory.lease_renew(bigint[],uuid,interval)"},
		{kind: "function", name: "pgadvisory.lease_release(bigint,uuid)"},
		{kind: "function", name: "pgadvisory.lease_expires(bigint,bigint)"},
		{kind: "function", name: "pgadvisory.leader_resign(bigint,bigint)"},
		{kind: "table", name: "pgadvisory.leader_resigned"},
	},
	10: {
		{kind: "function", name: "pgadvisory.slot_id(bigint,integer)"},
		{kind: "table", name: "pgadvisory.slot_limit"},
		{kind: "function", name: "pgadvisory.slot_try(bigint,integer,integer,boolean,integer[])"},
		{kind: "function", name: "pgadvisory.slot_registered(bigint)"},
		{kind: "function", name: "pgadvisory.slot_register(bigint,integer)"},
		{kind: "view", name: "pgadvisory.slot_status"},
	},
	11: {
		{kind: "table", name: "pgadvisory.waiter"},
		{kind: "sequence", name: "pgadvisory.waiter_seq_seq"},
		{kind: "function", name: "pgadvisory.wait_wake(bigint,boolean)"},
		{kind: "function", name: "pgadvisory.wait_check_args(text,bigint[],bigint)"},
		{kind: "function", name: "pgadvisory.wait_ahead(bigint[],bigint,boolean)"},
		{kind: "function", name: "pgadvisory.wait_take(bigint[],boolean,bigint)"},
		{kind: "function", name: "pgadvisory.wait_join(bigint[],bigint,bigint,boolean,bigint)"},
		{kind: "function", name: "pgadvisory.wait_try(bigint[],bigint,bigint,bigint,boolean,boolean)"},
		{kind: "function", name: "pgadvisory.wait_leave(bigint[],bigint)"},
		{kind: "function", name: "pgadvisory.fence_wait_try(bigint[],bigint,bigint,bigint,text,bigint)"},
	},
}

// objectsSQL reports, for each object, whether it exists. It reads only
// the catalogs (to_regclass and to_regprocedure need no privilege on the
// objects), so any role can run it.
const objectsSQL = `SELECT CASE o.kind
    WHEN 'schema' THEN pg_catalog.to_regnamespace(o.name) IS NOT NULL
    WHEN 'function' THEN pg_catalog.to_regprocedure(o.name) IS NOT NULL
    WHEN 'trigger' THEN EXISTS (SELECT FROM pg_catalog.pg_trigger AS t
        WHERE t.tgrelid = pg_catalog.to_regclass(o.rel) AND t.tgname = o.name)
    WHEN 'column' THEN EXISTS (SELECT FROM pg_catalog.pg_attribute AS a
        WHERE a.attrelid = pg_catalog.to_regclass(o.rel) AND a.attname = o.name AND a.attnum > 0 AND NOT a.attisdropped)
    ELSE EXISTS (SELECT FROM pg_catalog.pg_class AS c
        WHERE c.oid = pg_catalog.to_regclass(o.name)
          AND c.relkind::text = ANY (CASE o.kind WHEN 'table' THEN '{r,p}'::text[] WHEN 'view' THEN '{v}' ELSE '{S}' END))
    END
FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[]), pg_catalog.unnest($3::text[])) WITH ORDINALITY AS o(kind, name, rel, i)
ORDER BY o.i`

// objectsState is which of m's objects exist, per version.
type objectsState struct {
	present map[int64][]schemaObject
	absent  map[int64][]schemaObject
}

// readObjects checks every object of m's migrations in one query.
func (m *Migrator) readObjects(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}) (*objectsState, error) {
	var kinds, names, rels []string
	var order []struct {
		v int64
		o schemaObject
	}
	for _, mg := range m.list {
		for _, o := range migrationObjects[mg.Version] {
			kinds, names, rels = append(kinds, o.kind), append(names, o.regName()), append(rels, o.on)
			order = append(order, struct {
				v int64
				o schemaObject
			}{mg.Version, o})
		}
	}
	rows, err := q.QueryContext(ctx, objectsSQL, kinds, names, rels)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	st := &objectsState{present: map[int64][]schemaObject{}, absent: map[int64][]schemaObject{}}
	i := 0
	for rows.Next() {
		var exists bool
		if err := rows.Scan(&exists); err != nil {
			return nil, err
		}
		if i >= len(order) {
			return nil, fmt.Errorf("more rows than objects")
		}
		if exists {
			st.present[order[i].v] = append(st.present[order[i].v], order[i].o)
		} else {
			st.absent[order[i].v] = append(st.absent[order[i].v], order[i].o)
		}
		i++
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if i != len(order) {
		return nil, fmt.Errorf("%d rows for %d objects", i, len(order))
	}
	return st, nil
}

// objectNames lists objects for messages.
func objectNames(objs []schemaObject) []string {
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = o.String()
	}
	return out
}
