-- lockgen waiting without a connection, in arrival order.
--
-- A call that waits for a transaction lock (WithWait) does not wait in the
-- server's lock queue, which holds a connection per waiter: it tries, and
-- when the lock is held it joins the queue of the lock in
-- pgadvisory.waiter, gives its connection back, and tries again when woken
-- (NOTIFY) or at its polling interval. A call on a set of locks (WithLocks)
-- joins the queue of each, with one place.
--
--   * pgadvisory.waiter has one row per lock of a waiting call: the lock,
--     the call's place in the queues (seq, from an identity: the order in
--     which the calls joined, the same in each of a set's queues), its
--     expiry on the database's clock, which each try moves forward, and its
--     mode (shared: a WithShared call). A row whose expiry passed is a
--     waiter that went away (its process died, its link broke): it no
--     longer blocks the queue.
--   * wait_try(lock_ids, seq, ttl_ms) is a waiting call's lock statement,
--     run in the lock transaction. The head of a queue is its live row
--     with the smallest seq. With seq NULL (the call's first try) it takes
--     the locks only when no live waiter is queued for any of them; with
--     the call's seq, only when no live waiter comes before it in any of
--     their queues (wait_ahead); in both cases with
--     pg_try_advisory_xact_lock, all of them or none (wait_take). Since a
--     call's place is the same in every queue it joined, the waiter with
--     the smallest place among those that want a lock is the head of each
--     of its queues: calls on sets that overlap never wait for each other
--     in a circle. Granted, it deletes the call's rows (in the
--     lock transaction: the next waiter becomes the head when the lock is
--     released) and, when another live waiter is queued, sends
--     NOTIFY pgadvisory_wait with 'lock_id:seq' of the next one, for each
--     lock: delivered when the lock
--     transaction commits, that is when the lock is released (a rollback
--     sends nothing; the caller then calls wait_leave). A session lock's
--     try passes p_wake false: its statement's transaction commits at
--     once while the session lock it takes stays held, so a NOTIFY then
--     would wake the next waiter only to find the lock held; the session
--     lock's unlock statement sends it instead. Not granted, it
--     refreshes the call's row (expiry = clock_timestamp() + ttl) or
--     inserts it (seq NULL, or the row was removed as expired), and the
--     caller commits that. It returns (granted, seq, head, next), head
--     telling whether the call is now first in the queue and next the
--     seq its NOTIFY names (NULL: none sent), so that the caller, once
--     committed, wakes that waiter at once when it is in the same process
--     instead of waking every waiter there. On a hot standby it
--     writes nothing and returns (false, seq): the caller refuses the
--     standby.
--   * A holder that did not come through the queue (a call without
--     WithWait, a waiting call's first try that found the queue empty, a
--     session lock, a SQL job) sends no NOTIFY when it releases the lock:
--     it does not know that waiters queued after it took the lock, and
--     finding out would cost every uncontended call. So the head of the
--     queue waits for such a holder on the server: wait_try with the
--     call's seq and p_block_ms > 0, at the head and finding the lock
--     held, waits for it with pg_advisory_xact_lock for at most p_block_ms
--     (lock_timeout, set for that statement only, and never more than half
--     of p_ttl_ms, so that the row, whose refresh is not committed yet,
--     stays live meanwhile, nor than half of statement_timeout when that
--     is set); still not granted, it refreshes the row again, so that its
--     expiry runs from the end of the wait. The server grants it the lock the moment the holder's
--     transaction ends. Only the head does this, so at most one call per
--     lock waits on the server, on one connection. While a holder that
--     came through the queue holds the lock, its row (deleted, not yet
--     committed) still comes first for everyone else: nobody is the head,
--     nobody waits on the server, and its NOTIFY wakes the next one.
--   * Shared calls (wait_try's p_shared) share the lock with each other:
--     a shared call's head is the first live exclusive waiter, and it may
--     take the lock (pg_try_advisory_xact_lock_shared) when no live
--     exclusive waiter is ahead of it, so a run of shared waiters is
--     granted together and an exclusive waiter behind them waits until
--     all of them released, while a shared call that comes after an
--     exclusive waiter waits for it (no writer is starved by readers that
--     keep coming). The wake-ups (wait_wake, not callable by PUBLIC)
--     follow: a granted exclusive call or a wait that ends names the
--     first live waiter; a granted shared call names the first live
--     exclusive waiter, which takes the lock once the last shared holder
--     released. A listening Locker wakes the named waiter when it is its
--     own and all its waiters for the lock otherwise, and a shared call,
--     once granted, wakes its own Locker's waiters: so a run of shared
--     waiters spread over processes is woken by one NOTIFY.
--   * wait_leave(lock_ids, seq) removes a call's rows (a canceled or
--     failed wait) and wakes the head of each queue, when there is one
--     (the same NOTIFY).
--   * fence_wait_try(lock_ids, seq, ttl_ms, block_ms, publish_timeout) is
--     wait_try for a fenced call (WithFencing): the same queue, the same
--     rule for who may take the lock, but what the head runs is the
--     fenced acquisition, pgadvisory.fence_acquire without waiting
--     (session-level lock, token drawn and published), so it returns the
--     token too and, like fence_acquire, must run first in its
--     transaction. The head behind a holder that did not queue waits for
--     it at transaction level first (as wait_try), then fence_acquire
--     takes the lock at session level, re-entrant. Granted, it leaves the
--     caller's row in place: the fenced acquisition commits (COMMIT AND
--     CHAIN) before fn runs, and a row removed in that commit would let
--     the next waiter become the head while the lock is still held. The
--     caller's hand-over transaction, fn's, removes it with wait_leave,
--     whose NOTIFY is delivered when fn's transaction ends, that is when
--     the lock is released; on a rollback the caller calls wait_leave
--     again. A try that joins the queue commits the row within the
--     message, before the caller reads the row's seq: a caller whose
--     wait ends while it reads (ctx) would not know its row. So a new row
--     carries the caller's own random number (p_caller, the column
--     caller), by which it finds and leaves it.
--
-- pgadvisory.waiter is UNLOGGED: its rows live for seconds, and a
-- transaction that writes only them commits without waiting for a WAL
-- flush (a waiter's tries, a granted waiter's lock transaction when fn
-- writes nothing). After a crash or on a promoted standby the table is
-- empty: the waiters join again, at the end, in the order of their next
-- tries.
--
-- An uncontended call never reads the queue: only a waiting call's tries
-- do. Rows of waiters that expired more than a minute ago are removed by
-- the next call that joins the queue of the same lock, without waiting for
-- rows that another transaction has locked (SKIP LOCKED).
--
-- wait_try, wait_leave and fence_wait_try are SECURITY DEFINER (callers
-- need no privilege on pgadvisory.waiter) and executable by PUBLIC, as
-- every waiting call uses them (fence_wait_try publishes only for a caller
-- it grants the lock, as fence_acquire). The pieces they share are
-- functions PUBLIC may not execute, each one decision in one place:
-- wait_check_args (the arguments), wait_ahead (the queue's rule),
-- wait_take (taking the locks, all or none, and the head's wait on the
-- server), wait_join (refreshing a place or joining at the end) and
-- wait_wake (the NOTIFY). Every function pins search_path = pg_catalog, pg_temp,
-- lockgen's names are schema-qualified, operators are written
-- OPERATOR(pg_catalog.op) and casts ::pg_catalog.type.
--
-- Errors (messages start with "pgadvisory: "): 22023 no lock IDs, a NULL
-- one or one twice, or a ttl outside 1ms..1h (or, for fence_wait_try, a
-- NULL publish timeout);
-- 25001 fence_wait_try in a transaction that already wrote; and
-- fence_acquire's own (55P03 publishing, LF004).
--
-- Written for PostgreSQL 13 and later.

-- +goose Up
CREATE UNLOGGED TABLE pgadvisory.waiter (
    lock_id bigint NOT NULL,
    seq     bigint GENERATED ALWAYS AS IDENTITY,
    expires timestamptz NOT NULL,
    shared  boolean NOT NULL DEFAULT false,
    caller  bigint,
    PRIMARY KEY (lock_id, seq)
);

COMMENT ON TABLE pgadvisory.waiter IS
'lockgen waiting calls: one row per lock of each call waiting for transaction locks (a call on a set has '
'one place, the same in each of its locks'' queues), in arrival order (seq), with '
'its expiry on the database''s clock (a waiter that went away blocks no one once it passed) and its mode '
'(shared: a WithShared call). Written only by pgadvisory.wait_try, pgadvisory.fence_wait_try and '
'pgadvisory.wait_leave; readable by any role.';

REVOKE ALL ON TABLE pgadvisory.waiter FROM PUBLIC;
GRANT SELECT ON TABLE pgadvisory.waiter TO PUBLIC;

-- +goose StatementBegin
CREATE FUNCTION pgadvisory.wait_wake(p_lock_id bigint, p_after_shared boolean)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_seq bigint;
BEGIN
    -- Called by wait_try and wait_leave, as their owner, once the caller's
    -- own row is removed (in the same transaction: it is not seen here).
    -- Names (NOTIFY pgadvisory_wait, delivered at commit) the waiter that
    -- may take the lock once this transaction ends: after an exclusive
    -- hold or a wait that ended, the first live waiter; after a shared
    -- hold (p_after_shared), the first live exclusive waiter (shared ones
    -- may take the lock already). A listening Locker wakes the named
    -- waiter when it is its own, and all its waiters for the lock
    -- otherwise; a shared waiter, once granted, wakes its Locker's others.
    -- Returns the waiter named.
    SELECT w.seq INTO v_seq FROM pgadvisory.waiter AS w
     WHERE w.lock_id OPERATOR(pg_catalog.=) p_lock_id
       AND w.expires OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
       AND (NOT p_after_shared OR NOT w.shared)
     ORDER BY w.seq LIMIT 1;
    IF v_seq IS NOT NULL THEN
        PERFORM pg_catalog.pg_notify('pgadvisory_wait',
            p_lock_id::pg_catalog.text OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) v_seq::pg_catalog.text);
    END IF;
    RETURN v_seq;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.wait_wake(bigint, boolean) IS
'lockgen waiting calls: notifies pgadvisory_wait (at commit) naming the waiter of a lock that may take it '
'once the calling transaction ends (see 00011). Called by pgadvisory.wait_try and pgadvisory.wait_leave; '
'not executable by PUBLIC.';

REVOKE EXECUTE ON FUNCTION pgadvisory.wait_wake(bigint, boolean) FROM PUBLIC;

-- +goose StatementBegin
CREATE FUNCTION pgadvisory.wait_check_args(p_caller text, p_lock_ids bigint[], p_ttl_ms bigint)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- The arguments every queue statement needs: lock IDs (one or more,
    -- none NULL, none twice) and a ttl of 1 ms to an hour.
    IF p_lock_ids IS NULL OR pg_catalog.cardinality(p_lock_ids) OPERATOR(pg_catalog.=) 0
       OR pg_catalog.array_position(p_lock_ids, NULL) IS NOT NULL
       OR p_ttl_ms IS NULL OR p_ttl_ms OPERATOR(pg_catalog.<) 1 OR p_ttl_ms OPERATOR(pg_catalog.>) 3600000 THEN
        RAISE EXCEPTION 'pgadvisory: % needs lock IDs (one or more, none NULL) and a ttl of 1 to 3600000 ms (got %, %)',
            p_caller, p_lock_ids, p_ttl_ms
            USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.cardinality(p_lock_ids) OPERATOR(pg_catalog.>) 1
       AND (SELECT pg_catalog.count(DISTINCT u.id) FROM pg_catalog.unnest(p_lock_ids) AS u(id))
           OPERATOR(pg_catalog.<>) pg_catalog.cardinality(p_lock_ids) THEN
        RAISE EXCEPTION 'pgadvisory: % needs lock IDs that differ (got %)', p_caller, p_lock_ids
            USING ERRCODE = '22023';
    END IF;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.wait_check_args(text, bigint[], bigint) IS
'lockgen waiting calls: refuses (22023) lock IDs that are NULL, empty, with a NULL or one twice, and a '
'ttl outside 1 to 3600000 ms, naming the function p_caller. Called by pgadvisory.wait_try and '
'pgadvisory.fence_wait_try; not executable by PUBLIC.';

REVOKE EXECUTE ON FUNCTION pgadvisory.wait_check_args(text, bigint[], bigint) FROM PUBLIC;

-- +goose StatementBegin
CREATE FUNCTION pgadvisory.wait_ahead(p_lock_ids bigint[], p_seq bigint, p_shared boolean)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- The queue's rule: whether a live waiter comes before the call in the
    -- queue of one of its locks. A call that has no place yet (p_seq
    -- NULL) comes after every waiter; a shared call (p_shared) shares the
    -- lock with the shared waiters ahead of it and comes after exclusive
    -- ones only. (PL/pgSQL, whose plans are kept, unlike a SQL function
    -- that is not inlined.)
    RETURN EXISTS (
        SELECT FROM pgadvisory.waiter AS w
         WHERE w.lock_id OPERATOR(pg_catalog.=) ANY (p_lock_ids)
           AND w.expires OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
           AND (NOT p_shared OR NOT w.shared)
           AND (p_seq IS NULL OR w.seq OPERATOR(pg_catalog.<) p_seq));
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.wait_ahead(bigint[], bigint, boolean) IS
'lockgen waiting calls: whether a live waiter comes before the call p_seq (NULL: a call not queued) in '
'the queue of one of its locks (see 00011). Called by pgadvisory.wait_try and pgadvisory.fence_wait_try; '
'not executable by PUBLIC.';

REVOKE EXECUTE ON FUNCTION pgadvisory.wait_ahead(bigint[], bigint, boolean) FROM PUBLIC;

-- +goose StatementBegin
CREATE FUNCTION pgadvisory.wait_take(p_lock_ids bigint[], p_shared boolean, p_block_ms bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id    bigint;
    v_ok    boolean;
    v_wait  bigint;
    v_until timestamptz;
    v_left  bigint;
    v_st    text;
    v_lt    text;
BEGIN
    -- Takes all the locks at transaction level, or none. With p_block_ms
    -- 0, without waiting. Otherwise, while one is held, it waits for that
    -- one alone (pg_advisory_xact_lock under lock_timeout), holding none
    -- of the others, then tries the others again, for at most p_block_ms
    -- in all and never more than half of statement_timeout when that is
    -- set. Locks taken before one that is not granted are given back with
    -- the subtransaction: a call that is not granted holds none of them.
    IF COALESCE(p_block_ms, 0) OPERATOR(pg_catalog.<=) 0
       AND pg_catalog.cardinality(p_lock_ids) OPERATOR(pg_catalog.=) 1 THEN
        IF p_shared THEN
            RETURN pg_catalog.pg_try_advisory_xact_lock_shared(p_lock_ids[1]);
        END IF;
        RETURN pg_catalog.pg_try_advisory_xact_lock(p_lock_ids[1]);
    END IF;
    IF COALESCE(p_block_ms, 0) OPERATOR(pg_catalog.>) 0 THEN
        v_left := p_block_ms;
        v_st := pg_catalog.current_setting('statement_timeout');
        IF v_st OPERATOR(pg_catalog.<>) '0' THEN
            v_left := LEAST(v_left, (pg_catalog.date_part('epoch', v_st::pg_catalog.interval)
                OPERATOR(pg_catalog.*) 500::pg_catalog.float8)::pg_catalog.int8);
        END IF;
        v_until := pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+)
            pg_catalog.make_interval(secs => v_left::pg_catalog.float8 OPERATOR(pg_catalog./) 1000);
        v_lt := pg_catalog.current_setting('lock_timeout');
    END IF;
    LOOP
        BEGIN
            IF v_wait IS NOT NULL THEN
                -- Wait for the lock that was held, alone, under a
                -- lock_timeout that an error's rollback of the
                -- subtransaction undoes, and the grant below.
                v_left := GREATEST(1, (pg_catalog.date_part('epoch', v_until OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp())
                    OPERATOR(pg_catalog.*) 1000::pg_catalog.float8)::pg_catalog.int8);
                PERFORM pg_catalog.set_config('lock_timeout', v_left::pg_catalog.text OPERATOR(pg_catalog.||) 'ms', true);
                IF p_shared THEN
                    PERFORM pg_catalog.pg_advisory_xact_lock_shared(v_wait);
                ELSE
                    PERFORM pg_catalog.pg_advisory_xact_lock(v_wait);
                END IF;
            END IF;
            FOREACH v_id IN ARRAY p_lock_ids LOOP
                IF p_shared THEN
                    v_ok := pg_catalog.pg_try_advisory_xact_lock_shared(v_id);
                ELSE
                    v_ok := pg_catalog.pg_try_advisory_xact_lock(v_id);
                END IF;
                IF NOT v_ok THEN
                    v_wait := v_id;
                    RAISE EXCEPTION USING ERRCODE = 'lock_not_available';
                END IF;
            END LOOP;
            IF v_wait IS NOT NULL THEN
                PERFORM pg_catalog.set_config('lock_timeout', v_lt, true);
            END IF;
            RETURN true;
        EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
            -- Every lock the subtransaction took is given back.
            IF v_until IS NULL OR pg_catalog.clock_timestamp() OPERATOR(pg_catalog.>=) v_until THEN
                RETURN false;
            END IF;
        END;
    END LOOP;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.wait_take(bigint[], boolean, bigint) IS
'lockgen waiting calls: takes all of p_lock_ids at transaction level or none, without waiting, or waiting '
'at most p_block_ms in all (and half of statement_timeout) for holders that did not come through the queue, '
'for one held lock at a time and holding none of the others meanwhile (see 00011). Called by pgadvisory.wait_try and pgadvisory.fence_wait_try; not executable by PUBLIC.';

REVOKE EXECUTE ON FUNCTION pgadvisory.wait_take(bigint[], boolean, bigint) FROM PUBLIC;

-- +goose StatementBegin
CREATE FUNCTION pgadvisory.wait_join(p_lock_ids bigint[], p_seq bigint, p_ttl_ms bigint, p_shared boolean, p_caller bigint)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now     timestamptz := pg_catalog.clock_timestamp();
    v_expires timestamptz;
    v_n       bigint;
    v_seq     bigint;
BEGIN
    -- Refreshes the call's place p_seq (one row per lock, expiring p_ttl_ms
    -- from now) or, when it has none (p_seq NULL) or lost it (a row was
    -- removed as expired), joins the queues at the end: a new place, the
    -- same for each lock, so that calls come in one order in every queue.
    -- Returns the place.
    v_expires := v_now OPERATOR(pg_catalog.+) pg_catalog.make_interval(secs => p_ttl_ms::pg_catalog.float8 OPERATOR(pg_catalog./) 1000);
    IF p_seq IS NOT NULL THEN
        UPDATE pgadvisory.waiter AS w SET expires = v_expires
         WHERE w.lock_id OPERATOR(pg_catalog.=) ANY (p_lock_ids) AND w.seq OPERATOR(pg_catalog.=) p_seq;
        GET DIAGNOSTICS v_n := ROW_COUNT;
        IF v_n OPERATOR(pg_catalog.=) pg_catalog.cardinality(p_lock_ids) THEN
            RETURN p_seq;
        END IF;
        DELETE FROM pgadvisory.waiter AS w -- a place in some of the queues only is no place
         WHERE w.lock_id OPERATOR(pg_catalog.=) ANY (p_lock_ids) AND w.seq OPERATOR(pg_catalog.=) p_seq;
    END IF;
    DELETE FROM pgadvisory.waiter AS w
     WHERE w.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(
        SELECT x.ctid FROM pgadvisory.waiter AS x
         WHERE x.lock_id OPERATOR(pg_catalog.=) ANY (p_lock_ids)
           AND x.expires OPERATOR(pg_catalog.<) (v_now OPERATOR(pg_catalog.-) '1 minute'::pg_catalog.interval)
         FOR UPDATE SKIP LOCKED));
    INSERT INTO pgadvisory.waiter AS w (lock_id, expires, shared, caller)
    VALUES (p_lock_ids[1], v_expires, COALESCE(p_shared, false), p_caller)
    RETURNING w.seq INTO v_seq;
    IF pg_catalog.cardinality(p_lock_ids) OPERATOR(pg_catalog.>) 1 THEN
        INSERT INTO pgadvisory.waiter AS w (lock_id, seq, expires, shared, caller) OVERRIDING SYSTEM VALUE
        SELECT u.id, v_seq, v_expires, COALESCE(p_shared, false), p_caller
          FROM pg_catalog.unnest(p_lock_ids[2:]) AS u(id);
    END IF;
    RETURN v_seq;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.wait_join(bigint[], bigint, bigint, boolean, bigint) IS
'lockgen waiting calls: refreshes the call''s place p_seq in the queues of p_lock_ids (expiry p_ttl_ms from '
'now) or joins them at the end with a new one, removing rows expired more than a minute ago (see 00011). '
'Called by pgadvisory.wait_try and pgadvisory.fence_wait_try; not executable by PUBLIC.';

REVOKE EXECUTE ON FUNCTION pgadvisory.wait_join(bigint[], bigint, bigint, boolean, bigint) FROM PUBLIC;

-- +goose StatementBegin
CREATE FUNCTION pgadvisory.wait_try(p_lock_ids bigint[], p_seq bigint, p_ttl_ms bigint, p_block_ms bigint DEFAULT 0,
    p_wake boolean DEFAULT true, p_shared boolean DEFAULT false,
    OUT granted boolean, OUT seq bigint, OUT head boolean, OUT next bigint)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    v_id bigint;
BEGIN
    PERFORM pgadvisory.wait_check_args('wait_try', p_lock_ids, p_ttl_ms);
    granted := false;
    head := false;
    seq := p_seq;
    IF pg_catalog.pg_is_in_recovery() THEN
        RETURN;
    END IF;
    IF seq IS NOT NULL THEN
        -- Refreshed first, so that the row stays live while the head
        -- waits below; a place lost as expired is joined again, at the end.
        seq := pgadvisory.wait_join(p_lock_ids, seq, p_ttl_ms, p_shared, NULL);
    END IF;
    head := NOT pgadvisory.wait_ahead(p_lock_ids, seq, p_shared);
    IF head THEN
        granted := pgadvisory.wait_take(p_lock_ids, p_shared, 0);
        IF NOT granted AND seq IS NOT NULL AND p_block_ms OPERATOR(pg_catalog.>) 0 THEN
            -- The holder did not come through the queue (its row would
            -- come first otherwise) and sends no NOTIFY: wait for it here,
            -- at most half the row's expiry, whose refresh is not
            -- committed yet; still not granted, expire from the end of
            -- the wait.
            granted := pgadvisory.wait_take(p_lock_ids, p_shared, LEAST(p_block_ms, p_ttl_ms OPERATOR(pg_catalog./) 2));
            IF NOT granted THEN
                seq := pgadvisory.wait_join(p_lock_ids, seq, p_ttl_ms, p_shared, NULL);
            END IF;
        END IF;
        IF granted THEN
            IF seq IS NOT NULL THEN
                DELETE FROM pgadvisory.waiter AS w
                 WHERE w.lock_id OPERATOR(pg_catalog.=) ANY (p_lock_ids) AND w.seq OPERATOR(pg_catalog.=) seq;
                -- Wake the next waiters when this transaction commits,
                -- that is when the locks are released. The caller of a
                -- set learns no name: it wakes its waiters of each lock.
                IF p_wake THEN
                    FOREACH v_id IN ARRAY p_lock_ids LOOP
                        next := pgadvisory.wait_wake(v_id, p_shared);
                    END LOOP;
                    IF pg_catalog.cardinality(p_lock_ids) OPERATOR(pg_catalog.>) 1 THEN
                        next := NULL;
                    END IF;
                END IF;
            END IF;
            RETURN;
        END IF;
    END IF;
    IF seq IS NULL THEN
        seq := pgadvisory.wait_join(p_lock_ids, NULL, p_ttl_ms, p_shared, NULL);
    END IF;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.wait_try(bigint[], bigint, bigint, bigint, boolean, boolean) IS
'lockgen waiting calls: the lock statement of a waiting transaction lock on p_lock_ids (one lock or a set). '
'Takes the locks (pg_try_advisory_xact_lock, all or none) only when no live waiter comes before the call in '
'any of their queues (p_seq: its place; NULL, a first try: no live waiter at all); with p_shared, in shared '
'mode when no live exclusive waiter comes before it; the head finding a lock held by a holder that did not '
'queue waits for it (pg_advisory_xact_lock) at most p_block_ms, half of p_ttl_ms and half of '
'statement_timeout; granted, removes the caller''s rows and, unless p_wake is false, notifies pgadvisory_wait '
'(delivered at commit) for the waiters that may take each lock next (pgadvisory.wait_wake); not granted, '
'refreshes or joins the caller''s place with an expiry of p_ttl_ms. Returns (granted, seq, head: no live '
'waiter before the call, next: the seq the NOTIFY of a single lock names, or NULL). SECURITY DEFINER: '
'callers need no privilege on pgadvisory.waiter.';

-- +goose StatementBegin
CREATE FUNCTION pgadvisory.wait_leave(p_lock_ids bigint[], p_seq bigint)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id bigint;
BEGIN
    DELETE FROM pgadvisory.waiter AS w
     WHERE w.lock_id OPERATOR(pg_catalog.=) ANY (p_lock_ids) AND w.seq OPERATOR(pg_catalog.=) p_seq;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    FOREACH v_id IN ARRAY p_lock_ids LOOP
        PERFORM pgadvisory.wait_wake(v_id, false);
    END LOOP;
    RETURN true;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.wait_leave(bigint[], bigint) IS
'lockgen waiting calls: removes the call''s place p_seq from the queues of p_lock_ids (a wait that ended '
'without the locks) and notifies pgadvisory_wait for the waiters that may take each lock next '
'(pgadvisory.wait_wake). Returns whether the place existed. SECURITY DEFINER: callers need no privilege on '
'pgadvisory.waiter.';

-- +goose StatementBegin
CREATE FUNCTION pgadvisory.fence_wait_try(p_lock_ids bigint[], p_seq bigint, p_ttl_ms bigint, p_block_ms bigint,
    p_publish_timeout text, p_caller bigint DEFAULT NULL,
    OUT granted boolean, OUT standby boolean, OUT token bigint, OUT seq bigint, OUT head boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
    PERFORM pgadvisory.wait_check_args('fence_wait_try', p_lock_ids, p_ttl_ms);
    IF p_publish_timeout IS NULL THEN
        RAISE EXCEPTION 'pgadvisory: fence_wait_try needs a publish timeout' USING ERRCODE = '22023';
    END IF;
    -- As fence_acquire: first in its transaction, which wrote nothing
    -- (this function writes the queue only on its way out, not granted).
    IF pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL THEN
        RAISE EXCEPTION 'pgadvisory: fence_wait_try must run before its transaction writes anything'
            USING ERRCODE = '25001';
    END IF;
    granted := false;
    head := false;
    seq := p_seq;
    standby := pg_catalog.pg_is_in_recovery();
    IF standby THEN
        RETURN;
    END IF;
    IF seq IS NOT NULL AND (SELECT pg_catalog.count(*) FROM pgadvisory.waiter AS w
         WHERE w.lock_id OPERATOR(pg_catalog.=) ANY (p_lock_ids) AND w.seq OPERATOR(pg_catalog.=) p_seq)
       OPERATOR(pg_catalog.<>) pg_catalog.cardinality(p_lock_ids) THEN
        seq := NULL; -- removed as expired: join again, at the end
    END IF;
    head := NOT pgadvisory.wait_ahead(p_lock_ids, seq, false);
    IF head THEN
        IF seq IS NOT NULL AND p_block_ms OPERATOR(pg_catalog.>) 0 AND NOT pgadvisory.wait_take(p_lock_ids, false, 0) THEN
            -- The holder did not come through the queue: wait for it here,
            -- at transaction level (as wait_try), then take it below at
            -- session level (re-entrant: granted at once).
            PERFORM pgadvisory.wait_take(p_lock_ids, false, LEAST(p_block_ms, p_ttl_ms OPERATOR(pg_catalog./) 2));
        END IF;
        -- The fenced acquisition itself: the session-level locks, the
        -- token, its publish. Its hand-over transaction removes the
        -- caller's rows (wait_leave), so that the NOTIFY waking the next
        -- waiters is delivered when the locks are released.
        SELECT a.granted, a.token INTO granted, token
          FROM pgadvisory.fence_acquire(p_lock_ids, false, NULL, p_publish_timeout) AS a;
        IF granted THEN
            RETURN;
        END IF;
    END IF;
    seq := pgadvisory.wait_join(p_lock_ids, seq, p_ttl_ms, false, p_caller);
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.fence_wait_try(bigint[], bigint, bigint, bigint, text, bigint) IS
'lockgen waiting calls: the lock statement of a waiting fenced call on p_lock_ids, first in its transaction '
'(25001 after the transaction wrote anything), in place of pgadvisory.fence_acquire. When no live waiter comes '
'before the call in any of the locks'' queues (p_seq: its place; NULL, a first try: no live waiter at all), '
'runs fence_acquire on the locks without waiting (the head finding a lock held by a holder that did not queue '
'first waits for it at transaction level at most p_block_ms, half of p_ttl_ms and half of statement_timeout); '
'granted, returns the token and leaves the caller''s place for its hand-over transaction to remove '
'(pgadvisory.wait_leave); not granted, refreshes or joins the caller''s place with an expiry of p_ttl_ms and, '
'in new rows, the caller''s p_caller. Returns (granted, standby, token, seq, head). SECURITY DEFINER: callers '
'need no privilege on pgadvisory.waiter, pgadvisory.fence or the token sequence.';

-- +goose Down
DROP FUNCTION pgadvisory.fence_wait_try(bigint[], bigint, bigint, bigint, text, bigint);
DROP FUNCTION pgadvisory.wait_leave(bigint[], bigint);
DROP FUNCTION pgadvisory.wait_try(bigint[], bigint, bigint, bigint, boolean, boolean);
DROP FUNCTION pgadvisory.wait_join(bigint[], bigint, bigint, boolean, bigint);
DROP FUNCTION pgadvisory.wait_take(bigint[], boolean, bigint);
DROP FUNCTION pgadvisory.wait_ahead(bigint[], bigint, boolean);
DROP FUNCTION pgadvisory.wait_check_args(text, bigint[], bigint);
DROP FUNCTION pgadvisory.wait_wake(bigint, boolean);
DROP TABLE pgadvisory.waiter;
