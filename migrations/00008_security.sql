-- lockgen security: no role gains anything through lockgen's schema.
--
-- PostgreSQL's rules for SECURITY DEFINER functions ("Writing SECURITY
-- DEFINER Functions Safely" in the CREATE FUNCTION page) and for code that
-- other roles' statements run, applied to every function of pgadvisory:
--
--   * Every function pins its search_path to pg_catalog, pg_temp (pg_temp
--     last; it is never searched for functions or operators), SECURITY
--     DEFINER or not, so that nothing resolves through a schema the caller
--     can write. Names of lockgen's objects are schema-qualified.
--   * A SECURITY DEFINER body never evaluates code a caller chose: it fires
--     no pending trigger of the caller (fence_acquire, which runs SET
--     CONSTRAINTS ALL IMMEDIATE, refuses a transaction that has written
--     anything, so nothing of the caller's is pending), and it casts or
--     compares no value of a type the caller chose. The trigger functions
--     that run as their owner read row values only from a table listed in
--     pgadvisory.fenced_table, and only columns whose types are built in
--     and whose text form no session setting changes (fencing_token bigint;
--     parameter columns smallint, integer, bigint, text, varchar, uuid or
--     boolean), checked when the trigger fires (ALTER TABLE can change a
--     column's type after registration).
--   * Every cast in every function body and view names its type with its
--     schema (x::pg_catalog.int8, ::pg_catalog.text), the search_path
--     pinned or not.
--   * Every operator in every function body is written
--     OPERATOR(pg_catalog.op), the search_path pinned or not; IN lists are
--     OPERATOR(pg_catalog.=) ANY (ARRAY[...]) and CASE is searched (CASE
--     WHEN ...). Only IS [NOT] DISTINCT FROM, which has no qualified
--     spelling, resolves "=" by name, through the pinned search_path, on
--     built-in types.
--   * Which tables are fenced, with which lock, policy and parameter
--     columns, is pgadvisory.fenced_table, written only through
--     fence_register and fence_unregister (EXECUTE only for the owner and
--     the roles it grants it to). A trigger function that runs as its
--     owner refuses (42501) to run on a table that is not listed with the
--     trigger's arguments, whoever owns the table: a trigger some other
--     role attaches to a table of its own does nothing with the owner's
--     rights. The tables that already carry lockgen's fence triggers are
--     listed by this migration (review them: SELECT * FROM
--     pgadvisory.fenced_table); a fence migration lockgen fence wrote
--     before fence_register existed, applied later to a new database, needs
--     SELECT pgadvisory.fence_register(...) after it (docs/fencing.md).
--   * EXECUTE is revoked from PUBLIC on every function except those an
--     application calls: lock_id, valid_lock_name, register_instance,
--     fence_acquire, fence_handover, leader_elect and current_leader. The
--     trigger functions need no EXECUTE to fire (PostgreSQL checks it when
--     CREATE TRIGGER names the function), so existing triggers keep
--     working; a role that creates fence triggers (the role running the
--     application's fencing migrations) needs EXECUTE on them and on
--     fence_register, granted by the owner.
--   * No token reaches anyone but its holder: LF001 no longer names the
--     lock's current token nor a row's stamp (which may be the current
--     token), and LF004 no longer names published tokens (its
--     hint reads them in the statement it suggests). fence_require_current
--     (the per-lock check, which keeps a fence row FOR SHARE) is no longer
--     PUBLIC: a role that writes no fenced table cannot hold a fence row and
--     delay or fail a publish.
--   * A NULL parameter in a row written or removed under a parameterized
--     lock raises LF005 (it used to skip old rows: a DELETE of rows with a
--     NULL parameter passed with any token). fence_register refuses
--     nullable parameter columns.
--   * fence_acquire releases only the session locks it took (it unlocked
--     every requested ID the backend held, including the caller's own), and
--     fence_acquire and leader_elect make their commit wait for synchronous
--     standbys whatever synchronous_commit says (local and remote_write did
--     not, so a failover could lose a published token).
--
-- Functions this migration redefines (CREATE OR REPLACE; Down restores the
-- previous versions): fence_require_current, fence_check, fence_check_param,
-- fence_truncate_guard, fence_stamp, fence_check_statement, fence_acquire,
-- leader_elect, run_once_finish, and lock_id, valid_lock_name,
-- register_instance and fence_handover (their search_path pinned, their
-- operators qualified; current_leader's search_path was pinned by 00007)
-- and the view status (its operators qualified),
-- and adds fenced_table (with the trigger fenced_table_sync, which keeps a
-- copy of each plain lock's listing in its fence row: pgadvisory.fence gains
-- fenced_strict and fenced_permissive, and token and published_at may be
-- NULL, in the row of a lock whose table is listed but that never
-- published), fence_table_verify, fence_register, fence_unregister and fence_advance
-- (after restoring a copy of the database: moves the token sequence past
-- every token the copy could have handed out).
--
-- Errors (messages start with "pgadvisory: "): LF005 NULL parameter of a
-- parameterized lock; 42501 a trigger function on a table that is not
-- listed in pgadvisory.fenced_table with its arguments; 42804 a listed
-- table whose fencing_token or parameter column has a type lockgen does not
-- read as its owner; 25001 fence_acquire in a transaction that already
-- wrote.
--
-- Written for PostgreSQL 13 and later.

-- +goose Up
-- relid and the fence rows' copies are regclass, not oid: a logical dump
-- (pg_dump) writes them as the tables' qualified names, which the restore
-- reads back as the tables' new OIDs; an oid would point at nothing, or at
-- another table that took the old OID. The check casts them to oid, a
-- binary cast that costs nothing.
CREATE TABLE pgadvisory.fenced_table (
    relid         regclass PRIMARY KEY,
    lock          text NOT NULL,
    policy        text NOT NULL CHECK (policy OPERATOR(pg_catalog.=) ANY (ARRAY['strict', 'permissive'])),
    columns       text[] NOT NULL DEFAULT '{}'::pg_catalog.text[],
    registered_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);

COMMENT ON TABLE pgadvisory.fenced_table IS
'lockgen fencing: the tables fenced by a lock, written by pgadvisory.fence_register and '
'fence_unregister (owner only). relid is the table (regclass, so that a logical dump and restore '
'keeps the listing); lock, policy and columns are the arguments '
'its fence triggers must carry (lock: the ID of a plain lock, the name of a parameterized one; '
'columns: the parameter columns in declaration order). The fence trigger functions that run as '
'their owner refuse a table not listed here with their arguments.';

-- The fence row of a plain lock lists the lock's tables too (fenced_strict,
-- fenced_permissive: one per policy, so that the check compares OIDs and
-- builds nothing), so that fence_check_statement, which reads that row FOR
-- SHARE in every fenced write, finds the listing in the same index probe
-- instead of a query of its own. The columns are derived: fenced_table_sync
-- keeps them equal to what fenced_table lists, whoever writes fenced_table.
-- A lock whose table is listed has a fence row from then on, with token
-- NULL until the lock publishes one.
ALTER TABLE pgadvisory.fence
    ALTER COLUMN token DROP NOT NULL,
    ALTER COLUMN published_at DROP NOT NULL,
    ADD COLUMN fenced_strict regclass[] NOT NULL DEFAULT '{}'::pg_catalog.regclass[],
    ADD COLUMN fenced_permissive regclass[] NOT NULL DEFAULT '{}'::pg_catalog.regclass[];

COMMENT ON TABLE pgadvisory.fence IS
'lockgen fencing: the published (current) token per advisory-lock ID. A holder publishes with '
'INSERT .. ON CONFLICT (lock_id) DO UPDATE .. WHERE fence.token IS NULL OR fence.token < '
'excluded.token; the fence triggers accept only writes carrying this token and read the row FOR '
'SHARE, so a publish waits for writes still in flight with the previous token. token and '
'published_at are NULL while the lock never published (its row was made when a table was listed '
'as fenced by it). fenced_strict, fenced_permissive: the tables pgadvisory.fenced_table lists '
'with this plain lock''s ID and that policy, kept in step by the trigger fenced_table_sync on '
'fenced_table.';

-- +goose StatementBegin
CREATE FUNCTION pgadvisory.fenced_table_sync()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
-- Runs as the writer of pgadvisory.fenced_table (fence_register and
-- fence_unregister run as the owner of lockgen's schema). For the plain
-- locks of the row written (old and new), pgadvisory.fence.fenced_strict
-- and fenced_permissive are listed again from fenced_table: the lock's fence row is locked first, so
-- that writes of one lock's listing take turns and each reads (a statement
-- of its own, so a snapshot of its own) what the previous one committed. A
-- membership never outlives its listing.
DECLARE
    v_locks text[] := '{}'::pg_catalog.text[];
    v_lock  text;
    v_id    bigint;
BEGIN
    IF TG_OP OPERATOR(pg_catalog.=) 'TRUNCATE' THEN
        UPDATE pgadvisory.fence AS f SET fenced_strict = '{}'::pg_catalog.regclass[], fenced_permissive = '{}'::pg_catalog.regclass[]
        WHERE pg_catalog.cardinality(f.fenced_strict) OPERATOR(pg_catalog.<>) 0
           OR pg_catalog.cardinality(f.fenced_permissive) OPERATOR(pg_catalog.<>) 0;
        RETURN NULL;
    END IF;
    IF TG_OP OPERATOR(pg_catalog.<>) 'INSERT' AND OLD.columns OPERATOR(pg_catalog.=) '{}'::pg_catalog.text[] THEN
        v_locks := pg_catalog.array_append(v_locks, OLD.lock);
    END IF;
    IF TG_OP OPERATOR(pg_catalog.<>) 'DELETE' AND NEW.columns OPERATOR(pg_catalog.=) '{}'::pg_catalog.text[] THEN
        v_locks := pg_catalog.array_append(v_locks, NEW.lock);
    END IF;
    FOREACH v_lock IN ARRAY v_locks LOOP
        -- A plain lock is listed by its ID; anything else has no fence row.
        CONTINUE WHEN v_lock OPERATOR(pg_catalog.!~) '^-?[0-9]{1,19}$';
        CONTINUE WHEN v_lock::pg_catalog.numeric OPERATOR(pg_catalog.<) '-9223372036854775808'::pg_catalog.numeric
            OR v_lock::pg_catalog.numeric OPERATOR(pg_catalog.>) '9223372036854775807'::pg_catalog.numeric;
        v_id := v_lock::pg_catalog.int8;
        IF TG_OP OPERATOR(pg_catalog.<>) 'DELETE' AND v_lock OPERATOR(pg_catalog.=) NEW.lock THEN
            INSERT INTO pgadvisory.fence AS f (lock_id, token, published_at) VALUES (v_id, NULL, NULL)
            ON CONFLICT (lock_id) DO NOTHING;
        END IF;
        PERFORM FROM pgadvisory.fence AS f WHERE f.lock_id OPERATOR(pg_catalog.=) v_id FOR UPDATE;
        UPDATE pgadvisory.fence AS f
        SET fenced_strict = COALESCE(l.strict, '{}'::pg_catalog.regclass[]),
            fenced_permissive = COALESCE(l.permissive, '{}'::pg_catalog.regclass[])
        FROM (SELECT pg_catalog.array_agg(ft.relid ORDER BY ft.relid::pg_catalog.oid) FILTER (WHERE ft.policy OPERATOR(pg_catalog.=) 'strict') AS strict,
                     pg_catalog.array_agg(ft.relid ORDER BY ft.relid::pg_catalog.oid) FILTER (WHERE ft.policy OPERATOR(pg_catalog.=) 'permissive') AS permissive
              FROM pgadvisory.fenced_table AS ft
              WHERE ft.columns OPERATOR(pg_catalog.=) '{}'::pg_catalog.text[]
                AND CASE WHEN ft.lock OPERATOR(pg_catalog.~) '^-?[0-9]{1,19}$'
                         THEN ft.lock::pg_catalog.numeric OPERATOR(pg_catalog.=) v_id::pg_catalog.numeric
                         ELSE false END) AS l
        WHERE f.lock_id OPERATOR(pg_catalog.=) v_id;
    END LOOP;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.fenced_table_sync() IS
'lockgen fencing (internal): trigger on pgadvisory.fenced_table; keeps pgadvisory.fence.fenced_strict '
'and fenced_permissive of each plain lock equal to the tables fenced_table lists with its ID and '
'that policy (made the lock''s fence row, token NULL, when it had none).';

CREATE TRIGGER fenced_table_sync AFTER INSERT OR UPDATE OR DELETE ON pgadvisory.fenced_table
    FOR EACH ROW EXECUTE FUNCTION pgadvisory.fenced_table_sync();
CREATE TRIGGER fenced_table_sync_truncate AFTER TRUNCATE ON pgadvisory.fenced_table
    FOR EACH STATEMENT EXECUTE FUNCTION pgadvisory.fenced_table_sync();

-- The check of the trigger functions that run as their owner.
-- +goose StatementBegin
CREATE FUNCTION pgadvisory.fence_table_verify(p_relid oid, p_fn text, p_args text[], p_rows boolean)
RETURNS void
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
-- Every query here has scalar parameters only, so that PL/pgSQL keeps one
-- cached plan for it (an array parameter made it plan again at every call).
DECLARE
    v_lo    integer := pg_catalog.array_lower(p_args, 1); -- TG_ARGV counts from 0
    v_lock  text := p_args[v_lo];
    v_pol   text := p_args[v_lo OPERATOR(pg_catalog.+) 1];
    v_cols  text[] := COALESCE(p_args[v_lo OPERATOR(pg_catalog.+) 2 :], '{}'); -- a slice counts from 1
    v_ok    boolean;
    v_col   text;
    v_type  pg_catalog.oid;
BEGIN
    -- Listed with these arguments: the table itself, or (a row trigger
    -- cloned to a partition) one of its ancestors.
    SELECT true INTO v_ok
    FROM pgadvisory.fenced_table AS ft
    WHERE ft.relid::pg_catalog.oid OPERATOR(pg_catalog.=) p_relid
      AND ft.lock OPERATOR(pg_catalog.=) v_lock
      AND ft.policy OPERATOR(pg_catalog.=) v_pol
      AND ft.columns OPERATOR(pg_catalog.=) v_cols;
    IF v_ok IS NULL THEN
        SELECT true INTO v_ok
        FROM pg_catalog.pg_partition_ancestors(p_relid) AS a(relid)
        JOIN pgadvisory.fenced_table AS ft ON ft.relid::pg_catalog.oid OPERATOR(pg_catalog.=) a.relid::pg_catalog.oid
        WHERE ft.lock OPERATOR(pg_catalog.=) v_lock
          AND ft.policy OPERATOR(pg_catalog.=) v_pol
          AND ft.columns OPERATOR(pg_catalog.=) v_cols
        LIMIT 1;
    END IF;
    -- Not listed: refused, whoever owns the table. A fence migration that
    -- lockgen fence wrote before fenced_table existed, applied to a
    -- database that has this migration, lists nothing: its table is
    -- listed by pgadvisory.fence_register (or lockgen fence run again).
    IF v_ok IS NULL THEN
        RAISE EXCEPTION 'pgadvisory: % on % refused: the table is not listed in pgadvisory.fenced_table with the trigger''s arguments (%, %, %): list it with pgadvisory.fence_register, or run lockgen fence for it again and apply the migration it writes',
            p_fn, p_relid::pg_catalog.regclass, v_lock, v_pol, v_cols
            USING ERRCODE = '42501',
                  HINT = pg_catalog.format('List it, as the owner of lockgen''s schema or a role it granted EXECUTE on pgadvisory.fence_register: SELECT pgadvisory.fence_register(%L, %L, %L, %L);',
                      p_relid::pg_catalog.regclass::pg_catalog.text, v_lock, v_pol, v_cols::pg_catalog.text);
    END IF;
    IF NOT p_rows THEN
        RETURN;
    END IF;
    -- The columns this function reads as its owner have built-in types
    -- whose casts and operators no role can replace: fencing_token int8
    -- (OID 20); parameter columns int2, int4, int8, text, varchar, uuid or
    -- bool (OIDs 21, 23, 20, 25, 1043, 2950, 16: fixed in PostgreSQL's
    -- catalog, and written as literals, not parsed from names at every
    -- call). A domain over one of them has its own OID, and is refused.
    SELECT a.atttypid INTO v_type FROM pg_catalog.pg_attribute AS a
    WHERE a.attrelid OPERATOR(pg_catalog.=) p_relid AND a.attname OPERATOR(pg_catalog.=) 'fencing_token'::pg_catalog.name
      AND NOT a.attisdropped;
    v_ok := v_type OPERATOR(pg_catalog.=) 20::pg_catalog.oid;
    FOREACH v_col IN ARRAY v_cols LOOP
        v_type := NULL;
        SELECT a.atttypid INTO v_type FROM pg_catalog.pg_attribute AS a
        WHERE a.attrelid OPERATOR(pg_catalog.=) p_relid AND a.attname OPERATOR(pg_catalog.=) v_col::pg_catalog.name
          AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped;
        v_ok := v_ok AND v_type OPERATOR(pg_catalog.=) ANY ('{21,23,20,25,1043,2950,16}'::pg_catalog.oid[]);
    END LOOP;
    IF NOT COALESCE(v_ok, false) THEN
        RAISE EXCEPTION 'pgadvisory: % on % refused: fencing_token must be bigint and the parameter columns % smallint, integer, bigint, text, varchar, uuid or boolean',
            p_fn, p_relid::pg_catalog.regclass, v_cols
            USING ERRCODE = '42804';
    END IF;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.fence_table_verify(oid, text, text[], boolean) IS
'lockgen fencing (internal): raises 42501 unless the table p_relid (or an ancestor of the '
'partition) is listed in pgadvisory.fenced_table with the trigger arguments p_args, and, with '
'p_rows, 42804 unless its fencing_token is bigint and its parameter columns have one of the types '
'lockgen reads as its owner.';

-- +goose StatementBegin
CREATE FUNCTION pgadvisory.fence_register(p_table regclass, p_lock text, p_policy text, p_columns text[] DEFAULT '{}')
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_col  text;
    v_type pg_catalog.oid;
    v_null boolean;
BEGIN
    IF p_table IS NULL OR p_lock IS NULL OR p_policy IS NULL OR p_columns IS NULL
       OR p_policy OPERATOR(pg_catalog.<>) ALL (ARRAY['strict', 'permissive']) THEN
        RAISE EXCEPTION 'pgadvisory: fence_register needs a table, a lock, the policy ''strict'' or ''permissive'' and the parameter columns (got %, %, %, %)',
            p_table, p_lock, p_policy, p_columns
            USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.cardinality(p_columns) OPERATOR(pg_catalog.=) 0 THEN
        IF p_lock OPERATOR(pg_catalog.!~) '^-?[0-9]{1,19}$' THEN
            RAISE EXCEPTION 'pgadvisory: fence_register: % is fenced by a plain lock, given by its ID; got %', p_table, p_lock
                USING ERRCODE = '22023';
        END IF;
    ELSIF NOT pgadvisory.valid_lock_name(p_lock) THEN
        RAISE EXCEPTION 'pgadvisory: fence_register: % is not a lock name (a parameterized lock is given by its name)', p_lock
            USING ERRCODE = '22023';
    END IF;
    SELECT a.atttypid INTO v_type FROM pg_catalog.pg_attribute AS a
    WHERE a.attrelid OPERATOR(pg_catalog.=) p_table AND a.attname OPERATOR(pg_catalog.=) 'fencing_token' AND NOT a.attisdropped;
    IF v_type IS DISTINCT FROM 'pg_catalog.int8'::pg_catalog.regtype THEN
        RAISE EXCEPTION 'pgadvisory: fence_register: % has no fencing_token bigint column', p_table
            USING ERRCODE = '42804';
    END IF;
    FOREACH v_col IN ARRAY p_columns LOOP
        v_type := NULL;
        SELECT a.atttypid, NOT a.attnotnull INTO v_type, v_null FROM pg_catalog.pg_attribute AS a
        WHERE a.attrelid OPERATOR(pg_catalog.=) p_table AND a.attname::pg_catalog.text OPERATOR(pg_catalog.=) v_col AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped;
        IF v_type IS NULL THEN
            RAISE EXCEPTION 'pgadvisory: fence_register: % has no column %', p_table, v_col
                USING ERRCODE = '42703';
        END IF;
        IF v_type OPERATOR(pg_catalog.<>) ALL (ARRAY['pg_catalog.int2', 'pg_catalog.int4', 'pg_catalog.int8', 'pg_catalog.text',
                'pg_catalog.varchar', 'pg_catalog.uuid', 'pg_catalog.bool']::pg_catalog.regtype[]::pg_catalog.oid[]) THEN
            RAISE EXCEPTION 'pgadvisory: fence_register: column % of % is %: a parameter column must be smallint, integer, bigint, text, varchar, uuid or boolean, whose text no session setting changes',
                v_col, p_table, v_type::pg_catalog.regtype
                USING ERRCODE = '42804';
        END IF;
        IF v_null THEN
            RAISE EXCEPTION 'pgadvisory: fence_register: column % of % allows NULL: a parameter column must be NOT NULL (a row without a parameter belongs to no lock)',
                v_col, p_table
                USING ERRCODE = '23502';
        END IF;
    END LOOP;
    -- Rows of dropped tables go, so that no new table inherits their OID's listing.
    DELETE FROM pgadvisory.fenced_table AS ft
    WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_class AS c WHERE c.oid OPERATOR(pg_catalog.=) ft.relid::pg_catalog.oid);
    INSERT INTO pgadvisory.fenced_table AS ft (relid, lock, policy, columns)
    VALUES (p_table, p_lock, p_policy, p_columns)
    ON CONFLICT (relid) DO UPDATE
    SET lock = excluded.lock, policy = excluded.policy, columns = excluded.columns, registered_at = pg_catalog.now();
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.fence_register(regclass, text, text, text[]) IS
'lockgen fencing: lists p_table in pgadvisory.fenced_table as fenced by p_lock (a plain lock''s '
'ID, or a parameterized lock''s name with its parameter columns p_columns in declaration order) '
'under p_policy. Refuses a table without a fencing_token bigint column and parameter columns '
'that allow NULL or whose type is not smallint, integer, bigint, text, varchar, uuid or boolean. '
'SECURITY DEFINER; EXECUTE only for the owner and the roles it grants it to.';

-- +goose StatementBegin
CREATE FUNCTION pgadvisory.fence_unregister(p_table regclass)
RETURNS void
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DELETE FROM pgadvisory.fenced_table AS ft WHERE ft.relid::pg_catalog.oid OPERATOR(pg_catalog.=) p_table::pg_catalog.oid;
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.fence_unregister(regclass) IS
'lockgen fencing: removes p_table from pgadvisory.fenced_table (its fence triggers then refuse '
'every write). SECURITY DEFINER; EXECUTE only for the owner and the roles it grants it to.';

-- The per-lock check: no current token in the message.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadvisory.fence_require_current(p_lock bigint, p_token bigint, p_name text, p_params text[])
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_cur  bigint;
    v_lock text;
BEGIN
    SELECT f.token INTO v_cur FROM pgadvisory.fence AS f WHERE f.lock_id OPERATOR(pg_catalog.=) p_lock FOR SHARE;
    IF v_cur IS NULL OR p_token IS NULL OR v_cur OPERATOR(pg_catalog.<>) p_token THEN
        IF p_name IS NULL THEN
            v_lock := p_lock::pg_catalog.text;
        ELSE
            v_lock := pg_catalog.format('%s(%s) = %s', p_name, pg_catalog.array_to_string(p_params, ', '), p_lock);
        END IF;
        RAISE EXCEPTION 'pgadvisory: stale fencing token % for lock %: %', p_token, v_lock,
            CASE WHEN v_cur IS NULL THEN 'the lock never published a token' ELSE 'it is not the lock''s current token' END
            USING ERRCODE = 'LF001',
                  HINT = 'Another holder took the lock after this token was issued: stop writing.';
    END IF;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.fence_require_current(bigint, bigint, text, text[]) IS
'lockgen fencing (internal to the fence triggers): raises SQLSTATE LF001 unless p_token is the '
'published token of the lock p_lock in pgadvisory.fence, whose row it locks FOR SHARE until the '
'end of the transaction; the message never names the current token. p_name and p_params (a '
'parameterized lock) only describe the lock in the message. SECURITY DEFINER; EXECUTE only for '
'the owner (the trigger functions call it as their owner).';

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadvisory.fence_stamp()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
-- Runs as the writer: it stamps the row and reads nothing of lockgen's.
DECLARE
    v_policy text   := TG_ARGV[1];
    v_tok    bigint := NULLIF(pg_catalog.current_setting('pgadvisory.fencing_token', true), '')::pg_catalog.int8;
BEGIN
    IF TG_NARGS OPERATOR(pg_catalog.<) 2 OR TG_ARGV[0] IS NULL OR v_policy IS NULL OR v_policy OPERATOR(pg_catalog.<>) ALL (ARRAY['strict', 'permissive']) THEN
        RAISE EXCEPTION 'pgadvisory: fence_stamp on %.% needs the arguments (lock, ''strict'' or ''permissive'', parameter column, ...)',
            TG_TABLE_SCHEMA, TG_TABLE_NAME USING ERRCODE = '22023';
    END IF;
    IF v_tok IS NULL THEN
        IF v_policy OPERATOR(pg_catalog.=) 'strict' THEN
            RAISE EXCEPTION 'pgadvisory: % on %.% carries no fencing token (lock %): take the lock with pgadvisory.WithFencing() (fencing: true in locks.yaml) and write through its transaction, or carry a holder''s token with pgadvisory.RunFenced or SetFencingToken', TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_ARGV[0]
                USING ERRCODE = 'LF002',
                      HINT = 'A write''s token is the transaction-local setting pgadvisory.fencing_token (set_config(''pgadvisory.fencing_token'', token, true)), never the fencing_token column, which is only a stamp.';
        END IF;
    ELSIF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' AND OLD.fencing_token IS NOT NULL AND v_tok OPERATOR(pg_catalog.<) OLD.fencing_token THEN
        -- The row's stamp may be the current token: the message names none.
        RAISE EXCEPTION 'pgadvisory: stale fencing token %: the row of %.% already carries a newer token (lock %)',
            v_tok, TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_ARGV[0]
            USING ERRCODE = 'LF001';
    END IF;
    NEW.fencing_token := v_tok;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadvisory.fence_check_statement()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
-- Runs as its owner, so that it can read the fence rows FOR SHARE (writers
-- need no privilege on pgadvisory.fence); it reads nothing but the
-- statement's transition tables and the fence rows of their locks, and only
-- on a table listed in pgadvisory.fenced_table whose columns it reads have
-- built-in types. This runs in every fenced write: a plain lock's statement
-- that wrote rows and carries a token (the common case) runs two queries,
-- as it did before the listing was checked, and as few plain PL/pgSQL
-- expressions: the listing is read in the lock's fence row that step 3
-- reads anyway (fenced_strict, fenced_permissive: fenced_table's copy),
-- and fencing_token's type from NEW. Every other path asks
-- fence_table_verify (fenced_table itself; it also says what is wrong)
-- before it reads a parameter column, returns or raises anything else.
DECLARE
    v_lock   text   := TG_ARGV[0];
    v_policy text   := TG_ARGV[1];
    v_tok    bigint := NULLIF(pg_catalog.current_setting('pgadvisory.fencing_token', true), '')::pg_catalog.int8;
    v_rows   boolean;
    v_bad    boolean;
    v_listed boolean; -- NULL until fence_table_verify passed
    v_cur    bigint;
    v_id     bigint;
    v_cols   text;
    v_params text[];
    v_sql    text;
BEGIN
    IF TG_NARGS OPERATOR(pg_catalog.<) 2 OR v_lock IS NULL OR v_policy IS NULL OR v_policy OPERATOR(pg_catalog.<>) ALL (ARRAY['strict', 'permissive'])
       OR TG_LEVEL OPERATOR(pg_catalog.<>) 'STATEMENT' OR TG_WHEN OPERATOR(pg_catalog.<>) 'AFTER' THEN
        RAISE EXCEPTION 'pgadvisory: fence_check_statement on %.% is an AFTER ... FOR EACH STATEMENT trigger with the arguments (lock, ''strict'' or ''permissive'', parameter column, ...)',
            TG_TABLE_SCHEMA, TG_TABLE_NAME USING ERRCODE = '22023';
    END IF;
    -- 1. A statement that wrote no row changed nothing. Otherwise the rows
    --    as written must carry the transaction's token as their stamp (a
    --    trigger that ran after lockgen's row trigger could change it). No
    --    value of the written rows is read unless their fencing_token is
    --    bigint: NEW, unset in a statement trigger but typed as the table's
    --    row, gives the column's type without a query (pg_typeof reads the
    --    type, never a value). A DELETE reads no value of fence_old before
    --    step 3, where a parameterized lock's table is verified first.
    IF TG_OP OPERATOR(pg_catalog.=) 'DELETE' THEN
        SELECT EXISTS (SELECT FROM fence_old) INTO v_rows;
    ELSE
        IF pg_catalog.pg_typeof(NEW.fencing_token)::pg_catalog.oid OPERATOR(pg_catalog.<>) 20::pg_catalog.oid THEN
            PERFORM pgadvisory.fence_table_verify(TG_RELID, 'fence_check_statement', TG_ARGV, true);
            v_listed := true;
        END IF;
        SELECT true, n.fencing_token IS DISTINCT FROM v_tok INTO v_rows, v_bad
        FROM fence_new AS n ORDER BY 2 DESC LIMIT 1;
    END IF;
    IF NOT COALESCE(v_rows, false) THEN
        IF v_listed IS NOT TRUE THEN
            PERFORM pgadvisory.fence_table_verify(TG_RELID, 'fence_check_statement', TG_ARGV, true);
        END IF;
        RETURN NULL;
    END IF;
    -- 2. No token: strict refuses; permissive lets the rows pass, stamped
    --    NULL. A row whose stamp is not the token: refused.
    IF v_tok IS NULL OR v_bad THEN
        IF v_listed IS NOT TRUE THEN
            PERFORM pgadvisory.fence_table_verify(TG_RELID, 'fence_check_statement', TG_ARGV, true);
        END IF;
        IF v_tok IS NULL AND v_policy OPERATOR(pg_catalog.=) 'strict' THEN
            RAISE EXCEPTION 'pgadvisory: % on %.% carries no fencing token (lock %): take the lock with pgadvisory.WithFencing() (fencing: true in locks.yaml) and write through its transaction, or carry a holder''s token with pgadvisory.RunFenced or SetFencingToken', TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME, v_lock
                USING ERRCODE = 'LF002',
                      HINT = 'A write''s token is the transaction-local setting pgadvisory.fencing_token (set_config(''pgadvisory.fencing_token'', token, true)), never the fencing_token column, which is only a stamp.';
        END IF;
        IF v_bad THEN
            RAISE EXCEPTION 'pgadvisory: % on %.% wrote a row whose fencing_token is not the write''s token: a trigger that runs after zz_pgadvisory_fence changed fencing_token (lock %)',
                TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME, v_lock
                USING ERRCODE = 'LF001';
        END IF;
        RETURN NULL;
    END IF;
    -- 3. Once per distinct lock of the rows: the token must be the lock's
    --    published token, whose fence row stays locked FOR SHARE to the end
    --    of the transaction (the next holder's publish waits for this write).
    --    A plain lock's fence row is read, and locked, only if it lists this
    --    table under this trigger's policy (fenced_strict, fenced_permissive:
    --    fenced_table's copy). Else (a token that is not the published one,
    --    a table listed but not in the copy: a partition through its
    --    parent) fence_table_verify decides first, then fence_require_current
    --    reads and locks the row, and refuses a token that is not current.
    IF TG_NARGS OPERATOR(pg_catalog.=) 2 THEN
        v_id := v_lock::pg_catalog.int8;
        SELECT f.token INTO v_cur FROM pgadvisory.fence AS f
        WHERE f.lock_id OPERATOR(pg_catalog.=) v_id
          AND TG_RELID OPERATOR(pg_catalog.=) ANY (CASE WHEN v_policy OPERATOR(pg_catalog.=) 'strict' THEN f.fenced_strict::pg_catalog.oid[] ELSE f.fenced_permissive::pg_catalog.oid[] END)
        FOR SHARE;
        IF v_cur IS NULL OR v_cur OPERATOR(pg_catalog.<>) v_tok THEN
            IF v_listed IS NOT TRUE THEN
                PERFORM pgadvisory.fence_table_verify(TG_RELID, 'fence_check_statement', TG_ARGV, true);
            END IF;
            PERFORM pgadvisory.fence_require_current(v_id, v_tok, NULL, NULL);
        END IF;
        RETURN NULL;
    END IF;
    IF v_listed IS NOT TRUE THEN
        PERFORM pgadvisory.fence_table_verify(TG_RELID, 'fence_check_statement', TG_ARGV, true);
    END IF;
    SELECT pg_catalog.string_agg(pg_catalog.format('%I::pg_catalog.text', c), ', ') INTO v_cols
    FROM pg_catalog.unnest(TG_ARGV[2:TG_NARGS OPERATOR(pg_catalog.-) 1]) AS c;
    -- The parameter tuples of the written rows, new and old: a row that
    -- moves to another lock (UPDATE) or goes (DELETE) needs its lock's
    -- token too. A NULL parameter in any of them is LF005: such a row
    -- belongs to no lock, and no token may speak for it.
    v_sql := CASE
        WHEN TG_OP OPERATOR(pg_catalog.=) 'INSERT' THEN pg_catalog.format('SELECT ARRAY[%s] FROM fence_new', v_cols)
        WHEN TG_OP OPERATOR(pg_catalog.=) 'DELETE' THEN pg_catalog.format('SELECT ARRAY[%s] FROM fence_old', v_cols)
        ELSE pg_catalog.format('SELECT ARRAY[%1$s] FROM fence_new UNION SELECT ARRAY[%1$s] FROM fence_old', v_cols)
    END;
    v_sql := 'SELECT DISTINCT r.ps FROM (' OPERATOR(pg_catalog.||) v_sql OPERATOR(pg_catalog.||) ') AS r(ps) ORDER BY r.ps';
    FOR v_params IN EXECUTE v_sql LOOP
        IF pg_catalog.array_position(v_params, NULL) IS NOT NULL THEN
            RAISE EXCEPTION 'pgadvisory: % on %.%: column % is NULL in a row written or removed, but it is parameter % of lock %',
                TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_ARGV[1 OPERATOR(pg_catalog.+) pg_catalog.array_position(v_params, NULL)],
                pg_catalog.array_position(v_params, NULL), v_lock
                USING ERRCODE = 'LF005',
                      HINT = 'A parameter column of a fenced table must be NOT NULL.';
        END IF;
        PERFORM pgadvisory.fence_require_current(pgadvisory.lock_id(v_lock, VARIADIC v_params), v_tok, v_lock, v_params);
    END LOOP;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.fence_check_statement() IS
'lockgen fencing statement trigger: AFTER INSERT (REFERENCING NEW TABLE AS fence_new), AFTER '
'UPDATE (OLD TABLE AS fence_old NEW TABLE AS fence_new) and AFTER DELETE (OLD TABLE AS '
'fence_old) FOR EACH STATEMENT EXECUTE FUNCTION pgadvisory.fence_check_statement(<lock ID or '
'name>, ''strict''|''permissive''[, <parameter column>, ...]) on a table listed in '
'pgadvisory.fenced_table with these arguments (else 42501). For a statement that wrote rows: '
'no token raises LF002 (strict) or passes (permissive); a row whose stamp is not the token '
'raises LF001; each distinct lock of the new and old rows needs the token published, else LF001. '
'A NULL parameter in a new or old row raises LF005. SECURITY DEFINER: writers need no privilege '
'on pgadvisory.fence.';

-- The first layout's row triggers run as their owner too (the per-lock
-- check is no longer PUBLIC), on listed tables only, and read the parameter
-- columns one by one (to_jsonb(NEW) converted every column, whatever its
-- type, as the owner).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadvisory.fence_check()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_lock   bigint;
    v_policy text   := TG_ARGV[1];
    v_tok    bigint := NULLIF(pg_catalog.current_setting('pgadvisory.fencing_token', true), '')::pg_catalog.int8;
BEGIN
    IF TG_NARGS OPERATOR(pg_catalog.<>) 2 OR TG_ARGV[0] IS NULL OR v_policy IS NULL OR v_policy OPERATOR(pg_catalog.<>) ALL (ARRAY['strict', 'permissive'])
       OR TG_LEVEL OPERATOR(pg_catalog.<>) 'ROW' THEN
        RAISE EXCEPTION 'pgadvisory: fence_check on %.% needs the arguments (lock ID, ''strict'' or ''permissive'')',
            TG_TABLE_SCHEMA, TG_TABLE_NAME USING ERRCODE = '22023';
    END IF;
    PERFORM pgadvisory.fence_table_verify(TG_RELID, 'fence_check', TG_ARGV, true);
    v_lock := TG_ARGV[0]::pg_catalog.int8;
    IF v_tok IS NULL THEN
        IF v_policy OPERATOR(pg_catalog.=) 'permissive' THEN
            IF TG_OP OPERATOR(pg_catalog.=) 'DELETE' THEN RETURN OLD; END IF;
            NEW.fencing_token := NULL;
            RETURN NEW;
        END IF;
        RAISE EXCEPTION 'pgadvisory: % on %.% carries no fencing token (lock %): take the lock with pgadvisory.WithFencing() (fencing: true in locks.yaml) and write through its transaction, or carry a holder''s token with pgadvisory.RunFenced or SetFencingToken', TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME, v_lock
            USING ERRCODE = 'LF002',
                  HINT = 'A write''s token is the transaction-local setting pgadvisory.fencing_token (set_config(''pgadvisory.fencing_token'', token, true)), never the fencing_token column, which is only a stamp.';
    END IF;
    IF TG_OP OPERATOR(pg_catalog.<>) 'INSERT' AND OLD.fencing_token IS NOT NULL AND v_tok OPERATOR(pg_catalog.<) OLD.fencing_token THEN
        RAISE EXCEPTION 'pgadvisory: stale fencing token %: the row of %.% already carries a newer token (lock %)',
            v_tok, TG_TABLE_SCHEMA, TG_TABLE_NAME, v_lock
            USING ERRCODE = 'LF001';
    END IF;
    PERFORM pgadvisory.fence_require_current(v_lock, v_tok, NULL, NULL);
    IF TG_OP OPERATOR(pg_catalog.=) 'DELETE' THEN RETURN OLD; END IF;
    NEW.fencing_token := v_tok;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.fence_check() IS
'lockgen fencing row trigger of the first layout (00002) for a plain lock: BEFORE INSERT OR '
'UPDATE OR DELETE FOR EACH ROW EXECUTE FUNCTION pgadvisory.fence_check(''<lock ID>'', '
'''strict''|''permissive'') on a table listed in pgadvisory.fenced_table (else 42501). The '
'write''s token is the transaction-local setting pgadvisory.fencing_token. No token: permissive '
'passes the write (stamped NULL), strict raises LF002. A token older than OLD.fencing_token, or '
'not the lock''s published token, raises LF001. Superseded by fence_stamp and '
'fence_check_statement (lockgen fence -upgrade). SECURITY DEFINER.';

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadvisory.fence_check_param()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_name   text := TG_ARGV[0];
    v_policy text := TG_ARGV[1];
    v_tok    bigint := NULLIF(pg_catalog.current_setting('pgadvisory.fencing_token', true), '')::pg_catalog.int8;
    v_params text[];
    v_oldps  text[];
    v_col    text;
    v_val    text;
BEGIN
    IF TG_NARGS OPERATOR(pg_catalog.<) 3 OR v_name IS NULL OR v_policy IS NULL OR v_policy OPERATOR(pg_catalog.<>) ALL (ARRAY['strict', 'permissive'])
       OR TG_LEVEL OPERATOR(pg_catalog.<>) 'ROW' THEN
        RAISE EXCEPTION 'pgadvisory: fence_check_param on %.% needs the arguments (lock name, ''strict'' or ''permissive'', parameter column, ...)',
            TG_TABLE_SCHEMA, TG_TABLE_NAME USING ERRCODE = '22023';
    END IF;
    PERFORM pgadvisory.fence_table_verify(TG_RELID, 'fence_check_param', TG_ARGV, true);
    IF v_tok IS NULL THEN
        IF v_policy OPERATOR(pg_catalog.=) 'permissive' THEN
            IF TG_OP OPERATOR(pg_catalog.=) 'DELETE' THEN RETURN OLD; END IF;
            NEW.fencing_token := NULL;
            RETURN NEW;
        END IF;
        RAISE EXCEPTION 'pgadvisory: % on %.% carries no fencing token (lock %): take the lock with pgadvisory.WithFencing() (fencing: true in locks.yaml) and write through its transaction, or carry a holder''s token with pgadvisory.RunFenced or SetFencingToken', TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME, v_name
            USING ERRCODE = 'LF002',
                  HINT = 'A write''s token is the transaction-local setting pgadvisory.fencing_token (set_config(''pgadvisory.fencing_token'', token, true)), never the fencing_token column, which is only a stamp.';
    END IF;
    IF TG_OP OPERATOR(pg_catalog.<>) 'INSERT' AND OLD.fencing_token IS NOT NULL AND v_tok OPERATOR(pg_catalog.<) OLD.fencing_token THEN
        RAISE EXCEPTION 'pgadvisory: stale fencing token %: the row of %.% already carries a newer token (lock %)',
            v_tok, TG_TABLE_SCHEMA, TG_TABLE_NAME, v_name
            USING ERRCODE = 'LF001';
    END IF;
    -- The row's lock (the old row for DELETE; an UPDATE needs the old row's
    -- lock too), from the parameter columns' text, read one by one.
    v_params := pg_catalog.array_fill(NULL::pg_catalog.text, ARRAY[TG_NARGS OPERATOR(pg_catalog.-) 2]);
    v_oldps := v_params;
    FOR i IN 2 .. TG_NARGS OPERATOR(pg_catalog.-) 1 LOOP
        v_col := TG_ARGV[i];
        IF TG_OP OPERATOR(pg_catalog.<>) 'DELETE' THEN
            EXECUTE pg_catalog.format('SELECT ($1).%I::pg_catalog.text', v_col) INTO v_val USING NEW;
            v_params[i OPERATOR(pg_catalog.-) 1] := v_val;
        END IF;
        IF TG_OP OPERATOR(pg_catalog.<>) 'INSERT' THEN
            EXECUTE pg_catalog.format('SELECT ($1).%I::pg_catalog.text', v_col) INTO v_val USING OLD;
            v_oldps[i OPERATOR(pg_catalog.-) 1] := v_val;
        END IF;
    END LOOP;
    IF TG_OP OPERATOR(pg_catalog.=) 'DELETE' THEN
        v_params := v_oldps;
    END IF;
    IF pg_catalog.array_position(v_params, NULL) IS NOT NULL
       OR (TG_OP OPERATOR(pg_catalog.=) 'UPDATE' AND pg_catalog.array_position(v_oldps, NULL) IS NOT NULL) THEN
        RAISE EXCEPTION 'pgadvisory: % on %.%: a parameter column of lock % is NULL in the row',
            TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME, v_name
            USING ERRCODE = 'LF005',
                  HINT = 'A parameter column of a fenced table must be NOT NULL.';
    END IF;
    PERFORM pgadvisory.fence_require_current(pgadvisory.lock_id(v_name, VARIADIC v_params), v_tok, v_name, v_params);
    IF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' AND v_oldps OPERATOR(pg_catalog.<>) v_params THEN
        PERFORM pgadvisory.fence_require_current(pgadvisory.lock_id(v_name, VARIADIC v_oldps), v_tok, v_name, v_oldps);
    END IF;
    IF TG_OP OPERATOR(pg_catalog.=) 'DELETE' THEN RETURN OLD; END IF;
    NEW.fencing_token := v_tok;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.fence_check_param() IS
'lockgen fencing row trigger of the first layout (00002) for a parameterized lock: BEFORE '
'INSERT OR UPDATE OR DELETE FOR EACH ROW EXECUTE FUNCTION pgadvisory.fence_check_param(''<lock '
'name>'', ''strict''|''permissive'', ''<column>'', ...) on a table listed in '
'pgadvisory.fenced_table (else 42501). Each row''s lock ID is pgadvisory.lock_id(name, VARIADIC '
'<the columns'' text>) (the old row for DELETE; an UPDATE that changes a parameter column needs '
'the token of the old row''s lock too); a NULL parameter raises LF005. Otherwise as '
'pgadvisory.fence_check. Superseded by fence_stamp and fence_check_statement (lockgen fence '
'-upgrade). SECURITY DEFINER.';

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadvisory.fence_truncate_guard()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
-- Runs as its owner (the per-lock check is not PUBLIC), on listed tables
-- only; it reads no row.
DECLARE
    v_policy text := TG_ARGV[1];
    v_tok    bigint := NULLIF(pg_catalog.current_setting('pgadvisory.fencing_token', true), '')::pg_catalog.int8;
BEGIN
    IF TG_NARGS OPERATOR(pg_catalog.<) 2 OR TG_ARGV[0] IS NULL OR v_policy IS NULL OR v_policy OPERATOR(pg_catalog.<>) ALL (ARRAY['strict', 'permissive']) THEN
        RAISE EXCEPTION 'pgadvisory: fence_truncate_guard on %.% needs the arguments of the table''s fence trigger',
            TG_TABLE_SCHEMA, TG_TABLE_NAME USING ERRCODE = '22023';
    END IF;
    PERFORM pgadvisory.fence_table_verify(TG_RELID, 'fence_truncate_guard', TG_ARGV, false);
    IF v_tok IS NULL AND v_policy OPERATOR(pg_catalog.=) 'permissive' THEN
        RETURN NULL;
    END IF;
    IF TG_NARGS OPERATOR(pg_catalog.>) 2 THEN
        -- Parameterized: one token cannot speak for every lock's rows.
        RAISE EXCEPTION 'pgadvisory: TRUNCATE of %.% is not allowed: the table is fenced by the parameterized lock %; DELETE rows instead',
            TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_ARGV[0]
            USING ERRCODE = 'LF003';
    END IF;
    IF v_tok IS NULL THEN
        RAISE EXCEPTION 'pgadvisory: TRUNCATE on %.% carries no fencing token (lock %): take the lock with pgadvisory.WithFencing() (fencing: true in locks.yaml) and truncate through its transaction, or carry a holder''s token with pgadvisory.RunFenced or SetFencingToken', TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_ARGV[0]
            USING ERRCODE = 'LF002',
                  HINT = 'A write''s token is the transaction-local setting pgadvisory.fencing_token (set_config(''pgadvisory.fencing_token'', token, true)).';
    END IF;
    PERFORM pgadvisory.fence_require_current(TG_ARGV[0]::pg_catalog.int8, v_tok, NULL, NULL);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.fence_truncate_guard() IS
'lockgen fencing TRUNCATE guard: BEFORE TRUNCATE FOR EACH STATEMENT with the arguments of the '
'table''s fence triggers, on a table listed in pgadvisory.fenced_table (else 42501). Without '
'pgadvisory.fencing_token set, permissive allows the TRUNCATE and strict raises LF002. With it, a '
'plain lock needs the published token (else LF001) and a parameterized lock refuses with LF003: '
'delete rows instead. SECURITY DEFINER.';

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadvisory.fence_acquire(
    p_ids bigint[], p_wait boolean, p_lock_timeout text, p_publish_timeout text,
    OUT granted boolean, OUT standby boolean, OUT token bigint)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
-- Every step that can be is a plain assignment or condition (PL/pgSQL's
-- cheap path for simple expressions): this runs in every fenced call.
DECLARE
    v_ids      bigint[] := p_ids;
    v_id       bigint;
    v_taken    integer := 0;
    v_token    bigint;
    v_previous text := pg_catalog.current_setting('lock_timeout');
    v_step     text := 'lock';
    v_set      text;
BEGIN
    granted := false;
    -- A hand-over is pending only when this call grants one.
    v_set := pg_catalog.set_config('pgadvisory.pending', '', false);
    -- Nothing of the caller's may be pending in this transaction: a
    -- deferred trigger would fire as this function's owner if anything
    -- here fired it, and could fail the COMMIT after the locks are taken.
    -- A transaction that wrote nothing has no transaction ID and nothing
    -- deferred.
    IF pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL THEN
        RAISE EXCEPTION 'pgadvisory: fence_acquire must run before its transaction writes anything'
            USING ERRCODE = '25001',
                  HINT = 'Call it first in its transaction: BEGIN; SELECT ... FROM pgadvisory.fence_acquire(...); COMMIT AND CHAIN; SELECT pgadvisory.fence_handover();';
    END IF;
    -- A standby's advisory locks exclude nobody on the primary.
    standby := pg_catalog.pg_is_in_recovery();
    IF standby THEN
        RETURN;
    END IF;
    IF pg_catalog.cardinality(v_ids) IS DISTINCT FROM 1 THEN
        SELECT pg_catalog.array_agg(DISTINCT u.id ORDER BY u.id) INTO v_ids
        FROM pg_catalog.unnest(p_ids) AS u(id);
    END IF;
    IF v_ids IS NULL OR pg_catalog.array_position(v_ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'pgadvisory: fence_acquire needs one or more lock IDs, none NULL (got %)', p_ids
            USING ERRCODE = '22023';
    END IF;
    BEGIN
        IF p_wait AND p_lock_timeout IS NOT NULL THEN
            v_set := pg_catalog.set_config('lock_timeout', p_lock_timeout, true);
        END IF;
        -- Ascending order: callers waiting for overlapping sets cannot
        -- deadlock each other. v_taken counts the locks this call holds.
        FOREACH v_id IN ARRAY v_ids LOOP
            IF p_wait THEN
                PERFORM pg_catalog.pg_advisory_lock(v_id);
            ELSIF NOT pg_catalog.pg_try_advisory_lock(v_id) THEN
                PERFORM pg_catalog.pg_advisory_unlock(v_ids[i]) FROM pg_catalog.generate_series(1, v_taken) AS i;
                v_taken := 0;
                v_set := pg_catalog.set_config('lock_timeout', v_previous, true);
                RETURN;
            END IF;
            v_taken := v_taken OPERATOR(pg_catalog.+) 1;
        END LOOP;

        -- Granted: lock the fence rows, waiting at most p_publish_timeout
        -- for writers still holding one FOR SHARE with the previous token,
        -- then draw the token (the sequence never re-issues a value) and
        -- publish it. In this order a call that gives up waiting (55P03)
        -- has drawn no token: a sequence is not transactional.
        v_step := 'publish';
        v_set := pg_catalog.set_config('lock_timeout', p_publish_timeout, true);
        PERFORM FROM pgadvisory.fence AS f WHERE f.lock_id OPERATOR(pg_catalog.=) ANY (v_ids) ORDER BY f.lock_id FOR NO KEY UPDATE;
        v_token := pg_catalog.nextval('pgadvisory.fencing_token_seq');
        FOREACH v_id IN ARRAY v_ids LOOP
            INSERT INTO pgadvisory.fence AS f (lock_id, token) VALUES (v_id, v_token)
            ON CONFLICT (lock_id) DO UPDATE SET token = excluded.token, published_at = pg_catalog.now()
            WHERE f.token IS NULL OR f.token OPERATOR(pg_catalog.<) excluded.token;
            IF NOT FOUND THEN
                -- This session holds the lock, so no other holder can have
                -- published since: the sequence itself went backwards. The
                -- message names no published token (only holders learn
                -- theirs).
                RAISE EXCEPTION 'pgadvisory: the fencing token sequence is behind: a newer token than the one it issued is already published for lock %; the sequence went backwards (a restored backup, an asynchronous failover)',
                    v_id
                    USING ERRCODE = 'LF004',
                          HINT = 'Advance it past every published token, as the owner of lockgen''s schema: SELECT setval(''pgadvisory.fencing_token_seq'', (SELECT max(token) FROM pgadvisory.fence) + 1000000);';
            END IF;
        END LOOP;
        v_set := pg_catalog.set_config('lock_timeout', v_previous, true);
        -- The COMMIT that follows must be durable, on synchronous standbys
        -- too, before fn may run, whatever the server, database, role or
        -- session says (local and remote_write do not wait for a standby's
        -- flush).
        IF pg_catalog.current_setting('synchronous_commit') OPERATOR(pg_catalog.<>) ALL (ARRAY['on', 'remote_apply']) THEN
            v_set := pg_catalog.set_config('synchronous_commit', 'on', true);
        END IF;
        v_set := pg_catalog.set_config('pgadvisory.pending',
            v_token::pg_catalog.text OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) pg_catalog.array_to_string(v_ids, ','), false);
        -- Deferred triggers of this transaction fire here, where an error
        -- still unlocks, and not in the COMMIT. The transaction wrote
        -- nothing before this call (checked above), so the only ones are
        -- triggers on pgadvisory.fence, which only the owner of lockgen's
        -- schema (or a role it granted TRIGGER) can create: no caller's.
        SET CONSTRAINTS ALL IMMEDIATE;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        -- Session locks survive the rollback of this block: release the
        -- ones this call took (v_ids[1 .. v_taken]), one unlock per lock, so
        -- that a lock the caller held before keeps its own hold.
        PERFORM pg_catalog.pg_advisory_unlock(v_ids[i]) FROM pg_catalog.generate_series(1, v_taken) AS i;
        IF v_step OPERATOR(pg_catalog.=) 'publish' AND SQLSTATE OPERATOR(pg_catalog.=) '55P03' THEN
            RAISE EXCEPTION 'pgadvisory: publishing fencing token for lock(s) % waited % for writes still in flight with the previous token (no token drawn)',
                pg_catalog.array_to_string(v_ids, ', '), p_publish_timeout
                USING ERRCODE = '55P03',
                      HINT = 'A transaction writing with the previous holder''s token is still open (it holds the fence row FOR SHARE): the lock was not taken; retry later.';
        END IF;
        RAISE;
    END;
    granted := true;
    token := v_token;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.fence_acquire(bigint[], boolean, text, text) IS
'lockgen fencing: the first half of a fenced acquisition, first in its transaction (25001 after '
'the transaction wrote anything). Takes session-level advisory locks on p_ids in ascending order '
'(pg_try_advisory_lock, or with p_wait pg_advisory_lock under lock_timeout p_lock_timeout when '
'not NULL); on a hot standby returns standby at once, and when a lock is held elsewhere releases '
'what it took and returns granted = false. Granted: locks the fence rows of the IDs (waiting at '
'most p_publish_timeout for writers of the previous token: 55P03, before any token is drawn), '
'draws a token from pgadvisory.fencing_token_seq, publishes it in pgadvisory.fence for every ID '
'(LF004 when a newer token is already published, i.e. the sequence went backwards), forces synchronous_commit = on for the transaction '
'unless it is on or remote_apply, and leaves the hand-over in the session setting '
'pgadvisory.pending. The caller commits (COMMIT AND CHAIN) and calls pgadvisory.fence_handover() '
'in the chained transaction. On any error it releases the session locks it took, and only those. '
'SECURITY DEFINER.';

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadvisory.leader_elect(
    p_lock_id bigint, p_holder text, p_publish_timeout text,
    OUT term bigint, OUT elected_at timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_pid      integer := pg_catalog.pg_backend_pid();
    v_previous text := pg_catalog.current_setting('lock_timeout');
    v_set      text;
BEGIN
    IF p_lock_id IS NULL OR p_holder IS NULL OR p_publish_timeout IS NULL THEN
        RAISE EXCEPTION 'pgadvisory: leader_elect needs a lock ID, a holder and a publish timeout (got %, %, %)',
            p_lock_id, p_holder, p_publish_timeout
            USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.pg_is_in_recovery() THEN
        RAISE EXCEPTION 'pgadvisory: leader_elect on a hot standby: its advisory locks exclude nobody on the primary'
            USING ERRCODE = '25006';
    END IF;
    -- The caller must hold the lock at session level, exclusively, now
    -- (see 00007: a transaction-level hold, then the session-level unlock
    -- that reports whether there was one, then the session-level hold again).
    IF NOT pg_catalog.pg_try_advisory_xact_lock(p_lock_id)
       OR NOT pg_catalog.pg_advisory_unlock(p_lock_id) THEN
        RAISE EXCEPTION 'pgadvisory: leader_elect: this session (pid %) does not hold the advisory lock % at session level in exclusive mode',
            v_pid, p_lock_id
            USING ERRCODE = '55000',
                  HINT = 'Take the lock first (pg_advisory_lock), on the connection that calls leader_elect.';
    END IF;
    PERFORM pg_catalog.pg_advisory_lock(p_lock_id);

    -- The fence row first, then the term: writers of the previous term hold
    -- the row FOR SHARE, and an election that gives up waiting for them
    -- (55P03 after p_publish_timeout) must not have drawn a term (a
    -- sequence is not transactional: a drawn value stays used up). A lock
    -- without a fence row yet has no writers to wait for.
    v_set := pg_catalog.set_config('lock_timeout', p_publish_timeout, true);
    PERFORM FROM pgadvisory.fence AS f WHERE f.lock_id OPERATOR(pg_catalog.=) p_lock_id FOR NO KEY UPDATE;
    term := pg_catalog.nextval('pgadvisory.fencing_token_seq');
    UPDATE pgadvisory.fence AS f SET token = term, published_at = pg_catalog.now()
    WHERE f.lock_id OPERATOR(pg_catalog.=) p_lock_id AND (f.token IS NULL OR f.token OPERATOR(pg_catalog.<) term);
    IF NOT FOUND THEN
        INSERT INTO pgadvisory.fence AS f (lock_id, token) VALUES (p_lock_id, term)
        ON CONFLICT (lock_id) DO UPDATE SET token = excluded.token, published_at = pg_catalog.now()
        WHERE f.token IS NULL OR f.token OPERATOR(pg_catalog.<) excluded.token;
    END IF;
    IF NOT FOUND THEN
        -- No published token in the message: only holders learn theirs.
        RAISE EXCEPTION 'pgadvisory: the fencing token sequence is behind: a newer token than the term it issued is already published for lock %; the sequence went backwards (a restored backup, an asynchronous failover)',
            p_lock_id
            USING ERRCODE = 'LF004',
                  HINT = 'Advance it past every published token, as the owner of lockgen''s schema: SELECT setval(''pgadvisory.fencing_token_seq'', (SELECT max(token) FROM pgadvisory.fence) + 1000000);';
    END IF;
    v_set := pg_catalog.set_config('lock_timeout', v_previous, true);

    elected_at := pg_catalog.now();
    UPDATE pgadvisory.leader AS l SET holder = p_holder, term = leader_elect.term, pid = v_pid, elected_at = leader_elect.elected_at
    WHERE l.lock_id OPERATOR(pg_catalog.=) p_lock_id;
    IF NOT FOUND THEN
        INSERT INTO pgadvisory.leader AS l (lock_id, holder, term, pid, elected_at)
        VALUES (p_lock_id, p_holder, term, v_pid, elected_at)
        ON CONFLICT (lock_id) DO UPDATE
        SET holder = excluded.holder, term = excluded.term, pid = excluded.pid, elected_at = excluded.elected_at;
    END IF;

    -- The commit of this statement's transaction must be durable, on
    -- synchronous standbys too, before the leader acts, whatever the
    -- server, database, role or session says.
    IF pg_catalog.current_setting('synchronous_commit') OPERATOR(pg_catalog.<>) ALL (ARRAY['on', 'remote_apply']) THEN
        v_set := pg_catalog.set_config('synchronous_commit', 'on', true);
    END IF;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.leader_elect(bigint, text, text) IS
'lockgen leader election: for a caller that holds the advisory lock p_lock_id at session level in '
'exclusive mode (else 55000), locks the lock''s fence row (55P03 after p_publish_timeout while '
'writers of the previous token are in flight, before any term is drawn), then draws a term from '
'pgadvisory.fencing_token_seq and publishes it in pgadvisory.fence as a fenced acquisition does '
'(LF004 when the sequence is behind), records the leader in pgadvisory.leader and '
'forces synchronous_commit = on for the transaction unless it is on or remote_apply. SECURITY DEFINER.';

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadvisory.run_once_finish()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Only on lockgen's ledger: attached elsewhere, NEW would be a row of
    -- another role's types, compared here as the owner.
    IF TG_RELID OPERATOR(pg_catalog.<>) 'pgadvisory.run_once'::pg_catalog.regclass THEN
        RAISE EXCEPTION 'pgadvisory: run_once_finish runs only on pgadvisory.run_once, not on %.%', TG_TABLE_SCHEMA, TG_TABLE_NAME
            USING ERRCODE = '42501';
    END IF;
    UPDATE pgadvisory.run_once AS r SET finished_at = pg_catalog.clock_timestamp()
    WHERE r.lock_id OPERATOR(pg_catalog.=) NEW.lock_id AND r.window_key OPERATOR(pg_catalog.=) NEW.window_key;
    RETURN NULL;
END $$;
-- +goose StatementEnd

-- After a restore: a copy of the database brings the sequence and the
-- fence rows back together, so LF004 cannot tell, and the next holders get
-- tokens that were already handed out after the copy was taken (a holder
-- of the old timeline may still be writing with one). fence_advance moves
-- the sequence past anything the copy shows by a margin no timeline of
-- tokens reaches.
-- +goose StatementBegin
CREATE FUNCTION pgadvisory.fence_advance(p_by bigint DEFAULT 1099511627776)
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_seen bigint;
BEGIN
    IF p_by IS NULL OR p_by OPERATOR(pg_catalog.<=) 0 THEN
        RAISE EXCEPTION 'pgadvisory: fence_advance needs a positive step (got %)', p_by
            USING ERRCODE = '22023';
    END IF;
    SELECT pg_catalog.max(x.t) INTO v_seen FROM (
        SELECT s.last_value FROM pgadvisory.fencing_token_seq AS s
        UNION ALL SELECT pg_catalog.max(f.token) FROM pgadvisory.fence AS f
        UNION ALL SELECT pg_catalog.max(l.term) FROM pgadvisory.leader AS l
        UNION ALL SELECT pg_catalog.max(r.token) FROM pgadvisory.run_once AS r
    ) AS x(t);
    IF v_seen OPERATOR(pg_catalog.>) (9223372036854775807 OPERATOR(pg_catalog.-) p_by) THEN
        RAISE EXCEPTION 'pgadvisory: fence_advance: the fencing token sequence is at %, too close to the end of bigint for a step of %', v_seen, p_by
            USING ERRCODE = '22003';
    END IF;
    RETURN pg_catalog.setval('pgadvisory.fencing_token_seq', v_seen OPERATOR(pg_catalog.+) p_by);
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.fence_advance(bigint) IS
'lockgen fencing, after restoring a copy of the database: sets pgadvisory.fencing_token_seq to '
'p_by (default 2^40) past the largest token the sequence, the fence rows, the leaders'' terms and '
'the run-once ledger show, and returns it, so that no token issued after the copy was taken is '
'handed out again. SECURITY DEFINER; EXECUTE only for the owner and the roles it grants it to.';

-- The functions of 00001, 00003 and 00005 that no earlier step of this
-- migration redefines, as they were but with the search_path pinned and
-- every operator written OPERATOR(pg_catalog.op) (lock_id and
-- valid_lock_name are no longer inlined into their callers' queries: a
-- function with a SET clause never is).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadvisory.lock_id(name text, VARIADIC params text[] DEFAULT '{}')
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT CASE
    -- A NULL or multi-dimensional parameter has no Go counterpart: NULL,
    -- never an ID that silently equals another tuple's.
    WHEN pg_catalog.array_ndims(params) OPERATOR(pg_catalog.>) 1 THEN NULL
    WHEN EXISTS (SELECT 1 FROM pg_catalog.unnest(params) AS n(p) WHERE n.p IS NULL) THEN NULL
    ELSE ('x' OPERATOR(pg_catalog.||) pg_catalog.encode(pg_catalog.substr(pg_catalog.sha256(
            pg_catalog.convert_to(name, 'UTF8')
            OPERATOR(pg_catalog.||) COALESCE((
                SELECT pg_catalog.string_agg(
                           pg_catalog.decode('00', 'hex')
                           OPERATOR(pg_catalog.||) pg_catalog.int4send(pg_catalog.octet_length(e.b))
                           OPERATOR(pg_catalog.||) e.b,
                           ''::pg_catalog.bytea ORDER BY e.ord)
                FROM (
                    SELECT pg_catalog.convert_to(u.p, 'UTF8') AS b, u.ord
                    FROM pg_catalog.unnest(params) WITH ORDINALITY AS u(p, ord)
                ) AS e
            ), ''::pg_catalog.bytea)
         ), 1, 8), 'hex'))::pg_catalog.bit(64)::pg_catalog.int8
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadvisory.valid_lock_name(name text)
RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT pg_catalog.octet_length(name) OPERATOR(pg_catalog.<=) 128
   AND (name COLLATE "C") OPERATOR(pg_catalog.~) '^[a-z][a-z0-9_]*([.][a-z][a-z0-9_]*)*$'
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadvisory.register_instance(name text, VARIADIC params text[] DEFAULT '{}')
RETURNS bigint
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_decl  pgadvisory.registry_declaration;
    v_n     integer := COALESCE(pg_catalog.cardinality(params), 0);
    v_want  integer;
    v_param jsonb;
    v_canon text[] := '{}';
    v_obj   jsonb := '{}';
    v_text  text;
    v_id    bigint;
BEGIN
    SELECT d.* INTO v_decl FROM pgadvisory.registry_declaration AS d WHERE d.name OPERATOR(pg_catalog.=) register_instance.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgadvisory: lock % is not in pgadvisory.registry_declaration', name
            USING ERRCODE = '22023',
                  HINT = 'Register the declarations first: pgadvisory.Register or lockgen register.';
    END IF;
    IF v_decl.declared_params IS NULL THEN
        RAISE EXCEPTION 'pgadvisory: lock % is a plain lock (ID %): it takes no parameters', name, v_decl.lock_id
            USING ERRCODE = '22023';
    END IF;
    v_want := pg_catalog.jsonb_array_length(v_decl.declared_params);
    IF pg_catalog.array_ndims(params) OPERATOR(pg_catalog.>) 1 OR v_n OPERATOR(pg_catalog.<>) v_want THEN
        RAISE EXCEPTION 'pgadvisory: lock % takes % parameter(s), got %', name, v_want, v_n
            USING ERRCODE = '22023';
    END IF;
    FOR i IN 1 .. v_n LOOP
        v_param := v_decl.declared_params OPERATOR(pg_catalog.->) (i OPERATOR(pg_catalog.-) 1);
        IF params[i] IS NULL THEN
            RAISE EXCEPTION 'pgadvisory: lock %: parameter % is NULL', name, v_param OPERATOR(pg_catalog.->>) 'name'
                USING ERRCODE = '22004';
        END IF;
        -- Canonical text, as keyspace.Canonical: '+042' is 42, upper-case
        -- UUIDs are lower-cased, booleans are true/false.
        BEGIN
            -- A searched CASE: CASE x WHEN y resolves "=" by name.
            v_text := CASE
                WHEN (v_param OPERATOR(pg_catalog.->>) 'type') OPERATOR(pg_catalog.=) 'int64' THEN params[i]::pg_catalog.int8::pg_catalog.text
                WHEN (v_param OPERATOR(pg_catalog.->>) 'type') OPERATOR(pg_catalog.=) 'uuid' THEN params[i]::pg_catalog.uuid::pg_catalog.text
                WHEN (v_param OPERATOR(pg_catalog.->>) 'type') OPERATOR(pg_catalog.=) 'bool' THEN params[i]::pg_catalog.bool::pg_catalog.text
                WHEN (v_param OPERATOR(pg_catalog.->>) 'type') OPERATOR(pg_catalog.=) 'string' THEN params[i]
            END;
        EXCEPTION WHEN data_exception THEN
            RAISE EXCEPTION 'pgadvisory: lock %: parameter % (%): %', name, v_param OPERATOR(pg_catalog.->>) 'name', v_param OPERATOR(pg_catalog.->>) 'type', SQLERRM
                USING ERRCODE = SQLSTATE;
        END;
        IF v_text IS NULL THEN
            RAISE EXCEPTION 'pgadvisory: lock %: parameter % has unknown type %', name, v_param OPERATOR(pg_catalog.->>) 'name', v_param OPERATOR(pg_catalog.->>) 'type'
                USING ERRCODE = '22023';
        END IF;
        v_canon := v_canon OPERATOR(pg_catalog.||) v_text;
        v_obj := v_obj OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object(v_param OPERATOR(pg_catalog.->>) 'name', v_text);
    END LOOP;
    v_id := pgadvisory.lock_id(name, VARIADIC v_canon);
    INSERT INTO pgadvisory.registry AS r (lock_id, name, params, declared_params, doc)
    VALUES (v_id, name, v_obj, v_decl.declared_params, v_decl.doc)
    ON CONFLICT (lock_id) DO UPDATE
        SET name = excluded.name, params = excluded.params,
            declared_params = excluded.declared_params, doc = excluded.doc, registered_at = pg_catalog.now()
        WHERE (r.name, r.params, r.declared_params, r.doc)
              IS DISTINCT FROM (excluded.name, excluded.params, excluded.declared_params, excluded.doc);
    RETURN v_id;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadvisory.fence_handover()
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
-- Not SECURITY DEFINER; every name and operator is schema-qualified. Plain assignments and conditions only (PL/pgSQL's cheap path).
DECLARE
    v_pending text := pg_catalog.current_setting('pgadvisory.pending', true);
    v_token   bigint;
    v_id      bigint;
    v_set     text;
BEGIN
    IF v_pending IS NULL OR v_pending OPERATOR(pg_catalog.=) '' THEN
        RETURN NULL; -- nothing granted: a loser, or a standby
    END IF;
    v_token := pg_catalog.split_part(v_pending, ':', 1)::pg_catalog.int8;
    FOREACH v_id IN ARRAY pg_catalog.string_to_array(pg_catalog.split_part(v_pending, ':', 2), ',')::pg_catalog.int8[] LOOP
        -- Transaction level first (re-entrant: granted at once), then the
        -- session-level hold goes: the lock is never free in between.
        IF NOT pg_catalog.pg_try_advisory_xact_lock(v_id) OR NOT pg_catalog.pg_advisory_unlock(v_id) THEN
            RAISE EXCEPTION 'pgadvisory: fence_handover: this session does not hold lock % (pgadvisory.pending = %)', v_id, v_pending
                USING ERRCODE = '55000';
        END IF;
    END LOOP;
    v_set := pg_catalog.set_config('pgadvisory.fencing_token', v_token::pg_catalog.text, true);
    v_set := pg_catalog.set_config('pgadvisory.granted', 'on', true);
    v_set := pg_catalog.set_config('pgadvisory.pending', '', false);
    RETURN v_token;
END
$$;
-- +goose StatementEnd

-- 00007's status view with its operators written OPERATOR(pg_catalog.op)
-- and now() schema-qualified: a view keeps the operators it resolved when
-- it was created, so this only guards the migration's own run against a
-- search_path that puts another schema before pg_catalog.
CREATE OR REPLACE VIEW pgadvisory.status AS
SELECT k.lock_id,
       r.name,
       r.params,
       r.declared_params,
       l.mode,
       l.granted,
       NOT l.granted AS waiting,
       l.pid,
       a.application_name,
       a.client_addr,
       a.xact_start,
       (pg_catalog.now() OPERATOR(pg_catalog.-) a.xact_start)::pg_catalog.interval AS xact_age,
       a.state,
       a.wait_event,
       pg_catalog.pg_blocking_pids(l.pid) AS blocked_by,
       e.holder AS leader_holder,
       e.term AS leader_term,
       e.elected_at AS leader_since
FROM pg_catalog.pg_locks AS l
CROSS JOIN LATERAL (SELECT ((l.classid::pg_catalog.int8 OPERATOR(pg_catalog.<<) 32) OPERATOR(pg_catalog.|) l.objid::pg_catalog.int8)::pg_catalog.int8 AS lock_id) AS k
LEFT JOIN pg_catalog.pg_stat_activity AS a ON a.pid OPERATOR(pg_catalog.=) l.pid
LEFT JOIN pgadvisory.registry AS r ON r.lock_id OPERATOR(pg_catalog.=) k.lock_id
-- current_leader's checks, on this row's pg_locks and pg_stat_activity
-- (calling it would read pg_locks again for every row).
LEFT JOIN pgadvisory.leader AS e
       ON e.lock_id OPERATOR(pg_catalog.=) k.lock_id AND e.pid OPERATOR(pg_catalog.=) l.pid AND l.granted AND l.mode OPERATOR(pg_catalog.=) 'ExclusiveLock'
      AND (a.backend_start IS NULL OR a.backend_start OPERATOR(pg_catalog.<) e.elected_at)
      AND EXISTS (SELECT 1 FROM pgadvisory.fence AS f WHERE f.lock_id OPERATOR(pg_catalog.=) e.lock_id AND f.token OPERATOR(pg_catalog.=) e.term)
WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory'
  AND l.objsubid OPERATOR(pg_catalog.=) 1
  AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database AS d
                    WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database());

-- The view keeps 00007's comment in PostgreSQL; it is said again for sqlc,
-- whose catalog drops a view's comment when the view is replaced. The casts
-- on lock_id and xact_age change no column type: they let sqlc infer types
-- that it cannot infer through OPERATOR(...).
COMMENT ON VIEW pgadvisory.status IS
'lockgen: advisory locks (bigint keys) held or awaited in this database, one row per backend, '
'key and mode, named from pgadvisory.registry (name NULL: an unregistered key; see lock_id). '
'waiting = NOT granted; blocked_by = pg_blocking_pids(pid), the backends this one waits for on '
'any lock. leader_holder, leader_term and leader_since are set on the row of a backend that '
'leads its lock now (pgadvisory.current_leader), NULL otherwise. pg_locks cannot tell '
'session-level from transaction-level holds (one row for both, whatever the hold count). '
'pg_locks and pg_stat_activity are not read atomically: a backend that just ended may show NULL '
'activity columns.';

-- Least privilege: PUBLIC keeps EXECUTE only on what applications call.
REVOKE EXECUTE ON FUNCTION
    pgadvisory.fence_require_current(bigint, bigint, text, text[]),
    pgadvisory.fence_check(),
    pgadvisory.fence_check_param(),
    pgadvisory.fence_truncate_guard(),
    pgadvisory.fence_stamp(),
    pgadvisory.fence_check_statement(),
    pgadvisory.run_once_finish(),
    pgadvisory.fence_table_verify(oid, text, text[], boolean),
    pgadvisory.fence_register(regclass, text, text, text[]),
    pgadvisory.fence_unregister(regclass),
    pgadvisory.fence_advance(bigint),
    pgadvisory.fenced_table_sync()
FROM PUBLIC;

-- The tables fenced before this migration: every table with a trigger of
-- lockgen's fence functions, with the first such trigger's arguments (all
-- of a table's fence triggers carry the same ones). A row trigger cloned to
-- a partition is listed through its parent.
INSERT INTO pgadvisory.fenced_table (relid, lock, policy, columns)
SELECT DISTINCT ON (t.tgrelid) t.tgrelid::pg_catalog.regclass, a.args[1], a.args[2], COALESCE(a.args[3:], '{}'::pg_catalog.text[])
FROM pg_catalog.pg_trigger AS t
CROSS JOIN LATERAL (
    -- tgargs holds each argument followed by a zero byte; lockgen's
    -- arguments (IDs, names, policies, column names) are ASCII without
    -- backslashes, which the escape encoding leaves as they are.
    SELECT (pg_catalog.string_to_array(pg_catalog.encode(t.tgargs, 'escape'), E'\\000'))[1:t.tgnargs] AS args
) AS a
WHERE t.tgfoid OPERATOR(pg_catalog.=) ANY (ARRAY['pgadvisory.fence_check()', 'pgadvisory.fence_check_param()',
                   'pgadvisory.fence_stamp()', 'pgadvisory.fence_check_statement()',
                   'pgadvisory.fence_truncate_guard()']::pg_catalog.regprocedure[]::pg_catalog.oid[])
  AND t.tgnargs OPERATOR(pg_catalog.>=) 2
  AND t.tgparentid OPERATOR(pg_catalog.=) 0
  AND a.args[2] OPERATOR(pg_catalog.=) ANY (ARRAY['strict', 'permissive'])
ORDER BY t.tgrelid, t.tgname;

-- +goose Down
-- Back to 00007: the previous versions of the redefined functions, EXECUTE
-- for PUBLIC, no pinned search_path where there was none.
GRANT EXECUTE ON FUNCTION
    pgadvisory.fence_require_current(bigint, bigint, text, text[]),
    pgadvisory.fence_check(),
    pgadvisory.fence_check_param(),
    pgadvisory.fence_truncate_guard(),
    pgadvisory.fence_stamp(),
    pgadvisory.fence_check_statement(),
    pgadvisory.run_once_finish()
TO PUBLIC;

-- 00007's status view.
CREATE OR REPLACE VIEW pgadvisory.status AS
SELECT k.lock_id,
       r.name,
       r.params,
       r.declared_params,
       l.mode,
       l.granted,
       NOT l.granted AS waiting,
       l.pid,
       a.application_name,
       a.client_addr,
       a.xact_start,
       now() - a.xact_start AS xact_age,
       a.state,
       a.wait_event,
       pg_catalog.pg_blocking_pids(l.pid) AS blocked_by,
       e.holder AS leader_holder,
       e.term AS leader_term,
       e.elected_at AS leader_since
FROM pg_catalog.pg_locks AS l
CROSS JOIN LATERAL (SELECT (l.classid::bigint << 32) | l.objid::bigint AS lock_id) AS k
LEFT JOIN pg_catalog.pg_stat_activity AS a ON a.pid = l.pid
LEFT JOIN pgadvisory.registry AS r ON r.lock_id = k.lock_id
-- current_leader's checks, on this row's pg_locks and pg_stat_activity
-- (calling it would read pg_locks again for every row).
LEFT JOIN pgadvisory.leader AS e
       ON e.lock_id = k.lock_id AND e.pid = l.pid AND l.granted AND l.mode = 'ExclusiveLock'
      AND (a.backend_start IS NULL OR a.backend_start < e.elected_at)
      AND EXISTS (SELECT 1 FROM pgadvisory.fence AS f WHERE f.lock_id = e.lock_id AND f.token = e.term)
WHERE l.locktype = 'advisory'
  AND l.objsubid = 1
  AND l.database = (SELECT d.oid FROM pg_catalog.pg_database AS d
                    WHERE d.datname = pg_catalog.current_database());

-- 00001's, 00003's and 00005's versions of lock_id, valid_lock_name,
-- register_instance and fence_handover.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadvisory.lock_id(name text, VARIADIC params text[] DEFAULT '{}')
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
SELECT CASE
    -- A NULL or multi-dimensional parameter has no Go counterpart: NULL,
    -- never an ID that silently equals another tuple's.
    WHEN pg_catalog.array_ndims(params) > 1 THEN NULL
    WHEN EXISTS (SELECT 1 FROM pg_catalog.unnest(params) AS n(p) WHERE n.p IS NULL) THEN NULL
    ELSE ('x' || pg_catalog.encode(pg_catalog.substr(pg_catalog.sha256(
            pg_catalog.convert_to(name, 'UTF8')
            || COALESCE((
                SELECT pg_catalog.string_agg(
                           pg_catalog.decode('00', 'hex')
                           || pg_catalog.int4send(pg_catalog.octet_length(e.b))
                           || e.b,
                           ''::bytea ORDER BY e.ord)
                FROM (
                    SELECT pg_catalog.convert_to(u.p, 'UTF8') AS b, u.ord
                    FROM pg_catalog.unnest(params) WITH ORDINALITY AS u(p, ord)
                ) AS e
            ), ''::bytea)
         ), 1, 8), 'hex'))::bit(64)::bigint
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadvisory.valid_lock_name(name text)
RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
SELECT pg_catalog.octet_length(name) <= 128
   AND (name COLLATE "C") ~ '^[a-z][a-z0-9_]*([.][a-z][a-z0-9_]*)*$'
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadvisory.register_instance(name text, VARIADIC params text[] DEFAULT '{}')
RETURNS bigint
LANGUAGE plpgsql VOLATILE STRICT
AS $$
DECLARE
    v_decl  pgadvisory.registry_declaration;
    v_n     integer := COALESCE(pg_catalog.cardinality(params), 0);
    v_want  integer;
    v_param jsonb;
    v_canon text[] := '{}';
    v_obj   jsonb := '{}';
    v_text  text;
    v_id    bigint;
BEGIN
    SELECT d.* INTO v_decl FROM pgadvisory.registry_declaration AS d WHERE d.name = register_instance.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgadvisory: lock % is not in pgadvisory.registry_declaration', name
            USING ERRCODE = '22023',
                  HINT = 'Register the declarations first: pgadvisory.Register or lockgen register.';
    END IF;
    IF v_decl.declared_params IS NULL THEN
        RAISE EXCEPTION 'pgadvisory: lock % is a plain lock (ID %): it takes no parameters', name, v_decl.lock_id
            USING ERRCODE = '22023';
    END IF;
    v_want := pg_catalog.jsonb_array_length(v_decl.declared_params);
    IF pg_catalog.array_ndims(params) > 1 OR v_n <> v_want THEN
        RAISE EXCEPTION 'pgadvisory: lock % takes % parameter(s), got %', name, v_want, v_n
            USING ERRCODE = '22023';
    END IF;
    FOR i IN 1 .. v_n LOOP
        v_param := v_decl.declared_params -> (i - 1);
        IF params[i] IS NULL THEN
            RAISE EXCEPTION 'pgadvisory: lock %: parameter % is NULL', name, v_param ->> 'name'
                USING ERRCODE = '22004';
        END IF;
        -- Canonical text, as keyspace.Canonical: '+042' is 42, upper-case
        -- UUIDs are lower-cased, booleans are true/false.
        BEGIN
            v_text := CASE v_param ->> 'type'
                WHEN 'int64' THEN params[i]::bigint::text
                WHEN 'uuid'  THEN params[i]::uuid::text
                WHEN 'bool'  THEN params[i]::boolean::text
                WHEN 'string' THEN params[i]
            END;
        EXCEPTION WHEN data_exception THEN
            RAISE EXCEPTION 'pgadvisory: lock %: parameter % (%): %', name, v_param ->> 'name', v_param ->> 'type', SQLERRM
                USING ERRCODE = SQLSTATE;
        END;
        IF v_text IS NULL THEN
            RAISE EXCEPTION 'pgadvisory: lock %: parameter % has unknown type %', name, v_param ->> 'name', v_param ->> 'type'
                USING ERRCODE = '22023';
        END IF;
        v_canon := v_canon || v_text;
        v_obj := v_obj || pg_catalog.jsonb_build_object(v_param ->> 'name', v_text);
    END LOOP;
    v_id := pgadvisory.lock_id(name, VARIADIC v_canon);
    INSERT INTO pgadvisory.registry AS r (lock_id, name, params, declared_params, doc)
    VALUES (v_id, name, v_obj, v_decl.declared_params, v_decl.doc)
    ON CONFLICT (lock_id) DO UPDATE
        SET name = excluded.name, params = excluded.params,
            declared_params = excluded.declared_params, doc = excluded.doc, registered_at = now()
        WHERE (r.name, r.params, r.declared_params, r.doc)
              IS DISTINCT FROM (excluded.name, excluded.params, excluded.declared_params, excluded.doc);
    RETURN v_id;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadvisory.fence_handover()
RETURNS bigint
LANGUAGE plpgsql
AS $$
-- Not SECURITY DEFINER, and every name is schema-qualified: no search_path
-- needed. Plain assignments and conditions only (PL/pgSQL's cheap path).
DECLARE
    v_pending text := pg_catalog.current_setting('pgadvisory.pending', true);
    v_token   bigint;
    v_id      bigint;
    v_set     text;
BEGIN
    IF v_pending IS NULL OR v_pending = '' THEN
        RETURN NULL; -- nothing granted: a loser, or a standby
    END IF;
    v_token := pg_catalog.split_part(v_pending, ':', 1)::bigint;
    FOREACH v_id IN ARRAY pg_catalog.string_to_array(pg_catalog.split_part(v_pending, ':', 2), ',')::bigint[] LOOP
        -- Transaction level first (re-entrant: granted at once), then the
        -- session-level hold goes: the lock is never free in between.
        IF NOT pg_catalog.pg_try_advisory_xact_lock(v_id) OR NOT pg_catalog.pg_advisory_unlock(v_id) THEN
            RAISE EXCEPTION 'pgadvisory: fence_handover: this session does not hold lock % (pgadvisory.pending = %)', v_id, v_pending
                USING ERRCODE = '55000';
        END IF;
    END LOOP;
    v_set := pg_catalog.set_config('pgadvisory.fencing_token', v_token::text, true);
    v_set := pg_catalog.set_config('pgadvisory.granted', 'on', true);
    v_set := pg_catalog.set_config('pgadvisory.pending', '', false);
    RETURN v_token;
END
$$;
-- +goose StatementEnd
-- current_leader had its search_path pinned since 00007.

-- 00005's fence_require_current.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadvisory.fence_require_current(p_lock bigint, p_token bigint, p_name text, p_params text[])
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_cur bigint;
    v_lock text;
BEGIN
    SELECT f.token INTO v_cur FROM pgadvisory.fence AS f WHERE f.lock_id = p_lock FOR SHARE;
    IF v_cur IS DISTINCT FROM p_token THEN
        IF p_name IS NULL THEN
            v_lock := p_lock::text;
        ELSE
            v_lock := pg_catalog.format('%s(%s) = %s', p_name, pg_catalog.array_to_string(p_params, ', '), p_lock);
        END IF;
        RAISE EXCEPTION 'pgadvisory: stale fencing token % for lock % (current token %)',
            p_token, v_lock, COALESCE(v_cur::text, 'none: never published')
            USING ERRCODE = 'LF001',
                  HINT = 'Another holder took the lock after this token was issued: stop writing.';
    END IF;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.fence_require_current(bigint, bigint, text, text[]) IS
'lockgen fencing (internal to the fence triggers): raises SQLSTATE LF001 unless p_token is the '
'published token of the lock p_lock in pgadvisory.fence, whose row it locks FOR SHARE until the '
'end of the transaction. p_name and p_params (a parameterized lock) only describe the lock in '
'the message. SECURITY DEFINER: callers need no privilege on pgadvisory.fence.';

-- 00006's fence_check.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadvisory.fence_check()
RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_lock   bigint := TG_ARGV[0]::bigint;
    v_policy text   := TG_ARGV[1];
    v_tok    bigint := NULLIF(pg_catalog.current_setting('pgadvisory.fencing_token', true), '')::bigint;
BEGIN
    IF TG_NARGS <> 2 OR v_lock IS NULL OR v_policy IS NULL OR v_policy NOT IN ('strict', 'permissive') THEN
        RAISE EXCEPTION 'pgadvisory: fence_check on %.% needs the arguments (lock ID, ''strict'' or ''permissive'')',
            TG_TABLE_SCHEMA, TG_TABLE_NAME USING ERRCODE = '22023';
    END IF;
    IF v_tok IS NULL THEN
        IF v_policy = 'permissive' THEN
            IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
            NEW.fencing_token := NULL;
            RETURN NEW;
        END IF;
        RAISE EXCEPTION 'pgadvisory: % on %.% carries no fencing token (lock %): take the lock with pgadvisory.WithFencing() (fencing: true in locks.yaml) and write through its transaction, or carry a holder''s token with pgadvisory.RunFenced or SetFencingToken', TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME, v_lock
            USING ERRCODE = 'LF002',
                  HINT = 'A write''s token is the transaction-local setting pgadvisory.fencing_token (set_config(''pgadvisory.fencing_token'', token, true)), never the fencing_token column, which is only a stamp.';
    END IF;
    IF TG_OP <> 'INSERT' AND OLD.fencing_token IS NOT NULL AND v_tok < OLD.fencing_token THEN
        RAISE EXCEPTION 'pgadvisory: stale fencing token %: the row of %.% already carries token % (lock %)',
            v_tok, TG_TABLE_SCHEMA, TG_TABLE_NAME, OLD.fencing_token, v_lock
            USING ERRCODE = 'LF001';
    END IF;
    PERFORM pgadvisory.fence_require_current(v_lock, v_tok, NULL, NULL);
    IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
    NEW.fencing_token := v_tok;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.fence_check() IS
'lockgen fencing row trigger of the first layout (00002) for a plain lock: BEFORE INSERT OR '
'UPDATE OR DELETE FOR EACH ROW EXECUTE FUNCTION pgadvisory.fence_check(''<lock ID>'', '
'''strict''|''permissive''). The write''s token is the transaction-local setting '
'pgadvisory.fencing_token; the fencing_token column never counts. No token: permissive passes '
'the write (stamped NULL), strict raises LF002. A token older than OLD.fencing_token, or not '
'equal to the lock''s published token in pgadvisory.fence (read FOR SHARE), raises LF001. '
'Accepted rows get fencing_token = token. Superseded by fence_stamp and fence_check_statement '
'(lockgen fence -upgrade).';

-- 00006's fence_check_param.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadvisory.fence_check_param()
RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_name   text   := TG_ARGV[0];
    v_policy text   := TG_ARGV[1];
    v_tok    bigint := NULLIF(pg_catalog.current_setting('pgadvisory.fencing_token', true), '')::bigint;
    v_row    jsonb;
    v_params text[];
    v_lock   bigint;
    v_oldrow jsonb;
    v_oldps  text[];
    v_col    text;
BEGIN
    IF TG_NARGS < 3 OR v_name IS NULL OR v_policy IS NULL OR v_policy NOT IN ('strict', 'permissive') THEN
        RAISE EXCEPTION 'pgadvisory: fence_check_param on %.% needs the arguments (lock name, ''strict'' or ''permissive'', parameter column, ...)',
            TG_TABLE_SCHEMA, TG_TABLE_NAME USING ERRCODE = '22023';
    END IF;
    IF v_tok IS NULL THEN
        IF v_policy = 'permissive' THEN
            IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
            NEW.fencing_token := NULL;
            RETURN NEW;
        END IF;
        RAISE EXCEPTION 'pgadvisory: % on %.% carries no fencing token (lock %): take the lock with pgadvisory.WithFencing() (fencing: true in locks.yaml) and write through its transaction, or carry a holder''s token with pgadvisory.RunFenced or SetFencingToken', TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME, v_name
            USING ERRCODE = 'LF002',
                  HINT = 'A write''s token is the transaction-local setting pgadvisory.fencing_token (set_config(''pgadvisory.fencing_token'', token, true)), never the fencing_token column, which is only a stamp.';
    END IF;
    IF TG_OP <> 'INSERT' AND OLD.fencing_token IS NOT NULL AND v_tok < OLD.fencing_token THEN
        RAISE EXCEPTION 'pgadvisory: stale fencing token %: the row of %.% already carries token % (lock %)',
            v_tok, TG_TABLE_SCHEMA, TG_TABLE_NAME, OLD.fencing_token, v_name
            USING ERRCODE = 'LF001';
    END IF;
    IF TG_OP = 'DELETE' THEN
        v_row := pg_catalog.to_jsonb(OLD);
    ELSE
        v_row := pg_catalog.to_jsonb(NEW);
    END IF;
    v_params := pg_catalog.array_fill(NULL::text, ARRAY[TG_NARGS - 2]);
    FOR i IN 2 .. TG_NARGS - 1 LOOP
        v_col := TG_ARGV[i];
        IF NOT v_row ? v_col THEN
            RAISE EXCEPTION 'pgadvisory: fence_check_param: %.% has no column % (parameter % of lock %)',
                TG_TABLE_SCHEMA, TG_TABLE_NAME, v_col, i - 1, v_name USING ERRCODE = '42703';
        END IF;
        v_params[i - 1] := v_row ->> v_col;
        IF v_params[i - 1] IS NULL THEN
            RAISE EXCEPTION 'pgadvisory: % on %.%: column % is NULL, but it is parameter % of lock %',
                TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME, v_col, i - 1, v_name USING ERRCODE = '23502';
        END IF;
    END LOOP;
    v_lock := pgadvisory.lock_id(v_name, VARIADIC v_params);
    PERFORM pgadvisory.fence_require_current(v_lock, v_tok, v_name, v_params);
    IF TG_OP = 'UPDATE' THEN
        v_oldrow := pg_catalog.to_jsonb(OLD);
        v_oldps := pg_catalog.array_fill(NULL::text, ARRAY[TG_NARGS - 2]);
        FOR i IN 2 .. TG_NARGS - 1 LOOP
            v_oldps[i - 1] := v_oldrow ->> TG_ARGV[i];
        END LOOP;
        IF v_oldps IS DISTINCT FROM v_params AND pg_catalog.array_position(v_oldps, NULL) IS NULL THEN
            PERFORM pgadvisory.fence_require_current(pgadvisory.lock_id(v_name, VARIADIC v_oldps), v_tok, v_name, v_oldps);
        END IF;
    END IF;
    IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
    NEW.fencing_token := v_tok;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.fence_check_param() IS
'lockgen fencing row trigger of the first layout (00002) for a parameterized lock: BEFORE '
'INSERT OR UPDATE OR DELETE FOR EACH ROW EXECUTE FUNCTION pgadvisory.fence_check_param(''<lock '
'name>'', ''strict''|''permissive'', ''<column>'', ...). Each row''s lock ID is '
'pgadvisory.lock_id(name, VARIADIC <the columns'' canonical text>) (the old row for DELETE; an '
'UPDATE that changes a parameter column needs the token of the old row''s lock too). Otherwise '
'as pgadvisory.fence_check: the token is only the transaction''s setting. Superseded by '
'fence_stamp and fence_check_statement (lockgen fence -upgrade).';

-- 00006's fence_truncate_guard.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadvisory.fence_truncate_guard()
RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_policy text := TG_ARGV[1];
    v_guc    text := NULLIF(pg_catalog.current_setting('pgadvisory.fencing_token', true), '');
    v_lock   bigint;
BEGIN
    IF TG_NARGS < 2 OR TG_ARGV[0] IS NULL OR v_policy IS NULL OR v_policy NOT IN ('strict', 'permissive') THEN
        RAISE EXCEPTION 'pgadvisory: fence_truncate_guard on %.% needs the arguments of the table''s fence trigger',
            TG_TABLE_SCHEMA, TG_TABLE_NAME USING ERRCODE = '22023';
    END IF;
    IF v_guc IS NULL AND v_policy = 'permissive' THEN
        RETURN NULL;
    END IF;
    IF TG_NARGS > 2 THEN
        -- Parameterized: one token cannot speak for every lock's rows.
        RAISE EXCEPTION 'pgadvisory: TRUNCATE of %.% is not allowed: the table is fenced by the parameterized lock %; DELETE rows instead',
            TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_ARGV[0]
            USING ERRCODE = 'LF003';
    END IF;
    v_lock := TG_ARGV[0]::bigint;
    IF v_guc IS NULL THEN
        RAISE EXCEPTION 'pgadvisory: TRUNCATE on %.% carries no fencing token (lock %): take the lock with pgadvisory.WithFencing() (fencing: true in locks.yaml) and truncate through its transaction, or carry a holder''s token with pgadvisory.RunFenced or SetFencingToken', TG_TABLE_SCHEMA, TG_TABLE_NAME, v_lock
            USING ERRCODE = 'LF002',
                  HINT = 'A write''s token is the transaction-local setting pgadvisory.fencing_token (set_config(''pgadvisory.fencing_token'', token, true)).';
    END IF;
    PERFORM pgadvisory.fence_require_current(v_lock, v_guc::bigint, NULL, NULL);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.fence_truncate_guard() IS
'lockgen fencing TRUNCATE guard: BEFORE TRUNCATE FOR EACH STATEMENT with the arguments of the '
'table''s fence_check or fence_check_param trigger. Without pgadvisory.fencing_token set, '
'permissive allows the TRUNCATE and strict raises LF002. With it, a plain lock needs the published '
'token (else LF001) and a parameterized lock refuses with LF003: delete rows instead.';

-- 00006's fence_stamp.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadvisory.fence_stamp()
RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_policy text   := TG_ARGV[1];
    v_tok    bigint := NULLIF(pg_catalog.current_setting('pgadvisory.fencing_token', true), '')::bigint;
BEGIN
    IF TG_NARGS < 2 OR TG_ARGV[0] IS NULL OR v_policy IS NULL OR v_policy NOT IN ('strict', 'permissive') THEN
        RAISE EXCEPTION 'pgadvisory: fence_stamp on %.% needs the arguments (lock, ''strict'' or ''permissive'', parameter column, ...)',
            TG_TABLE_SCHEMA, TG_TABLE_NAME USING ERRCODE = '22023';
    END IF;
    IF v_tok IS NULL THEN
        IF v_policy = 'strict' THEN
            RAISE EXCEPTION 'pgadvisory: % on %.% carries no fencing token (lock %): take the lock with pgadvisory.WithFencing() (fencing: true in locks.yaml) and write through its transaction, or carry a holder''s token with pgadvisory.RunFenced or SetFencingToken', TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_ARGV[0]
                USING ERRCODE = 'LF002',
                      HINT = 'A write''s token is the transaction-local setting pgadvisory.fencing_token (set_config(''pgadvisory.fencing_token'', token, true)), never the fencing_token column, which is only a stamp.';
        END IF;
    ELSIF TG_OP = 'UPDATE' AND OLD.fencing_token IS NOT NULL AND v_tok < OLD.fencing_token THEN
        RAISE EXCEPTION 'pgadvisory: stale fencing token %: the row of %.% already carries token % (lock %)',
            v_tok, TG_TABLE_SCHEMA, TG_TABLE_NAME, OLD.fencing_token, TG_ARGV[0]
            USING ERRCODE = 'LF001';
    END IF;
    NEW.fencing_token := v_tok;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.fence_stamp() IS
'lockgen fencing row trigger: BEFORE INSERT OR UPDATE FOR EACH ROW WHEN (NEW.fencing_token IS '
'DISTINCT FROM NULLIF(pg_catalog.current_setting(''pgadvisory.fencing_token'', true), '''')::bigint) '
'EXECUTE FUNCTION pgadvisory.fence_stamp(<lock>, ''strict''|''permissive''[, <column>, ...]). '
'Stamps the row with the transaction''s token (NULL without one); raises LF002 for a write '
'without a token under strict and LF001 for a token older than the row''s stamp. The per-lock '
'check is pgadvisory.fence_check_statement''s.';

-- 00006's fence_check_statement.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadvisory.fence_check_statement()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
-- Runs as its owner, so that it can read the fence rows FOR SHARE (writers
-- need no privilege on pgadvisory.fence); it reads nothing but the
-- statement's transition tables and the fence rows of their locks.
DECLARE
    v_lock   text   := TG_ARGV[0];
    v_policy text   := TG_ARGV[1];
    v_tok    bigint := NULLIF(pg_catalog.current_setting('pgadvisory.fencing_token', true), '')::bigint;
    v_rows   boolean;
    v_bad    boolean;
    v_stamp  bigint;
    v_cur    bigint;
    v_id     bigint;
    v_cols   text;
    v_params text[];
    v_sql    text;
BEGIN
    IF TG_NARGS < 2 OR v_lock IS NULL OR v_policy IS NULL OR v_policy NOT IN ('strict', 'permissive')
       OR TG_LEVEL <> 'STATEMENT' OR TG_WHEN <> 'AFTER' THEN
        RAISE EXCEPTION 'pgadvisory: fence_check_statement on %.% is an AFTER ... FOR EACH STATEMENT trigger with the arguments (lock, ''strict'' or ''permissive'', parameter column, ...)',
            TG_TABLE_SCHEMA, TG_TABLE_NAME USING ERRCODE = '22023';
    END IF;
    -- 1. A statement that wrote no row changed nothing. Otherwise the rows
    --    as written must carry the transaction's token as their stamp (a
    --    trigger that ran after lockgen's row trigger could change it).
    IF TG_OP = 'DELETE' THEN
        SELECT EXISTS (SELECT FROM fence_old) INTO v_rows;
    ELSE
        SELECT true, n.fencing_token, n.fencing_token IS DISTINCT FROM v_tok INTO v_rows, v_stamp, v_bad
        FROM fence_new AS n ORDER BY 3 DESC LIMIT 1;
    END IF;
    IF NOT COALESCE(v_rows, false) THEN
        RETURN NULL;
    END IF;
    -- 2. No token: strict refuses; permissive lets the rows pass, stamped NULL.
    IF v_tok IS NULL AND v_policy = 'strict' THEN
        RAISE EXCEPTION 'pgadvisory: % on %.% carries no fencing token (lock %): take the lock with pgadvisory.WithFencing() (fencing: true in locks.yaml) and write through its transaction, or carry a holder''s token with pgadvisory.RunFenced or SetFencingToken', TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME, v_lock
            USING ERRCODE = 'LF002',
                  HINT = 'A write''s token is the transaction-local setting pgadvisory.fencing_token (set_config(''pgadvisory.fencing_token'', token, true)), never the fencing_token column, which is only a stamp.';
    END IF;
    IF v_bad THEN
        RAISE EXCEPTION 'pgadvisory: % on %.% wrote a row stamped % although the write carries token %: a trigger that runs after zz_pgadvisory_fence changed fencing_token (lock %)',
            TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME, COALESCE(v_stamp::text, 'NULL'), COALESCE(v_tok::text, 'none'), v_lock
            USING ERRCODE = 'LF001';
    END IF;
    IF v_tok IS NULL THEN
        RETURN NULL;
    END IF;
    -- 3. Once per distinct lock of the rows: the token must be the lock's
    --    published token, whose fence row stays locked FOR SHARE to the end
    --    of the transaction (the next holder's publish waits for this write).
    IF TG_NARGS = 2 THEN
        v_id := v_lock::bigint;
        SELECT f.token INTO v_cur FROM pgadvisory.fence AS f WHERE f.lock_id = v_id FOR SHARE;
        IF v_cur IS DISTINCT FROM v_tok THEN
            RAISE EXCEPTION 'pgadvisory: stale fencing token % for lock % (current token %)',
                v_tok, v_id, COALESCE(v_cur::text, 'none: never published')
                USING ERRCODE = 'LF001',
                      HINT = 'Another holder took the lock after this token was issued: stop writing.';
        END IF;
        RETURN NULL;
    END IF;
    SELECT pg_catalog.string_agg(pg_catalog.format('%I::text', c), ', ') INTO v_cols
    FROM pg_catalog.unnest(TG_ARGV[2:TG_NARGS - 1]) AS c;
    -- The parameter tuples of the written rows; an old row that moves to
    -- another lock (UPDATE) or goes (DELETE) needs its lock's token too. The
    -- new rows' tuples are marked so that a NULL parameter there is an error.
    v_sql := CASE TG_OP
        WHEN 'INSERT' THEN pg_catalog.format('SELECT true, ARRAY[%s] FROM fence_new', v_cols)
        WHEN 'DELETE' THEN pg_catalog.format('SELECT false, ARRAY[%s] FROM fence_old', v_cols)
        ELSE pg_catalog.format('SELECT true, ARRAY[%1$s] FROM fence_new UNION SELECT false, ARRAY[%1$s] FROM fence_old', v_cols)
    END;
    v_sql := 'SELECT ps FROM (SELECT DISTINCT ON (ps) ps, isnew FROM (' || v_sql || ') AS r(isnew, ps) '
          || 'ORDER BY ps, isnew DESC) AS d WHERE isnew OR pg_catalog.array_position(ps, NULL) IS NULL ORDER BY ps';
    FOR v_params IN EXECUTE v_sql LOOP
        IF pg_catalog.array_position(v_params, NULL) IS NOT NULL THEN
            RAISE EXCEPTION 'pgadvisory: % on %.%: column % is NULL, but it is parameter % of lock %',
                TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_ARGV[1 + pg_catalog.array_position(v_params, NULL)],
                pg_catalog.array_position(v_params, NULL), v_lock USING ERRCODE = '23502';
        END IF;
        PERFORM pgadvisory.fence_require_current(pgadvisory.lock_id(v_lock, VARIADIC v_params), v_tok, v_lock, v_params);
    END LOOP;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.fence_check_statement() IS
'lockgen fencing statement trigger: AFTER INSERT (REFERENCING NEW TABLE AS fence_new), AFTER '
'UPDATE (OLD TABLE AS fence_old NEW TABLE AS fence_new) and AFTER DELETE (OLD TABLE AS '
'fence_old) FOR EACH STATEMENT EXECUTE FUNCTION pgadvisory.fence_check_statement(<lock ID or '
'name>, ''strict''|''permissive''[, <parameter column>, ...]). For a statement that wrote rows: '
'no token raises LF002 (strict) or passes (permissive); a row whose stamp is not the token '
'raises LF001; each distinct lock of the new and old rows needs the token published '
'(pgadvisory.fence_require_current), else LF001. A NULL parameter in a new row raises 23502. '
'SECURITY DEFINER: writers need no privilege on pgadvisory.fence.';

-- 00005's fence_acquire.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadvisory.fence_acquire(
    p_ids bigint[], p_wait boolean, p_lock_timeout text, p_publish_timeout text,
    OUT granted boolean, OUT standby boolean, OUT token bigint)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
-- Every step that can be is a plain assignment or condition (PL/pgSQL's
-- cheap path for simple expressions): this runs in every fenced call.
DECLARE
    v_ids      bigint[] := p_ids;
    v_id       bigint;
    v_token    bigint;
    v_current  bigint;
    v_previous text := pg_catalog.current_setting('lock_timeout');
    v_step     text := 'lock';
    v_set      text;
BEGIN
    granted := false;
    -- A hand-over is pending only when this call grants one.
    v_set := pg_catalog.set_config('pgadvisory.pending', '', false);
    -- A standby's advisory locks exclude nobody on the primary.
    standby := pg_catalog.pg_is_in_recovery();
    IF standby THEN
        RETURN;
    END IF;
    IF pg_catalog.cardinality(v_ids) IS DISTINCT FROM 1 THEN
        SELECT pg_catalog.array_agg(DISTINCT u.id ORDER BY u.id) INTO v_ids
        FROM pg_catalog.unnest(p_ids) AS u(id);
    END IF;
    IF v_ids IS NULL OR pg_catalog.array_position(v_ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'pgadvisory: fence_acquire needs one or more lock IDs, none NULL (got %)', p_ids
            USING ERRCODE = '22023';
    END IF;
    BEGIN
        IF p_wait AND p_lock_timeout IS NOT NULL THEN
            v_set := pg_catalog.set_config('lock_timeout', p_lock_timeout, true);
        END IF;
        -- Ascending order: callers waiting for overlapping sets cannot
        -- deadlock each other.
        FOREACH v_id IN ARRAY v_ids LOOP
            IF p_wait THEN
                PERFORM pg_catalog.pg_advisory_lock(v_id);
            ELSIF NOT pg_catalog.pg_try_advisory_lock(v_id) THEN
                PERFORM pg_catalog.pg_advisory_unlock(l.id)
                FROM pg_catalog.unnest(v_ids) AS l(id) WHERE l.id < v_id;
                v_set := pg_catalog.set_config('lock_timeout', v_previous, true);
                RETURN;
            END IF;
        END LOOP;

        -- Granted: draw the token (the sequence never re-issues a value) and
        -- publish it, waiting at most p_publish_timeout for writers still
        -- holding a fence row FOR SHARE with the previous token.
        v_step := 'publish';
        v_set := pg_catalog.set_config('lock_timeout', p_publish_timeout, true);
        v_token := pg_catalog.nextval('pgadvisory.fencing_token_seq');
        FOREACH v_id IN ARRAY v_ids LOOP
            INSERT INTO pgadvisory.fence AS f (lock_id, token) VALUES (v_id, v_token)
            ON CONFLICT (lock_id) DO UPDATE SET token = excluded.token, published_at = pg_catalog.now()
            WHERE f.token < excluded.token;
            IF NOT FOUND THEN
                -- This session holds the lock, so no other holder can have
                -- published since: the sequence itself went backwards.
                SELECT f.token INTO v_current FROM pgadvisory.fence AS f WHERE f.lock_id = v_id;
                RAISE EXCEPTION 'pgadvisory: the fencing token sequence is behind: it issued token % for lock %, but token % is already published; the sequence went backwards (a restored backup, an asynchronous failover)',
                    v_token, v_id, v_current
                    USING ERRCODE = 'LF004',
                          HINT = pg_catalog.format('Advance it past every published token: SELECT setval(''pgadvisory.fencing_token_seq'', %s);',
                                     (SELECT pg_catalog.max(f.token) FROM pgadvisory.fence AS f));
            END IF;
        END LOOP;
        v_set := pg_catalog.set_config('lock_timeout', v_previous, true);
        -- The COMMIT that follows must be durable before fn may run, whatever
        -- the server, database, role or session says.
        IF pg_catalog.current_setting('synchronous_commit') = 'off' THEN
            v_set := pg_catalog.set_config('synchronous_commit', 'on', true);
        END IF;
        v_set := pg_catalog.set_config('pgadvisory.pending',
            v_token::text || ':' || pg_catalog.array_to_string(v_ids, ','), false);
        -- Deferred triggers of this transaction fire here, where an error
        -- still unlocks, and not in the COMMIT.
        SET CONSTRAINTS ALL IMMEDIATE;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        -- Session locks survive the rollback of this block: release every
        -- one this backend holds on the IDs (the transaction holds none).
        PERFORM pg_catalog.pg_advisory_unlock(l.id)
        FROM pg_catalog.pg_locks AS k
        JOIN pg_catalog.unnest(v_ids) AS l(id)
          ON ((k.classid::bigint << 32) | k.objid::bigint) = l.id
        WHERE k.locktype = 'advisory' AND k.objsubid = 1 AND k.granted
          AND k.pid = pg_catalog.pg_backend_pid()
          AND k.database = (SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname = pg_catalog.current_database());
        IF v_step = 'publish' AND SQLSTATE = '55P03' THEN
            RAISE EXCEPTION 'pgadvisory: publishing fencing token % for lock(s) % waited % for writes still in flight with the previous token',
                v_token, pg_catalog.array_to_string(v_ids, ', '), p_publish_timeout
                USING ERRCODE = '55P03',
                      HINT = 'A transaction writing with the previous holder''s token is still open (it holds the fence row FOR SHARE): the lock was not taken; retry later.';
        END IF;
        RAISE;
    END;
    granted := true;
    token := v_token;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.fence_acquire(bigint[], boolean, text, text) IS
'lockgen fencing: the first half of a fenced acquisition. Takes session-level advisory locks on '
'p_ids in ascending order (pg_try_advisory_lock, or with p_wait pg_advisory_lock under '
'lock_timeout p_lock_timeout when not NULL); on a hot standby returns standby at once, and when '
'a lock is held elsewhere releases what it took and returns granted = false. Granted: draws a '
'token from pgadvisory.fencing_token_seq, publishes it in pgadvisory.fence for every ID (waiting '
'at most p_publish_timeout for writers of the previous token: 55P03; LF004 when a newer token is '
'already published, i.e. the sequence went backwards), forces synchronous_commit = on for the '
'transaction when it is off, and leaves the hand-over in the session setting pgadvisory.pending. '
'The caller commits (COMMIT AND CHAIN) and calls pgadvisory.fence_handover() in the chained '
'transaction. On any error it releases the session locks it took. SECURITY DEFINER.';

-- 00007's leader_elect.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadvisory.leader_elect(
    p_lock_id bigint, p_holder text, p_publish_timeout text,
    OUT term bigint, OUT elected_at timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_pid      integer := pg_catalog.pg_backend_pid();
    v_previous text := pg_catalog.current_setting('lock_timeout');
    v_current  bigint;
    v_set      text;
BEGIN
    IF p_lock_id IS NULL OR p_holder IS NULL OR p_publish_timeout IS NULL THEN
        RAISE EXCEPTION 'pgadvisory: leader_elect needs a lock ID, a holder and a publish timeout (got %, %, %)',
            p_lock_id, p_holder, p_publish_timeout
            USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.pg_is_in_recovery() THEN
        RAISE EXCEPTION 'pgadvisory: leader_elect on a hot standby: its advisory locks exclude nobody on the primary'
            USING ERRCODE = '25006';
    END IF;
    -- The caller must hold the lock at session level, exclusively, now.
    -- pg_locks would say so, but reading it costs a scan of the whole lock
    -- table (every backend's locks) in every election. Instead: a
    -- transaction-level hold (granted at once to a session that holds the
    -- lock, refused while another session holds it), then the session-level
    -- unlock, which reports whether there was an exclusive session-level
    -- hold to release (the transaction-level hold keeps the lock meanwhile:
    -- it is never free), then the session-level hold again.
    IF NOT pg_catalog.pg_try_advisory_xact_lock(p_lock_id)
       OR NOT pg_catalog.pg_advisory_unlock(p_lock_id) THEN
        RAISE EXCEPTION 'pgadvisory: leader_elect: this session (pid %) does not hold the advisory lock % at session level in exclusive mode',
            v_pid, p_lock_id
            USING ERRCODE = '55000',
                  HINT = 'Take the lock first (pg_advisory_lock), on the connection that calls leader_elect.';
    END IF;
    PERFORM pg_catalog.pg_advisory_lock(p_lock_id);

    -- As fence_acquire's publish: the next token, over the previous one,
    -- waiting at most p_publish_timeout for writers that hold the fence row
    -- FOR SHARE with the previous token (then 55P03, lock_not_available).
    -- UPDATE first: after the first election of a lock its rows exist, and
    -- a plain UPDATE costs less than INSERT … ON CONFLICT. No exception
    -- block (a subtransaction in every election) to reword 55P03: the
    -- runtime reports it as the publish step's timeout.
    v_set := pg_catalog.set_config('lock_timeout', p_publish_timeout, true);
    term := pg_catalog.nextval('pgadvisory.fencing_token_seq');
    UPDATE pgadvisory.fence AS f SET token = term, published_at = pg_catalog.now()
    WHERE f.lock_id = p_lock_id AND f.token < term;
    IF NOT FOUND THEN
        INSERT INTO pgadvisory.fence AS f (lock_id, token) VALUES (p_lock_id, term)
        ON CONFLICT (lock_id) DO UPDATE SET token = excluded.token, published_at = pg_catalog.now()
        WHERE f.token < excluded.token;
    END IF;
    IF NOT FOUND THEN
        SELECT f.token INTO v_current FROM pgadvisory.fence AS f WHERE f.lock_id = p_lock_id;
        RAISE EXCEPTION 'pgadvisory: the fencing token sequence is behind: it issued term % for lock %, but token % is already published; the sequence went backwards (a restored backup, an asynchronous failover)',
            term, p_lock_id, v_current
            USING ERRCODE = 'LF004',
                  HINT = pg_catalog.format('Advance it past every published token: SELECT setval(''pgadvisory.fencing_token_seq'', %s);',
                             (SELECT pg_catalog.max(f.token) FROM pgadvisory.fence AS f));
    END IF;
    v_set := pg_catalog.set_config('lock_timeout', v_previous, true);

    elected_at := pg_catalog.now();
    UPDATE pgadvisory.leader AS l SET holder = p_holder, term = leader_elect.term, pid = v_pid, elected_at = leader_elect.elected_at
    WHERE l.lock_id = p_lock_id;
    IF NOT FOUND THEN
        INSERT INTO pgadvisory.leader AS l (lock_id, holder, term, pid, elected_at)
        VALUES (p_lock_id, p_holder, term, v_pid, elected_at)
        ON CONFLICT (lock_id) DO UPDATE
        SET holder = excluded.holder, term = excluded.term, pid = excluded.pid, elected_at = excluded.elected_at;
    END IF;

    -- The commit of this statement's transaction must be durable before the
    -- leader acts, whatever the server, database, role or session says.
    IF pg_catalog.current_setting('synchronous_commit') = 'off' THEN
        v_set := pg_catalog.set_config('synchronous_commit', 'on', true);
    END IF;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.leader_elect(bigint, text, text) IS
'lockgen leader election: for a caller that holds the advisory lock p_lock_id at session level in '
'exclusive mode (else 55000), draws a term from pgadvisory.fencing_token_seq, publishes it in pgadvisory.fence '
'as a fenced acquisition does (55P03 after p_publish_timeout while writers of the previous token '
'are in flight; LF004 when the sequence is behind), records the leader in pgadvisory.leader and '
'forces synchronous_commit = on for the transaction. SECURITY DEFINER.';

-- 00004's run_once_finish.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadvisory.run_once_finish()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE pgadvisory.run_once SET finished_at = pg_catalog.clock_timestamp()
    WHERE lock_id = NEW.lock_id AND window_key = NEW.window_key;
    RETURN NULL;
END $$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.run_once_finish() IS
'lockgen run-once ledger: sets finished_at of a new row when its transaction commits '
'(deferred constraint trigger run_once_finish).';

DROP FUNCTION pgadvisory.fence_advance(bigint);
DROP FUNCTION pgadvisory.fence_unregister(regclass);
DROP FUNCTION pgadvisory.fence_register(regclass, text, text, text[]);
DROP FUNCTION pgadvisory.fence_table_verify(oid, text, text[], boolean);
DROP TABLE pgadvisory.fenced_table;
DROP FUNCTION pgadvisory.fenced_table_sync();
-- 00002's fence table: rows of locks that never published go.
DELETE FROM pgadvisory.fence WHERE token IS NULL;
ALTER TABLE pgadvisory.fence
    DROP COLUMN fenced_strict,
    DROP COLUMN fenced_permissive,
    ALTER COLUMN published_at SET NOT NULL,
    ALTER COLUMN token SET NOT NULL;
COMMENT ON TABLE pgadvisory.fence IS
'lockgen fencing: the published (current) token per advisory-lock ID. A holder publishes with '
'INSERT .. ON CONFLICT (lock_id) DO UPDATE .. WHERE fence.token < excluded.token; the fence '
'triggers accept only writes carrying this token and read the row FOR SHARE, so a publish waits '
'for writes still in flight with the previous token.';
