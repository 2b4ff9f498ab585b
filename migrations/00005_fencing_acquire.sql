-- lockgen fencing, take 2: the fenced acquisition on the lock's own
-- connection, and checks that writers run without privileges on lockgen's
-- tables (see pgadvisory's fencing documentation).
--
-- A fenced call (pgadvisory.WithFencing) sends one message on its lock
-- connection:
--
--   BEGIN ISOLATION LEVEL READ COMMITTED;
--   SELECT granted, standby, token FROM pgadvisory.fence_acquire(ids, wait, lock_timeout, publish_timeout);
--   COMMIT AND CHAIN;
--   SELECT pgadvisory.fence_handover();
--
-- and fn runs in the transaction the COMMIT AND CHAIN began.
--
-- fence_acquire takes SESSION-level advisory locks on the ids (ascending,
-- try or wait), draws a token from pgadvisory.fencing_token_seq, publishes it
-- in pgadvisory.fence for every id, forces synchronous_commit = on for its
-- transaction when the session's setting is off (so the COMMIT that follows
-- makes the publish, and the sequence's advance, durable before fn runs), and
-- records the pending hand-over in the session setting pgadvisory.pending. A
-- COMMIT releases transaction-scoped locks but not session-level ones, so
-- the key is never free between the publish and fn. fence_handover then takes
-- the same locks at transaction level (granted at once: the session holds
-- them), drops the session-level ones, and sets the transaction-local
-- settings pgadvisory.fencing_token (the token fn's writes carry) and
-- pgadvisory.granted = 'on'. From then on the locks end with fn's transaction,
-- as an unfenced call's do.
--
-- fence_acquire never leaves a session lock behind when it fails: an error
-- (or a cancel) after the first lock unlocks what it took and re-raises. A
-- failure later in the message (its COMMIT, the hand-over) can leave session
-- locks on the backend; the runtime then closes the connection, which ends
-- the backend and its locks. fence_acquire fires deferred triggers of its own
-- transaction (SET CONSTRAINTS ALL IMMEDIATE) before it returns, so nothing
-- deferred can make the COMMIT fail after the locks are taken.
--
-- Errors (messages start with "pgadvisory: "):
--   55P03  the publish waited publish_timeout for writes still in flight
--          with the previous token (they hold its fence row FOR SHARE), or
--          WithWait's lock_timeout expired
--   LF004  the sequence is behind a published token: it went backwards (a
--          restored backup, an asynchronous failover); the hint says how to
--          advance it
--
-- Privileges: fence_acquire and fence_require_current run as their owner
-- (SECURITY DEFINER, search_path fixed to pg_catalog, pg_temp), so lock
-- holders and writers need no privilege on pgadvisory.fence or the sequence,
-- and cannot forge or rewind a published token. EXECUTE on both stays
-- granted to PUBLIC on purpose: fence_acquire publishes only a fresh token,
-- and only while the caller holds every lock it names (which any role that
-- can connect may take); fence_require_current only reads. A role that can
-- call fence_require_current with the current token can keep a fence row
-- FOR SHARE until its transaction ends, which delays the next holder's
-- publish by at most the publish timeout (then ErrLockTimeout), as any writer
-- with the current token can. To narrow it, REVOKE EXECUTE ... FROM PUBLIC
-- and GRANT it to the application's roles.
--
-- This migration also makes 00002's per-lock check fence_require_current a
-- SECURITY DEFINER function (the trigger functions of 00002 and of 00006
-- call it), so writers of fenced tables no longer need UPDATE on
-- pgadvisory.fence. Down restores 00002's version.
--
-- Written for PostgreSQL 13 and later; every function and relation is
-- schema-qualified.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION pgadvisory.fence_acquire(
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

-- +goose StatementBegin
CREATE FUNCTION pgadvisory.fence_handover()
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

COMMENT ON FUNCTION pgadvisory.fence_handover() IS
'lockgen fencing: the second half of a fenced acquisition, in the transaction that COMMIT AND '
'CHAIN began after pgadvisory.fence_acquire. Takes the pending locks at transaction level, drops '
'their session-level hold, sets the transaction-local settings pgadvisory.fencing_token (the '
'token) and pgadvisory.granted = ''on'', and returns the token. Does nothing (returns NULL) when '
'no hand-over is pending.';

-- The per-lock check of the fence triggers runs as its owner, so writers
-- need no privilege on pgadvisory.fence (FOR SHARE would need UPDATE).
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

-- +goose Down
-- 00002's fence_require_current: the caller's privileges.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadvisory.fence_require_current(p_lock bigint, p_token bigint, p_name text, p_params text[])
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

DROP FUNCTION pgadvisory.fence_handover();
DROP FUNCTION pgadvisory.fence_acquire(bigint[], boolean, text, text);
