package pgadvisory

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/lockgen/lockgen/keyspace"
)

// Register records decls, typically a generated package's Declared, in the
// database's lock registry (migration 00003: the tables
// pgadvisory.registry_declaration and pgadvisory.registry), so that the view
// pgadvisory.status and lockgen status show held and awaited locks by name:
//
//	if err := pgadvisory.Register(ctx, db, locks.Declared); err != nil { … }
//
// Every declaration gets a row in registry_declaration; every plain lock's ID
// a row in registry. A parameterized lock has one ID per parameter value, so
// its instances appear by name only once registered with [RegisterInstance]
// or the SQL function pgadvisory.register_instance; until then status shows
// their raw key.
//
// Register only adds and updates rows, in one statement: several services
// may share a database and every replica may call it at start-up. Rows of
// declarations that disappeared stay until deleted by hand. An ID registered
// under another name (a rename with on_rename: keep_id) takes the name
// registered last. Rows that are already up to date are not rewritten.
//
// decls are checked first (valid names, no duplicate names or plain IDs,
// known parameter types, and a plain lock's ID is keyspace.ID(Name) unless
// Pinned); a problem returns an error wrapping [ErrInvalidArgument] and
// nothing is written. The migrations must be applied ([Migrate]). pgx users
// pass stdlib.OpenDBFromPool(pool). Errors start with "pgadvisory: register:".
func Register(ctx context.Context, db *sql.DB, decls []Declared) error {
	if db == nil {
		return fmt.Errorf("pgadvisory: register: nil *sql.DB: %w", ErrInvalidArgument)
	}
	rows, err := registryRows(decls)
	if err != nil {
		return fmt.Errorf("pgadvisory: register: %w", err)
	}
	if len(rows) == 0 {
		return nil
	}
	doc, err := json.Marshal(rows)
	if err != nil {
		return fmt.Errorf("pgadvisory: register: %w", err)
	}
	if _, err := db.ExecContext(ctx, registerSQL, string(doc)); err != nil {
		return fmt.Errorf("pgadvisory: register: %w", registryErr(err))
	}
	return nil
}

// registerSQL upserts the declarations (sorted by name) and the plain locks'
// IDs (sorted by ID) in one statement, so concurrent callers lock rows in the
// same order and never deadlock.
const registerSQL = `WITH d AS (
    SELECT * FROM pg_catalog.jsonb_to_recordset($1::jsonb)
        AS d(name text, lock_id bigint, declared_params jsonb, doc text)
), decl AS (
    INSERT INTO pgadvisory.registry_declaration AS t (name, lock_id, declared_params, doc)
    SELECT name, lock_id, declared_params, doc FROM d ORDER BY name
    ON CONFLICT (name) DO UPDATE
        SET lock_id = excluded.lock_id, declared_params = excluded.declared_params,
            doc = excluded.doc, registered_at = now()
        WHERE (t.lock_id, t.declared_params, t.doc)
              IS DISTINCT FROM (excluded.lock_id, excluded.declared_params, excluded.doc)
)
INSERT INTO pgadvisory.registry AS r (lock_id, name, doc)
SELECT lock_id, name, doc FROM d WHERE lock_id IS NOT NULL ORDER BY lock_id
ON CONFLICT (lock_id) DO UPDATE
    SET name = excluded.name, params = NULL, declared_params = NULL,
        doc = excluded.doc, registered_at = now()
    WHERE (r.name, r.params, r.declared_params, r.doc)
          IS DISTINCT FROM (excluded.name, NULL::jsonb, NULL::jsonb, excluded.doc)`

// registryRow is one declaration as registerSQL reads it.
type registryRow struct {
	Name           string          `json:"name"`
	LockID         *int64          `json:"lock_id,omitempty"`
	DeclaredParams []registryParam `json:"declared_params,omitempty"`
	Doc            string          `json:"doc,omitempty"`
}

// registryParam is one element of declared_params.
type registryParam struct {
	Name string             `json:"name"`
	Type keyspace.ParamType `json:"type"`
}

// registryRows checks decls and converts them.
func registryRows(decls []Declared) ([]registryRow, error) {
	rows := make([]registryRow, 0, len(decls))
	names := make(map[string]bool, len(decls))
	ids := make(map[int64]string)
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	for _, d := range decls {
		if err := keyspace.ValidateName(d.Name); err != nil {
			bad("lock %q: %s", d.Name, strings.TrimPrefix(err.Error(), "keyspace: "))
			continue
		}
		if names[d.Name] {
			bad("lock %q is declared twice", d.Name)
			continue
		}
		names[d.Name] = true
		row := registryRow{Name: d.Name, Doc: d.Doc}
		if len(d.Params) == 0 {
			if !d.Pinned && d.ID != keyspace.ID(d.Name) {
				bad("lock %q: ID %d is not keyspace.ID of its name (%d) and it is not Pinned", d.Name, d.ID, keyspace.ID(d.Name))
			}
			if other, dup := ids[d.ID]; dup {
				bad("locks %q and %q have the same ID %d", other, d.Name, d.ID)
			}
			ids[d.ID] = d.Name
			row.LockID = &d.ID
		}
		for _, p := range d.Params {
			if _, err := keyspace.ParseParamType(string(p.Type)); err != nil || p.Name == "" {
				bad("lock %q: parameter %q of type %q", d.Name, p.Name, p.Type)
			}
			row.DeclaredParams = append(row.DeclaredParams, registryParam{Name: p.Name, Type: p.Type})
		}
		rows = append(rows, row)
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrInvalidArgument, strings.Join(problems, "; "))
	}
	slices.SortFunc(rows, func(a, b registryRow) int { return strings.Compare(a.Name, b.Name) })
	return rows, nil
}

// RegisterInstance records one instance of a parameterized lock in the
// registry, so that status shows it by name and parameters instead of its
// raw key. lock is what the generated constructor returns and params are the
// same values as canonical text (keyspace.Int64Param etc.), in declaration
// order:
//
//	err := pgadvisory.RegisterInstance(ctx, db, locks.BillingInvoice(42), keyspace.Int64Param(42))
//
// The declaration must be registered already ([Register]). The parameters
// must give lock.ID (keyspace.ParamID(lock.Name, params...)), else the
// result wraps [ErrInvalidArgument] and nothing is written. To register many
// instances at once use SQL:
//
//	SELECT pgadvisory.register_instance('billing.invoice', id::text) FROM tenants;
//
// Errors start with "pgadvisory: register instance:".
func RegisterInstance(ctx context.Context, db *sql.DB, lock Lock, params ...string) error {
	fail := func(err error) error { return fmt.Errorf("pgadvisory: register instance: %w", err) }
	switch {
	case db == nil:
		return fail(fmt.Errorf("nil *sql.DB: %w", ErrInvalidArgument))
	case len(params) == 0:
		return fail(fmt.Errorf("%s: no parameters (plain locks are registered by Register): %w", lock, ErrInvalidArgument))
	case keyspace.ValidateName(lock.Name) != nil:
		return fail(fmt.Errorf("invalid lock name %q: %w", lock.Name, ErrInvalidArgument))
	case keyspace.ParamID(lock.Name, params...) != lock.ID:
		return fail(fmt.Errorf("%s: the parameters %q give ID %d: %w", lock, params, keyspace.ParamID(lock.Name, params...), ErrInvalidArgument))
	}
	values, err := json.Marshal(params)
	if err != nil {
		return fail(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fail(err)
	}
	defer tx.Rollback()
	var id int64
	err = tx.QueryRowContext(ctx, `SELECT pgadvisory.register_instance($1, VARIADIC
		ARRAY(SELECT pg_catalog.jsonb_array_elements_text($2::jsonb)))`, lock.Name, string(values)).Scan(&id)
	if err != nil {
		return fail(registryErr(err))
	}
	if id != lock.ID {
		// The declared types canonicalize params into another value.
		return fail(fmt.Errorf("%s: the parameters %q are not canonical text of the declared types (they register ID %d): %w", lock, params, id, ErrInvalidArgument))
	}
	if err := tx.Commit(); err != nil {
		return fail(err)
	}
	return nil
}

// registryErr adds a hint when the registry's migration is not applied.
func registryErr(err error) error {
	switch SQLState(err) {
	case "42P01", "3F000", "42883": // undefined table, schema, function
		return fmt.Errorf("the lock registry is missing: run pgadvisory.Migrate or goose up first: %w", err)
	}
	return err
}
