package pgadvisory

import (
	"context"
	"fmt"
	"slices"
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
	return st, nil
}
