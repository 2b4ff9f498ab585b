// Package fencegen writes the goose SQL migration that fences an
// application table with a lock declared in locks.yaml (lockgen fence).
//
// The migration uses lockgen's trigger functions (package migrations,
// 00006_fencing_statement_check.sql). It first checks that they exist
// ("run pgadvisory.Migrate (or lockgen's migrations) first" otherwise),
// that the table is a plain table (partitioned tables, partitions and
// tables in an inheritance tree are refused: statement triggers do not reach
// them whole), and that each parameter column exists and has a type of its
// declared parameter type (int64: smallint, integer or bigint; uuid: uuid;
// bool: boolean; string: text or varchar), whose text no session setting
// changes (42804 otherwise, before anything changes). Then it adds the column fencing_token bigint, whose default
// stamps inserted rows with the transaction's token, and:
//
//   - zz_pgadvisory_fence, BEFORE INSERT OR UPDATE FOR EACH ROW, firing
//     only when a row's stamp differs from the transaction's token
//     (pgadvisory.fence_stamp: re-stamps it, refuses a write without a
//     token under strict);
//   - zz_pgadvisory_fence_insert, _update and _delete, AFTER ... FOR EACH
//     STATEMENT with transition tables (pgadvisory.fence_check_statement:
//     the token must be the published one of every distinct lock of the
//     rows as written);
//   - zz_pgadvisory_fence_truncate, BEFORE TRUNCATE
//     (pgadvisory.fence_truncate_guard).
//
// A plain lock's triggers get its ID, a parameterized lock's its name and
// the row's parameter columns, which the migration makes NOT NULL. Last it
// lists the table in pgadvisory.fenced_table (pgadvisory.fence_register,
// migration 00008, which checks the columns' types): the trigger functions
// that run as their owner refuse tables that are not listed. The role that
// runs the migration needs EXECUTE on fence_register and on the trigger
// functions (the owner of lockgen's schema has it). Down unlists the table
// and drops the triggers and the column; it leaves NOT NULL.
//
// Tables fenced by lockgen fence before that layout (a BEFORE ROW trigger
// pgadvisory.fence_check or fence_check_param that checks each row) move to
// it with an upgrade migration ([EmitUpgrade], lockgen fence -upgrade).
//
// [NewSpec] checks the request against the declaration, [Emit] writes the
// SQL, [Scan] finds the migrations lockgen fence wrote before (a table is
// fenced once), [NextVersion] picks the migration's version from the files
// already in the directory, and [WriteNew] writes the file without ever
// replacing one. [Generate] does all of it.
package fencegen
