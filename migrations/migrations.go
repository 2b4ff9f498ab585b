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
// The triggers raise SQLSTATE LF001 for a stale token, LF002 for a missing
// token in strict mode and LF003 for a TRUNCATE of a table fenced by a
// parameterized lock; their messages start with "pgadvisory: ". Down drops
// 00002's objects, and fails while a table still uses the trigger
// functions.
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
// 00005_fencing_acquire.sql adds the fenced acquisition that
// pgadvisory.WithFencing runs on the lock's own connection, in one message:
//
//	BEGIN ISOLATION LEVEL READ COMMITTED;
//	SELECT granted, standby, token FROM pgadvisory.fence_acquire(ids, wait, lock_timeout, publish_timeout);
//	COMMIT AND CHAIN;
//	SELECT pgadvisory.fence_handover();
//
// Its objects:
//
//   - pgadvisory.fence_acquire(bigint[], boolean, text, text), SECURITY
//     DEFINER: takes session-level advisory locks on the IDs, draws a token,
//     publishes it (55P03 after the publish timeout while writers of the
//     previous token are in flight; LF004 when a newer token is published,
//     i.e. the sequence went backwards), forces synchronous_commit = on for
//     its transaction, and leaves the hand-over pending in the session
//     setting pgadvisory.pending; on any error it releases its session
//     locks;
//   - pgadvisory.fence_handover(): in the chained transaction, takes the
//     locks at transaction level, drops the session-level ones, and sets
//     the transaction-local settings pgadvisory.fencing_token and
//     pgadvisory.granted;
//   - 00002's fence_require_current becomes SECURITY DEFINER, so writers
//     need no privilege on pgadvisory.fence.
//
// 00006_fencing_statement_check.sql adds the trigger functions of the
// layout lockgen fence writes, in which a write's token is only its
// transaction's setting pgadvisory.fencing_token and the row's
// fencing_token column is a stamp: pgadvisory.fence_stamp() (BEFORE INSERT
// OR UPDATE row trigger that re-stamps rows whose stamp is not the token)
// and pgadvisory.fence_check_statement() (AFTER INSERT, UPDATE and DELETE
// statement triggers with the transition tables fence_new and fence_old:
// one check per statement and distinct lock, on the rows as written). It
// replaces 00002's fence_check, fence_check_param and fence_truncate_guard
// so that tables fenced before read the token the same way. Down restores
// 00002's functions.
//
// 00007_leader.sql adds leader election (pgadvisory.Lead):
//
//   - the table pgadvisory.leader (lock_id bigint PRIMARY KEY, holder, term,
//     pid, elected_at): the last leader elected for each lock;
//   - pgadvisory.leader_elect(lock_id bigint, holder text, publish_timeout
//     text) returning (term, elected_at), SECURITY DEFINER: for a caller
//     that holds the advisory lock lock_id at session level in exclusive
//     mode (else SQLSTATE 55000), draws a term from
//     pgadvisory.fencing_token_seq, publishes it in pgadvisory.fence as a
//     fenced acquisition does (55P03, LF004), records the leader and forces
//     synchronous_commit = on for its transaction;
//   - pgadvisory.current_leader(lock_id bigint) returning SETOF
//     pgadvisory.leader, SECURITY DEFINER: the leader row only while its
//     backend is alive, is the same backend (that pid, started before
//     elected_at: a reused pid starts later), holds the lock in exclusive
//     mode, and its term is the published token;
//   - the view pgadvisory.status gains the columns leader_holder,
//     leader_term and leader_since, set on the row of a backend that leads
//     its lock now.
//
// Down drops them and restores 00003's view.
//
// 00008_security.sql makes sure that no role gains anything through
// lockgen's schema (the file's header lists each change and the functions
// it redefines):
//
//   - every function of pgadvisory pins search_path = pg_catalog, pg_temp;
//   - PUBLIC may execute only lock_id, valid_lock_name, register_instance,
//     fence_acquire, fence_handover, leader_elect and current_leader;
//   - the table pgadvisory.fenced_table lists the fenced tables, with their
//     lock, policy and parameter columns; pgadvisory.fence_register(regclass,
//     lock text, policy text, columns text[]) and fence_unregister(regclass)
//     (owner only) write it, and the trigger functions that run as their
//     owner (fence_check_statement, fence_check, fence_check_param,
//     fence_truncate_guard) refuse other tables (42501) and columns of
//     other types (42804); the migration lists the tables already fenced;
//     a plain lock's fence row carries a copy of its listing
//     (pgadvisory.fence gains fenced_strict and fenced_permissive
//     regclass[], as fenced_table.relid is regclass, so that a logical
//     dump and restore keeps the listing; kept in step by the trigger fenced_table_sync on fenced_table), so
//     that fence_check_statement checks it in the row it reads FOR SHARE
//     anyway; a lock whose table is listed has a fence row from then on,
//     with token and published_at NULL until it publishes;
//   - fence_acquire refuses a transaction that already wrote (25001) instead
//     of firing its deferred triggers, releases only the locks it took, and
//     it and leader_elect force synchronous_commit = on unless it is on or
//     remote_apply;
//   - LF001 and LF004 name no published token; a NULL parameter of a row
//     of a parameterized lock raises LF005;
//   - pgadvisory.fence_advance(step bigint DEFAULT 2^40) (owner only), run
//     after restoring a copy of the database, moves the token sequence step
//     past every token the copy shows, so that no token issued after the
//     copy was taken is handed out again.
//
// Down restores 00007's functions and privileges, drops the new objects,
// and deletes the fence rows of locks that never published.
//
// 00009_lease.sql adds leases (pgadvisory.WithLease): a leadership held by
// a row with an expiry on the database's clock, so that it needs no session
// of its own and works through any pooler:
//
//   - the table pgadvisory.lease (lock_id, holder, owner_secret (the SHA-256
//     digest of the holder's secret), term, since, expires_at), readable by
//     its owner only;
//   - pgadvisory.lease_acquire(lock_id bigint, holder text, owner_secret
//     uuid, ttl interval, publish_timeout text) returns the term of a lease
//     it took (vacant or expired, and no session holding the lock), NULL
//     otherwise; the term is published as the lock's fencing token by
//     leader_elect (durable; writers of the previous token ordered before);
//   - pgadvisory.lease_renew(lock_ids bigint[], owner_secret uuid, ttl
//     interval) renews in one statement the owner's unexpired leases whose
//     term is still the published token and returns their IDs;
//   - pgadvisory.lease_release(lock_id bigint, owner_secret uuid) vacates one;
//   - pgadvisory.lease_expires(lock_id bigint, term bigint) returns when the
//     lease held with that term expires (CurrentLeader's Expires);
//   - pgadvisory.leader_resign(lock_id bigint, term bigint) ends a
//     session-lock leadership: it releases the lock, then records the
//     caller's own resigned term in the table pgadvisory.leader_resigned
//     (lock_id, term), which current_leader and the status view (redefined)
//     read so that they never name a resigned leader.
//
// The functions are SECURITY DEFINER and executable by PUBLIC. Down drops
// them and the tables and restores 00008's status view and 00007's
// current_leader.
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
