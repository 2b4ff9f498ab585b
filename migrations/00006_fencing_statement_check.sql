-- lockgen fencing, take 2: the trigger functions of a fenced table's current
-- layout (lockgen fence writes the migration that uses them), and 00002's
-- trigger functions made to read the token the same way.
--
-- The token a write carries is only what the writer set for its
-- transaction: the transaction-local setting pgadvisory.fencing_token (set
-- by the lock transaction's pgadvisory.fence_handover, by
-- pgadvisory.SetFencingToken or RunFenced). The row's fencing_token column
-- is a stamp the guard writes, never a carrier: a value the writer puts
-- there does not count.
--
-- A fenced table (lockgen fence) has:
--
--   fencing_token bigint DEFAULT NULLIF(current_setting('pgadvisory.fencing_token', true), '')::bigint
--     stamps inserted rows, without a trigger call per row;
--   zz_pgadvisory_fence: BEFORE INSERT OR UPDATE FOR EACH ROW
--     WHEN (NEW.fencing_token IS DISTINCT FROM <the setting>)
--     EXECUTE FUNCTION pgadvisory.fence_stamp(<lock>, <policy>[, <columns>])
--     fires only when a row's stamp differs from the transaction's token
--     (the writer set the column, or an UPDATE kept an older stamp): it
--     re-stamps the row with the token (NULL without one), raises LF002 for
--     a write without a token under strict, and LF001 when the token is
--     older than the row's stamp;
--   zz_pgadvisory_fence_insert, _update, _delete: AFTER INSERT / UPDATE /
--     DELETE FOR EACH STATEMENT with the transition tables fence_new and
--     fence_old, EXECUTE FUNCTION pgadvisory.fence_check_statement(<lock>,
--     <policy>[, <columns>]): they see the rows as written, after every
--     BEFORE trigger whatever its name, and check once per statement and
--     distinct lock;
--   zz_pgadvisory_fence_truncate: BEFORE TRUNCATE FOR EACH STATEMENT
--     EXECUTE FUNCTION pgadvisory.fence_truncate_guard(<same arguments>).
--
-- <lock> is the lock's ID for a plain lock, its name for a parameterized
-- one, whose parameters are the listed columns' text (col::text is the
-- canonical text for smallint, integer, bigint, uuid, boolean, text and
-- varchar), each row fenced by pgadvisory.lock_id(name, VARIADIC columns).
--
-- fence_check_statement, for a statement that wrote at least one row:
--   no token: strict raises LF002; permissive lets the rows pass, stamped
--   NULL;
--   every written row's stamp must be the transaction's token (a later
--   trigger that changed fencing_token: LF001);
--   with a token: for each distinct lock of the rows (the new rows, and for
--   UPDATE and DELETE the old ones: a row that moves to another lock needs
--   both), the token must be the lock's published token, whose fence row it
--   keeps FOR SHARE to the end of the transaction (so the next holder's
--   publish waits for this write), else LF001. A parameter column that is NULL in a written
--   row raises 23502; an old row with a NULL parameter belonged to no lock.
--
-- The 00002 functions fence_check and fence_check_param (the row triggers
-- of tables fenced before this migration) are replaced so that their token
-- too is only the transaction's setting: a write without it is LF002 under
-- strict and passes under permissive (stamped NULL), whatever the row's
-- stamp. Their per-row check stays as it was (BEFORE ROW, so a user trigger
-- that sorts after it can still change the row after the check, and
-- TRUNCATE of a partition bypasses the guard): move such tables to the
-- current layout with lockgen fence -upgrade. Down restores 00002's
-- versions.
--
-- Errors (messages start with "pgadvisory: "): LF001 stale token, LF002
-- missing token, LF003 TRUNCATE of a table fenced by a parameterized lock.
-- The hint of LF002 says how a write gets a token.
--
-- Privileges: writers need none on lockgen's tables: fence_check_statement
-- runs as its owner (SECURITY DEFINER, search_path fixed; it reads only the
-- statement's transition tables and the fence rows of their locks), and so
-- does the per-lock check of 00002's functions (see 00005). EXECUTE on the
-- trigger functions stays granted to PUBLIC (see 00005 for what that
-- allows).
--
-- Written for PostgreSQL 13 and later; every function and relation is
-- schema-qualified.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION pgadvisory.fence_stamp()
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

-- +goose StatementBegin
CREATE FUNCTION pgadvisory.fence_check_statement()
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

-- 00002's row triggers: the token is only the transaction's setting.
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

-- +goose Down
-- 00002's versions of its trigger functions.
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
        RAISE EXCEPTION 'pgadvisory: TRUNCATE on %.% carries no fencing token (lock %)', TG_TABLE_SCHEMA, TG_TABLE_NAME, v_lock
            USING ERRCODE = 'LF002',
                  HINT = 'Set pgadvisory.fencing_token in the transaction (set_config(''pgadvisory.fencing_token'', token, true)).';
    END IF;
    PERFORM pgadvisory.fence_require_current(v_lock, v_guc::bigint, NULL, NULL);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadvisory.fence_check_param()
RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_name   text := TG_ARGV[0];
    v_policy text := TG_ARGV[1];
    v_guc    text := NULLIF(pg_catalog.current_setting('pgadvisory.fencing_token', true), '');
    v_tok    bigint;
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
    -- 1. The token, as in fence_check.
    IF v_guc IS NOT NULL THEN
        v_tok := v_guc::bigint;
    ELSIF TG_OP <> 'DELETE' THEN
        v_tok := NEW.fencing_token;
    END IF;
    IF v_tok IS NULL THEN
        IF v_policy = 'permissive' THEN
            IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
            RETURN NEW;
        END IF;
        RAISE EXCEPTION 'pgadvisory: % on %.% carries no fencing token (lock %)', TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME, v_name
            USING ERRCODE = 'LF002',
                  HINT = 'Write through the lock transaction, or set pgadvisory.fencing_token (set_config(''pgadvisory.fencing_token'', token, true)) or the fencing_token column.';
    END IF;
    -- 2. Per row, as in fence_check.
    IF TG_OP <> 'INSERT' AND OLD.fencing_token IS NOT NULL AND v_tok < OLD.fencing_token THEN
        RAISE EXCEPTION 'pgadvisory: stale fencing token %: the row of %.% already carries token % (lock %)',
            v_tok, TG_TABLE_SCHEMA, TG_TABLE_NAME, OLD.fencing_token, v_name
            USING ERRCODE = 'LF001';
    END IF;
    -- 3. The row's lock: the parameters are the columns' canonical text
    --    (to_jsonb gives bigint in decimal, uuid lowercase hyphenated, boolean
    --    true/false and text as is). DELETE uses the old row.
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
    -- An UPDATE that moves the row to another lock's rows (changes a
    -- parameter column) needs the token of both locks.
    IF TG_OP = 'UPDATE' THEN
        v_oldrow := pg_catalog.to_jsonb(OLD);
        v_oldps := pg_catalog.array_fill(NULL::text, ARRAY[TG_NARGS - 2]);
        FOR i IN 2 .. TG_NARGS - 1 LOOP
            v_oldps[i - 1] := v_oldrow ->> TG_ARGV[i];
        END LOOP;
        IF v_oldps IS DISTINCT FROM v_params THEN
            IF pg_catalog.array_position(v_oldps, NULL) IS NOT NULL THEN
                -- The old row belonged to no lock (written before fencing).
                NULL;
            ELSE
                PERFORM pgadvisory.fence_require_current(pgadvisory.lock_id(v_name, VARIADIC v_oldps), v_tok, v_name, v_oldps);
            END IF;
        END IF;
    END IF;
    IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
    NEW.fencing_token := v_tok;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.fence_check_param() IS
'lockgen fencing row trigger for a parameterized lock: BEFORE INSERT OR UPDATE OR DELETE FOR EACH '
'ROW EXECUTE FUNCTION pgadvisory.fence_check_param(''<lock name>'', ''strict''|''permissive'', '
'''<column>'', ...), the columns giving the lock''s parameters in declaration order. Each row''s '
'lock ID is pgadvisory.lock_id(name, VARIADIC <the columns'' canonical text>) (the old row for '
'DELETE; an UPDATE that changes a parameter column needs the token of the old row''s lock too). '
'Otherwise as pgadvisory.fence_check: no token raises LF002 (strict) or passes (permissive); a '
'stale token raises LF001. A parameter column that is NULL raises 23502. Parameter columns must '
'hold canonical text: int64 as smallint, integer or bigint, uuid as uuid, bool as boolean, string '
'as text or varchar.';

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadvisory.fence_check()
RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_lock   bigint := TG_ARGV[0]::bigint;
    v_policy text   := TG_ARGV[1];
    v_guc    text   := NULLIF(pg_catalog.current_setting('pgadvisory.fencing_token', true), '');
    v_tok    bigint;
BEGIN
    IF TG_NARGS <> 2 OR v_lock IS NULL OR v_policy IS NULL OR v_policy NOT IN ('strict', 'permissive') THEN
        RAISE EXCEPTION 'pgadvisory: fence_check on %.% needs the arguments (lock ID, ''strict'' or ''permissive'')',
            TG_TABLE_SCHEMA, TG_TABLE_NAME USING ERRCODE = '22023';
    END IF;
    -- 1. The token this write carries: the transaction's setting, else the
    --    row's column (an UPDATE that does not set it inherits OLD's).
    IF v_guc IS NOT NULL THEN
        v_tok := v_guc::bigint;
    ELSIF TG_OP <> 'DELETE' THEN
        v_tok := NEW.fencing_token;
    END IF;
    IF v_tok IS NULL THEN
        IF v_policy = 'permissive' THEN
            IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
            RETURN NEW;
        END IF;
        RAISE EXCEPTION 'pgadvisory: % on %.% carries no fencing token (lock %)', TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME, v_lock
            USING ERRCODE = 'LF002',
                  HINT = 'Write through the lock transaction, or set pgadvisory.fencing_token (set_config(''pgadvisory.fencing_token'', token, true)) or the fencing_token column.';
    END IF;
    -- 2. Per row: never back to an older token (the row lock orders this).
    IF TG_OP <> 'INSERT' AND OLD.fencing_token IS NOT NULL AND v_tok < OLD.fencing_token THEN
        RAISE EXCEPTION 'pgadvisory: stale fencing token %: the row of %.% already carries token % (lock %)',
            v_tok, TG_TABLE_SCHEMA, TG_TABLE_NAME, OLD.fencing_token, v_lock
            USING ERRCODE = 'LF001';
    END IF;
    -- 3. Per lock: only the published token may write.
    PERFORM pgadvisory.fence_require_current(v_lock, v_tok, NULL, NULL);
    IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
    NEW.fencing_token := v_tok;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.fence_check() IS
'lockgen fencing row trigger for a plain lock: BEFORE INSERT OR UPDATE OR DELETE FOR EACH ROW '
'EXECUTE FUNCTION pgadvisory.fence_check(''<lock ID>'', ''strict''|''permissive''). The write''s '
'token is the transaction-local setting pgadvisory.fencing_token if set and not empty, else '
'NEW.fencing_token (none for DELETE). No token: permissive passes the write untouched, strict '
'raises LF002. A token older than OLD.fencing_token, or not equal to the lock''s published token '
'in pgadvisory.fence (read FOR SHARE), raises LF001. Accepted rows get fencing_token = token.';

DROP FUNCTION pgadvisory.fence_check_statement();
DROP FUNCTION pgadvisory.fence_stamp();
