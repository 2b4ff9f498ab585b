package pgadvisory

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
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
// Pinned); problems return an error of kind [ErrInvalidArgument] naming them
// all, and nothing is written. The migrations must be applied ([Migrate]).
// pgx users pass stdlib.OpenDBFromPool(pool).
//
// Errors are an [*Error] with Op "register" (the message starts with
// "pgadvisory: register:") that wraps the cause. Its Kind is
// [ErrInvalidArgument] for a nil db or bad declarations, and nil otherwise.
func Register(ctx context.Context, db *sql.DB, decls []Declared) error {
	if db == nil {
		return registryError("register", ErrInvalidArgument, errors.New("nil *sql.DB"))
	}
	rows, err := registryRows(decls)
	if err != nil {
		return registryError("register", ErrInvalidArgument, err)
	}
	if len(rows) == 0 {
		return nil
	}
	doc, err := json.Marshal(rows)
	if err != nil {
		return registryError("register", nil, err)
	}
	if _, err := db.ExecContext(ctx, registerSQL, string(doc)); err != nil {
		return registryError("register", nil, registryErr(err))
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

// registryRows checks decls and converts them; the error names every
// problem found.
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
		return nil, errors.New(strings.Join(problems, "; "))
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
// error's kind is [ErrInvalidArgument] and nothing is written. To register
// many instances at once use SQL:
//
//	SELECT pgadvisory.register_instance('billing.invoice', id::text) FROM tenants;
//
// Errors are an [*Error] with Op "register instance" (the message starts
// with "pgadvisory: register instance:") that wraps the cause. Its Kind is
// [ErrInvalidArgument] for bad arguments, and nil otherwise.
func RegisterInstance(ctx context.Context, db *sql.DB, lock Lock, params ...string) error {
	const op = "register instance"
	invalid := func(err error) error { return registryError(op, ErrInvalidArgument, err) }
	fail := func(err error) error { return registryError(op, nil, err) }
	switch {
	case db == nil:
		return invalid(errors.New("nil *sql.DB"))
	case len(params) == 0:
		return invalid(fmt.Errorf("%s: no parameters (plain locks are registered by Register)", lock))
	case keyspace.ValidateName(lock.Name) != nil:
		return invalid(fmt.Errorf("invalid lock name %q", lock.Name))
	case keyspace.ParamID(lock.Name, params...) != lock.ID:
		return invalid(fmt.Errorf("%s: the parameters %q give ID %d", lock, params, keyspace.ParamID(lock.Name, params...)))
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
		return invalid(fmt.Errorf("%s: the parameters %q are not canonical text of the declared types (they register ID %d)", lock, params, id))
	}
	if err := tx.Commit(); err != nil {
		return fail(err)
	}
	return nil
}

// registryError is the error of a failed Register ("register") or
// RegisterInstance ("register instance"); kind is nil for a cause with no
// dedicated kind.
func registryError(op Op, kind, err error) error {
	return &Error{Op: op, SQLState: SQLState(err), Kind: kind, Err: err}
}

// registryErr adds a hint when the registry's migration is not applied.
func registryErr(err error) error {
	switch SQLState(err) {
	case "42P01", "3F000", "42883": // undefined table, schema, function
		return fmt.Errorf("the lock registry is missing: run pgadvisory.Migrate or goose up first: %w", err)
	}
	return err
}
