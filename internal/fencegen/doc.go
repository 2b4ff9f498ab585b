// Package fencegen writes the goose SQL migration that fences an
// application table with a lock declared in locks.yaml (lockgen fence).
//
// The migration adds the column fencing_token bigint and two triggers from
// lockgen's migrations (package migrations, 00002_fencing.sql): a BEFORE
// INSERT OR UPDATE OR DELETE row trigger, pgadvisory.fence_check with the
// lock's ID for a plain lock or pgadvisory.fence_check_param with its name
// and the row's parameter columns for a parameterized lock, and a BEFORE
// TRUNCATE guard. Its Down drops both triggers and the column.
//
// [NewSpec] checks the request against the declaration, [Emit] writes the
// SQL, [NextVersion] picks the migration's version from the files already in
// the directory, and [WriteNew] writes the file without ever replacing one.
package fencegen
