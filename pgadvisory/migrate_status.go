package pgadvisory

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"
)

// MigrationStatus is what [Migrator.Status] found in a database.
type MigrationStatus struct {
	// Tracked is false when the version table [MigrationTable] does not
	// exist: lockgen never migrated this database (its schema may still
	// have been applied by another migration tool, see [Migrations]).
	Tracked bool
	// Current is the highest applied version; 0 when none is.
	Current int64
	// Latest is the highest version this lockgen knows.
	Latest int64
	// Migrations are this lockgen's migrations with their state, in
	// ascending version order.
	Migrations []MigrationState
	// Unknown are versions applied in the database that this lockgen does
	// not know, in ascending order: applied by a newer lockgen.
	Unknown []int64

	// SchemaVersion is the version that the schema's objects show,
	// whatever the version table says: the highest version whose objects,
	// and those of every version below it, all exist; 0 when the schema
	// pgadvisory does not exist.
	SchemaVersion int64
	// Missing are objects of migrations that the version table records as
	// applied but that the database does not have (a restore that left the
	// schema pgadvisory out, a DROP by hand), e.g. "function
	// pgadvisory.lock_id(text,text[])".
	Missing []string
	// Untracked are objects of migrations that the version table does not
	// record (or of any migration, without the table) that exist anyway:
	// another migration tool applied them.
	Untracked []string
	// Reconcilable is true when the objects are exactly those of the
	// migrations up to SchemaVersion, so that [Migrator.Reconcile] can make
	// the version table say so.
	Reconcilable bool
}

// InStep reports whether the version table and the schema's objects
// agree: no object of an applied migration is missing and none of a
// migration not applied exists.
func (s *MigrationStatus) InStep() bool { return len(s.Missing) == 0 && len(s.Untracked) == 0 }

// Drift says how the version table and the schema's objects disagree and
// what to do; "" when they agree (see [MigrationStatus.InStep]).
func (s *MigrationStatus) Drift() string {
	if s.InStep() {
		return ""
	}
	var b strings.Builder
	switch {
	case len(s.Missing) > 0 && s.SchemaVersion == 0 && len(s.Untracked) == 0:
		fmt.Fprintf(&b, "the version table %s records migrations up to %d, but the schema pgadvisory does not exist "+
			"(a restore that left it out, such as pg_dump -n public, or a DROP SCHEMA)", MigrationTable, s.Current)
	case len(s.Missing) > 0:
		fmt.Fprintf(&b, "the version table %s records migrations up to %d, but %d of their objects are missing: %s",
			MigrationTable, s.Current, len(s.Missing), strings.Join(s.Missing, ", "))
		if len(s.Untracked) > 0 {
			fmt.Fprintf(&b, "; and objects of migrations it does not record exist: %s", strings.Join(s.Untracked, ", "))
		}
	case !s.Tracked || s.Current == 0:
		fmt.Fprintf(&b, "the schema pgadvisory holds the objects of lockgen's migrations up to %d, but lockgen's version table %s records none: "+
			"another migration tool (your own goose table?) applied them", s.SchemaVersion, MigrationTable)
		if !s.Tracked {
			b.WriteString(" (the table does not exist)")
		}
	default:
		fmt.Fprintf(&b, "objects of migrations that the version table %s does not record exist (it records up to %d): %s",
			MigrationTable, s.Current, strings.Join(s.Untracked, ", "))
	}
	b.WriteString(". ")
	switch {
	case s.Reconcilable && s.SchemaVersion == 0:
		b.WriteString("lockgen migrate up -reconcile (Migrator.Reconcile) forgets the version table's records of objects that are gone and applies every migration; " +
			"the fencing token sequence then starts again at 1, so if stores outside PostgreSQL have seen tokens, advance it past them " +
			"(SELECT setval('pgadvisory.fencing_token_seq', N))")
	case s.Reconcilable:
		fmt.Fprintf(&b, "Either keep applying lockgen's migrations with that tool (lockgen migrate sql -goose -from %d prints the later ones) and do not call pgadvisory.Migrate, "+
			"or hand the schema to lockgen: lockgen migrate up -reconcile (Migrator.Reconcile) records migrations 1 to %d as applied and applies the rest", s.SchemaVersion, s.SchemaVersion)
	default:
		b.WriteString("The objects match no version of lockgen's schema, so lockgen will not guess: restore the missing objects " +
			"(lockgen migrate sql prints every migration's SQL), or, if the schema holds nothing worth keeping, drop it (DROP SCHEMA pgadvisory CASCADE) " +
			"and run lockgen migrate up -reconcile")
	}
	return b.String()
}

// MigrationState is one migration and whether the database has it.
type MigrationState struct {
	Migration
	Applied   bool
	AppliedAt time.Time // when it was applied, as the version table recorded it; zero when pending
}

// Pending returns the migrations not applied, in ascending version order.
func (s *MigrationStatus) Pending() []Migration {
	var out []Migration
	for _, m := range s.Migrations {
		if !m.Applied {
			out = append(out, m.Migration)
		}
	}
	return out
}

// UpToDate reports whether every migration this lockgen knows is applied.
func (s *MigrationStatus) UpToDate() bool { return s.Tracked && len(s.Pending()) == 0 }

// emptyReason says why nothing can be rolled back.
func (s *MigrationStatus) emptyReason() string {
	if !s.Tracked {
		return fmt.Sprintf("lockgen's version table %s does not exist, so lockgen never migrated this database", MigrationTable)
	}
	return "no lockgen migration is applied"
}

// Status reports which of lockgen's migrations db has, from the version
// table. It takes no lock and creates nothing: on a database that lockgen
// never migrated, Tracked is false and every migration is pending.
func (m *Migrator) Status(ctx context.Context) (*MigrationStatus, error) {
	st := &MigrationStatus{Latest: m.Latest()}
	if err := m.db.QueryRowContext(ctx, `SELECT pg_catalog.to_regclass($1) IS NOT NULL`, MigrationTable).Scan(&st.Tracked); err != nil {
		return nil, migrateError(nil, fmt.Errorf("status: %w", err))
	}
	applied := map[int64]time.Time{}
	if st.Tracked {
		// goose deletes a version's row when it rolls back; older goose
		// versions inserted is_applied = false instead, so the last row of
		// each version decides.
		rows, err := m.db.QueryContext(ctx, `SELECT version_id, is_applied, tstamp FROM `+MigrationTable+` ORDER BY id`)
		if err != nil {
			if SQLState(err) == "42501" { // insufficient_privilege
				return nil, migrateError(nil, fmt.Errorf("status: reading %s: %w%s", MigrationTable, err, versionTableGrant(ctx, m.db)))
			}
			return nil, migrateError(nil, fmt.Errorf("status: reading %s: %w", MigrationTable, err))
		}
		defer rows.Close()
		for rows.Next() {
			var v int64
			var ok bool
			var at time.Time
			if err := rows.Scan(&v, &ok, &at); err != nil {
				return nil, migrateError(nil, fmt.Errorf("status: reading %s: %w", MigrationTable, err))
			}
			if v == 0 {
				continue // goose's marker row
			}
			if ok {
				applied[v] = at
			} else {
				delete(applied, v)
			}
		}
		if err := rows.Err(); err != nil {
			return nil, migrateError(nil, fmt.Errorf("status: reading %s: %w", MigrationTable, err))
		}
	}
	for _, mg := range m.list {
		at, ok := applied[mg.Version]
		st.Migrations = append(st.Migrations, MigrationState{Migration: mg, Applied: ok, AppliedAt: at})
		delete(applied, mg.Version)
	}
	for v := range applied {
		st.Unknown = append(st.Unknown, v)
	}
	slices.Sort(st.Unknown)
	for _, s := range st.Migrations {
		if s.Applied {
			st.Current = max(st.Current, s.Version)
		}
	}
	if n := len(st.Unknown); n > 0 {
		st.Current = max(st.Current, st.Unknown[n-1])
	}
	objs, err := m.readObjects(ctx, m.db)
	if err != nil {
		return nil, migrateError(nil, fmt.Errorf("status: reading the catalog: %w", err))
	}
	m.judgeObjects(st, objs)
	return st, nil
}

// judgeObjects fills st's fields that compare the objects with the version
// table.
func (m *Migrator) judgeObjects(st *MigrationStatus, objs *objectsState) {
	st.SchemaVersion = schemaVersion(m.list, objs)
	st.Reconcilable = true
	for _, s := range st.Migrations {
		if s.Applied {
			st.Missing = append(st.Missing, objectNames(objs.absent[s.Version])...)
		} else {
			st.Untracked = append(st.Untracked, objectNames(objs.present[s.Version])...)
		}
		if s.Version > st.SchemaVersion && len(objs.present[s.Version]) > 0 {
			st.Reconcilable = false
		}
	}
}

// schemaVersion is the highest version whose objects, and those of every
// version below it, all exist.
func schemaVersion(list []Migration, objs *objectsState) int64 {
	var v int64
	for _, mg := range list {
		if len(objs.absent[mg.Version]) > 0 {
			break
		}
		v = mg.Version
	}
	return v
}

// SchemaVersion returns the version that the schema's objects show,
// without reading the version table (see [MigrationStatus.SchemaVersion]):
// it reads only the catalogs, so a role that may not read the version
// table can call it.
func (m *Migrator) SchemaVersion(ctx context.Context) (int64, error) {
	objs, err := m.readObjects(ctx, m.db)
	if err != nil {
		return 0, migrateError(nil, fmt.Errorf("schema version: reading the catalog: %w", err))
	}
	return schemaVersion(m.list, objs), nil
}

// versionTableGrant is the advice for a role that may not read the version
// table: the GRANT that fixes it, as the table's owner would run it.
func versionTableGrant(ctx context.Context, db *sql.DB) string {
	var role, owner string
	err := db.QueryRowContext(ctx, `SELECT pg_catalog.quote_ident(current_user), pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(c.relowner))
		FROM pg_catalog.pg_class AS c WHERE c.oid = pg_catalog.to_regclass($1)`, MigrationTable).Scan(&role, &owner)
	if err != nil {
		return ""
	}
	return fmt.Sprintf(" (the role %s may not read lockgen's version table, which %s owns: as %s or a superuser, run GRANT SELECT ON %s TO %s; "+
		"applying or rolling back migrations needs the owner's role)", role, owner, owner, MigrationTable, role)
}
