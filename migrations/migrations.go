// Package migrations holds lockgen's SQL migrations for PostgreSQL, in goose
// v3 format, embedded in [FS].
//
// They create the schema pgadvisory with two pure functions, the SQL twins of
// package keyspace:
//
//   - pgadvisory.lock_id(name text, VARIADIC params text[] DEFAULT '{}')
//     returns bigint, the same ID as keyspace.ParamID(name, params...):
//     SELECT pgadvisory.lock_id('reports.daily_email') is -6078806957557529815,
//     and SELECT pgadvisory.lock_id('billing.invoice', '42') is the ID of
//     billing.invoice for tenant 42. Parameters are canonical text (see
//     keyspace.Canonical). It does not validate the name, like ParamID. A
//     NULL name, a NULL parameter or a multi-dimensional array returns NULL
//     (never an ID equal to another tuple's); note that
//     pg_advisory_lock(NULL) returns NULL without taking a lock.
//   - pgadvisory.valid_lock_name(name text) returns boolean, true exactly
//     when keyspace.ValidateName(name) accepts it.
//
// Both are IMMUTABLE, STRICT, PARALLEL SAFE, LANGUAGE sql, and work on
// PostgreSQL 13 and later. USAGE on the schema is granted to PUBLIC. Down
// drops the functions and the schema (without CASCADE).
//
// 00002_fencing.sql adds fencing tokens and the run-once ledger:
//
//   - the sequence pgadvisory.fencing_token_seq (tokens, never re-issued);
//   - the table pgadvisory.fence (lock_id bigint PRIMARY KEY, token bigint,
//     published_at timestamptz): the published token of each lock;
//   - the table pgadvisory.run_once (lock_id, window_key, token, holder,
//     started_at, finished_at; PRIMARY KEY (lock_id, window_key));
//   - the trigger functions pgadvisory.fence_check() (row trigger, arguments:
//     lock ID, 'strict' or 'permissive'), pgadvisory.fence_check_param()
//     (row trigger, arguments: lock name, policy, the row's parameter
//     columns in declaration order) and pgadvisory.fence_truncate_guard()
//     (BEFORE TRUNCATE statement trigger, the same arguments as the row
//     trigger it accompanies), and their helper
//     pgadvisory.fence_require_current(bigint, bigint, text, text[]).
//
// A write to a fenced table carries the transaction-local setting
// pgadvisory.fencing_token, else the row's fencing_token column; it is
// accepted only when that token is the lock's published token. The triggers
// raise SQLSTATE LF001 for a stale token, LF002 for a missing token in strict
// mode and LF003 for a TRUNCATE of a table fenced by a parameterized lock;
// their messages start with "pgadvisory: ". lockgen fence generates the
// migration that fences an application table. Down drops 00002's objects,
// and fails while a table still uses the trigger functions.
//
// 00003_registry.sql adds the registry of declared locks and the status view:
//
//   - the table pgadvisory.registry_declaration (name PRIMARY KEY, lock_id,
//     declared_params jsonb, doc, registered_at): one row per declared lock;
//     a plain lock has its lock_id, a parameterized one its parameters
//     ([{"name": "tenant_id", "type": "int64"}]) and no lock_id;
//   - the table pgadvisory.registry (lock_id bigint PRIMARY KEY, name,
//     params jsonb, declared_params jsonb, doc, registered_at): the name of
//     every known lock ID, plain locks and registered instances of
//     parameterized ones (params {"tenant_id": "42"}); it starts with
//     lockgen.migrate, the lock Migrate holds;
//   - the function pgadvisory.register_instance(name text, VARIADIC params
//     text[]) returning bigint: registers one instance of a declared
//     parameterized lock, canonicalizing the parameters by their declared
//     types, and returns its ID;
//   - the view pgadvisory.status: every advisory lock (bigint key) held or
//     awaited in the current database, from pg_locks and pg_stat_activity,
//     with lock_id, name (NULL when the ID is not registered), params,
//     declared_params, mode, granted, waiting, pid, application_name,
//     client_addr, xact_start, xact_age, state, wait_event and blocked_by
//     (pg_blocking_pids). pg_locks does not tell session-level from
//     transaction-level holds.
//
// pgadvisory.Register and pgadvisory.RegisterInstance fill the registry from
// Go, lockgen register from a locks.yaml, lockgen status reads the view.
// Down drops 00003's objects.
//
// 00004_run_once_finish.sql adds the deferred constraint trigger
// run_once_finish on pgadvisory.run_once and its function
// pgadvisory.run_once_finish() (SECURITY DEFINER): a new row's finished_at
// is set when its transaction commits. pgadvisory.RunOnce claims a window
// before fn runs, so the row cannot know the end of the run when it is
// written. Down drops both.
//
// lockgen records them in its own goose version table,
// public.pgadvisory_db_version (pgadvisory.MigrationTable), never in the
// application's goose_db_version. The table lives outside the pgadvisory
// schema so that it exists before the first migration and survives Down.
//
// Apply them with pgadvisory.Migrate, with a goose Provider on [FS], or with
// the goose CLI from a checkout of the module:
//
//	goose -table public.pgadvisory_db_version -dir migrations postgres "$DATABASE_URL" up
package migrations

import "embed"

// FS holds the migration files, named NNNNN_description.sql with goose's
// -- +goose Up / Down annotations, at the root of the file system.
//
//go:embed *.sql
var FS embed.FS
