-- lockgen fencing tokens and the run-once ledger (see pgadvisory's fencing
-- documentation and the design notes, reliability.md §2).
--
-- A lock holder draws a token from pgadvisory.fencing_token_seq in the
-- transaction that takes the lock and publishes it, in its own committed
-- statement, as the lock's row in pgadvisory.fence:
--
--   INSERT INTO pgadvisory.fence AS f (lock_id, token) VALUES ($1, $2)
--   ON CONFLICT (lock_id) DO UPDATE SET token = excluded.token, published_at = now()
--   WHERE f.token < excluded.token;              -- 0 rows: a newer holder published
--
-- Tables protected by the lock get a fencing_token bigint column and a BEFORE
-- INSERT OR UPDATE OR DELETE FOR EACH ROW trigger (lockgen fence generates the
-- migration): a write is accepted only if the token it carries is the lock's
-- published token. A write carries the transaction-local setting
-- pgadvisory.fencing_token
--
--   SELECT set_config('pgadvisory.fencing_token', '<token>', true);
--
-- or, without it, the row's fencing_token column (an UPDATE that does not set
-- the column carries the token already on the row). Accepted rows are stamped
-- with the token.
--
-- Errors (all messages start with "pgadvisory: "):
--   LF001  stale fencing token: the carried token is not the lock's published
--          token, or is older than the token already on the row
--   LF002  missing fencing token: the write carries none and the policy is strict
--   LF003  TRUNCATE refused: the table is fenced by a parameterized lock
--
-- The per-lock check reads the fence row FOR SHARE: writers with the same
-- token do not block each other, and the next holder's publish (which updates
-- the row) waits until every write in flight with the old token has ended.
--
-- Privileges: writers of a fenced table need SELECT and UPDATE on
-- pgadvisory.fence (FOR SHARE needs UPDATE); lock holders need INSERT and
-- UPDATE on it, USAGE on the sequence, and INSERT and SELECT on run_once.
-- The migrating role owns everything and grants nothing beyond schema USAGE
-- (granted by 00001).
--
-- Written for PostgreSQL 13 and later; every function and relation is
-- schema-qualified.

-- +goose Up
CREATE SEQUENCE pgadvisory.fencing_token_seq AS bigint;

COMMENT ON SEQUENCE pgadvisory.fencing_token_seq IS
'lockgen fencing tokens, drawn with nextval in the transaction that takes the lock. A sequence '
'is not transactional: a token is never issued twice, even when the transaction that drew it '
'aborts, so every tenure of every lock has its own token and tokens grow in acquisition order.';

CREATE TABLE pgadvisory.fence (
    lock_id      bigint PRIMARY KEY,
    token        bigint NOT NULL,
    published_at timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE pgadvisory.fence IS
'lockgen fencing: the published (current) token per advisory-lock ID. A holder publishes with '
'INSERT .. ON CONFLICT (lock_id) DO UPDATE .. WHERE fence.token < excluded.token; the fence '
'triggers accept only writes carrying this token and read the row FOR SHARE, so a publish waits '
'for writes still in flight with the previous token.';

CREATE TABLE pgadvisory.run_once (
    lock_id     bigint NOT NULL,
    window_key  text NOT NULL,
    token       bigint,
    holder      text NOT NULL,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL,
    PRIMARY KEY (lock_id, window_key)
);

COMMENT ON TABLE pgadvisory.run_once IS
'lockgen run-once ledger: one row per successful run of a lock in a window (e.g. a day). The '
'row is written in the lock transaction, so it commits with the run''s work; the primary key '
'makes a second successful run of the same lock and window impossible.';

-- pgadvisory.fence_require_current raises LF001 unless p_token is the
-- published token of the lock p_lock, and keeps its fence row locked FOR
-- SHARE until the end of the transaction. p_name and p_params only describe
-- the lock in the error message (NULL p_name: a plain lock).
-- +goose StatementBegin
CREATE FUNCTION pgadvisory.fence_require_current(p_lock bigint, p_token bigint, p_name text, p_params text[])
RETURNS void
LANGUAGE plpgsql
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
'the message.';

-- +goose StatementBegin
CREATE FUNCTION pgadvisory.fence_check()
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

-- +goose StatementBegin
CREATE FUNCTION pgadvisory.fence_check_param()
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
CREATE FUNCTION pgadvisory.fence_truncate_guard()
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

COMMENT ON FUNCTION pgadvisory.fence_truncate_guard() IS
'lockgen fencing TRUNCATE guard: BEFORE TRUNCATE FOR EACH STATEMENT with the arguments of the '
'table''s fence_check or fence_check_param trigger. Without pgadvisory.fencing_token set, '
'permissive allows the TRUNCATE and strict raises LF002. With it, a plain lock needs the published '
'token (else LF001) and a parameterized lock refuses with LF003: delete rows instead.';

-- +goose Down
-- Without CASCADE: a table that still has a fence trigger makes Down fail;
-- drop its fencing migration first.
DROP FUNCTION pgadvisory.fence_truncate_guard();
DROP FUNCTION pgadvisory.fence_check_param();
DROP FUNCTION pgadvisory.fence_check();
DROP FUNCTION pgadvisory.fence_require_current(bigint, bigint, text, text[]);
DROP TABLE pgadvisory.run_once;
DROP TABLE pgadvisory.fence;
DROP SEQUENCE pgadvisory.fencing_token_seq;
