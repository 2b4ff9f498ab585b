-- lockgen limited locks (semaphores): at most n holders of one lock at
-- once, each through one of n slot keys.
--
--   * slot_id(lock_id, slot) is the SQL twin of keyspace.SlotID: the key of
--     slot number slot (0 to n-1) of the lock, the first 8 bytes of
--     sha256(0xff || int8send(lock_id) || int4send(slot)) as a big-endian
--     bigint. A slot is held by holding its key's advisory lock, at
--     transaction or session level, so a SQL job takes a slot with
--     pg_try_advisory_xact_lock(pgadvisory.slot_id(lock_id, s)) for some s
--     below the lock's limit.
--   * pgadvisory.slot_limit has one row per limited lock: the limit n its
--     holders agreed on. n is part of a limited lock's identity: a caller
--     with another n would hold slots the others do not count.
--   * slot_try(lock_id, n, start, session, skip) tries the slots in the
--     order start, start+1, ... (mod n), passing over those in skip, and
--     takes the first free one (transaction-level, or session-level when
--     session is true). It returns the slot, or NULL when none is free.
--   * A limited call takes a slot with one statement of its own, which
--     calls no function when its first slot is free (a function call
--     costs more than the lock itself): it tries the key of a random
--     first slot with pg_try_advisory_xact_lock (a session-limited call,
--     on a shared connection: pg_try_advisory_lock), only if that one is
--     taken calls slot_try for the others (at session level passing over,
--     in skip, the slots other calls of its process hold on the same
--     backend, where advisory locks are re-entrant), and once a slot is
--     granted reads the lock's row of slot_limit. The statement's snapshot is older than the slot's grant, so a limit
--     changed by a transaction that committed in between would be read as
--     it was. But such a change wrote the row, so the version the
--     statement sees then has a nonzero xmax: the statement takes n from a
--     version whose xmax is 0 (the newest: nobody has updated it), and
--     otherwise calls slot_registered, which reads it with a fresh
--     snapshot. The hot path writes nothing. Nothing locks the row's
--     newest version (slot_register does not, and PUBLIC cannot), so its
--     xmax stays 0 until the limit changes again.
--   * slot_registered(lock_id) reads the lock's registered limit with a
--     snapshot of its own (a volatile PL/pgSQL function).
--   * slot_register(lock_id, n) registers n for a lock that has no limit,
--     and changes a lock's limit to n only when no slot of the registered
--     limit is held (it takes them all for the length of its transaction,
--     and updates the row only if it still has the limit whose slots it
--     took). It returns the limit registered after the call: n, or the
--     other value when some slot is held with it.
--   * slot_status is one row per limited lock with its limit, the number of
--     its slots held, and the backends waiting in the server's queue for
--     one of them.
--
-- slot_register is SECURITY DEFINER (callers need no privilege to write
-- pgadvisory.slot_limit) and executable by PUBLIC, as every limited lock's
-- first call uses it; slot_try takes advisory locks, which PUBLIC may,
-- and slot_registered reads a table PUBLIC may read: they run as the
-- caller; slot_id is pure. All four are PUBLIC. Every function pins
-- search_path = pg_catalog, pg_temp, lockgen's names are schema-qualified,
-- operators are written OPERATOR(pg_catalog.op) and casts
-- ::pg_catalog.type.
--
-- Errors (messages start with "pgadvisory: "): 22023 a NULL or invalid
-- argument (n outside 1..1024, start outside 0..n-1).
--
-- Written for PostgreSQL 13 and later.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION pgadvisory.slot_id(p_lock_id bigint, p_slot integer)
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT ('x' OPERATOR(pg_catalog.||) pg_catalog.encode(pg_catalog.substr(pg_catalog.sha256(
            pg_catalog.decode('ff', 'hex')
            OPERATOR(pg_catalog.||) pg_catalog.int8send(p_lock_id)
            OPERATOR(pg_catalog.||) pg_catalog.int4send(p_slot)
        ), 1, 8), 'hex'))::pg_catalog.bit(64)::pg_catalog.int8
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.slot_id(bigint, integer) IS
'lockgen keyspace slot rule (same IDs as Go keyspace.SlotID): the advisory-lock key of slot p_slot '
'(0 to n-1) of the limited lock p_lock_id, the first 8 bytes of sha256(0xff || int8send(p_lock_id) '
'|| int4send(p_slot)) as a big-endian bigint. slot_id(lock_id(''reports.daily_email''), 0) = '
'-933250112286515960. Take a slot with pg_try_advisory_xact_lock(pgadvisory.slot_id(id, s)).';

CREATE TABLE pgadvisory.slot_limit (
    lock_id       bigint PRIMARY KEY,
    n             integer NOT NULL CHECK (n BETWEEN 1 AND 1024),
    registered_at timestamptz NOT NULL
);

COMMENT ON TABLE pgadvisory.slot_limit IS
'lockgen limited locks: the limit n (holders at once) registered for each limited lock. Written only '
'by pgadvisory.slot_register; readable by any role.';

-- Any role may read the limits (a session-limited call reads its lock's
-- limit after taking a slot); only slot_register writes them.
REVOKE ALL ON TABLE pgadvisory.slot_limit FROM PUBLIC;
GRANT SELECT ON TABLE pgadvisory.slot_limit TO PUBLIC;

-- +goose StatementBegin
CREATE FUNCTION pgadvisory.slot_try(p_lock_id bigint, p_n integer, p_start integer, p_session boolean, p_skip integer[])
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_i integer;
BEGIN
    IF p_lock_id IS NULL OR p_n IS NULL OR p_start IS NULL OR p_session IS NULL THEN
        RAISE EXCEPTION 'pgadvisory: slot_try needs a lock ID, a limit, a start slot and a level'
            USING ERRCODE = '22023';
    END IF;
    IF p_n OPERATOR(pg_catalog.<) 1 OR p_n OPERATOR(pg_catalog.>) 1024
       OR p_start OPERATOR(pg_catalog.<) 0 OR p_start OPERATOR(pg_catalog.>=) p_n THEN
        RAISE EXCEPTION 'pgadvisory: slot_try: the limit must be 1 to 1024 and the start slot 0 to limit-1 (got limit %, start %)', p_n, p_start
            USING ERRCODE = '22023';
    END IF;
    FOR k IN 0 .. p_n OPERATOR(pg_catalog.-) 1 LOOP
        v_i := (p_start OPERATOR(pg_catalog.+) k) OPERATOR(pg_catalog.%) p_n;
        CONTINUE WHEN p_skip IS NOT NULL AND v_i OPERATOR(pg_catalog.=) ANY (p_skip);
        IF p_session THEN
            IF pg_catalog.pg_try_advisory_lock(pgadvisory.slot_id(p_lock_id, v_i)) THEN
                RETURN v_i;
            END IF;
        ELSIF pg_catalog.pg_try_advisory_xact_lock(pgadvisory.slot_id(p_lock_id, v_i)) THEN
            RETURN v_i;
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.slot_try(bigint, integer, integer, boolean, integer[]) IS
'lockgen limited locks: takes the first free slot of p_lock_id among 0..p_n-1, trying them from p_start '
'on (mod p_n) and passing over p_skip, at transaction level (or session level when p_session), and '
'returns it (NULL: none free). It does not read the lock''s registered limit: a caller reads '
'pgadvisory.slot_limit after the slot is granted (see slot_registered).';

-- +goose StatementBegin
CREATE FUNCTION pgadvisory.slot_registered(p_lock_id bigint)
RETURNS integer
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- A statement of a volatile PL/pgSQL function takes a snapshot of its
    -- own: it sees every limit committed before it starts, even when the
    -- statement that calls the function started earlier.
    RETURN (SELECT l.n FROM pgadvisory.slot_limit AS l WHERE l.lock_id OPERATOR(pg_catalog.=) p_lock_id);
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.slot_registered(bigint) IS
'lockgen limited locks: the limit registered for p_lock_id (NULL: none), read with a snapshot taken when '
'the function runs, not when the statement that calls it started: called after a slot was taken, it sees '
'every change of the limit committed before.';

-- +goose StatementBegin
CREATE FUNCTION pgadvisory.slot_register(p_lock_id bigint, p_n integer)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_n integer;
BEGIN
    IF p_lock_id IS NULL OR p_n IS NULL OR p_n OPERATOR(pg_catalog.<) 1 OR p_n OPERATOR(pg_catalog.>) 1024 THEN
        RAISE EXCEPTION 'pgadvisory: slot_register needs a lock ID and a limit of 1 to 1024 (got %)', p_n
            USING ERRCODE = '22023';
    END IF;
    INSERT INTO pgadvisory.slot_limit AS l (lock_id, n, registered_at)
    VALUES (p_lock_id, p_n, pg_catalog.clock_timestamp())
    ON CONFLICT (lock_id) DO NOTHING;
    -- Not FOR UPDATE: the row's newest version keeps xmax 0, which the slot
    -- statement's check relies on (see the header). Concurrent changes are
    -- ordered by the old limit's slots and the UPDATE's condition below.
    SELECT l.n INTO v_n FROM pgadvisory.slot_limit AS l WHERE l.lock_id OPERATOR(pg_catalog.=) p_lock_id;
    IF v_n OPERATOR(pg_catalog.=) p_n THEN
        RETURN v_n;
    END IF;
    -- Another limit is registered: it changes only while none of its slots
    -- is held. They stay taken until this transaction ends, so no holder
    -- of the old limit starts before the new one is visible.
    FOR s IN 0 .. v_n OPERATOR(pg_catalog.-) 1 LOOP
        IF NOT pg_catalog.pg_try_advisory_xact_lock(pgadvisory.slot_id(p_lock_id, s)) THEN
            -- Held: the limit stays (read again: another call may have
            -- changed it since).
            RETURN (SELECT l.n FROM pgadvisory.slot_limit AS l WHERE l.lock_id OPERATOR(pg_catalog.=) p_lock_id);
        END IF;
    END LOOP;
    -- Only if it is still the limit whose slots this call holds.
    UPDATE pgadvisory.slot_limit AS l SET n = p_n, registered_at = pg_catalog.clock_timestamp()
    WHERE l.lock_id OPERATOR(pg_catalog.=) p_lock_id AND l.n OPERATOR(pg_catalog.=) v_n;
    IF NOT FOUND THEN
        RETURN (SELECT l.n FROM pgadvisory.slot_limit AS l WHERE l.lock_id OPERATOR(pg_catalog.=) p_lock_id);
    END IF;
    RETURN p_n;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.slot_register(bigint, integer) IS
'lockgen limited locks: registers the limit p_n of p_lock_id when none is, or changes the registered '
'limit to p_n when no slot of it is held; returns the limit registered after the call. SECURITY '
'DEFINER: callers need no privilege on slot_limit.';

CREATE VIEW pgadvisory.slot_status AS
SELECT l.lock_id,
       l.n,
       (SELECT pg_catalog.count(*) FROM pg_catalog.pg_locks AS k
         WHERE k.locktype OPERATOR(pg_catalog.=) 'advisory' AND k.objsubid OPERATOR(pg_catalog.=) 1 AND k.granted
           AND k.database OPERATOR(pg_catalog.=) d.oid
           AND ((k.classid::pg_catalog.int8 OPERATOR(pg_catalog.<<) 32) OPERATOR(pg_catalog.|) k.objid::pg_catalog.int8)
               OPERATOR(pg_catalog.=) ANY (s.keys))::pg_catalog.int4 AS held,
       (SELECT pg_catalog.count(*) FROM pg_catalog.pg_locks AS k
         WHERE k.locktype OPERATOR(pg_catalog.=) 'advisory' AND k.objsubid OPERATOR(pg_catalog.=) 1 AND NOT k.granted
           AND k.database OPERATOR(pg_catalog.=) d.oid
           AND ((k.classid::pg_catalog.int8 OPERATOR(pg_catalog.<<) 32) OPERATOR(pg_catalog.|) k.objid::pg_catalog.int8)
               OPERATOR(pg_catalog.=) ANY (s.keys))::pg_catalog.int4 AS waiting
FROM pgadvisory.slot_limit AS l
CROSS JOIN LATERAL (
    SELECT pg_catalog.array_agg(pgadvisory.slot_id(l.lock_id, g.i)) AS keys
    FROM pg_catalog.generate_series(0, l.n OPERATOR(pg_catalog.-) 1) AS g(i)
) AS s
CROSS JOIN (SELECT o.oid FROM pg_catalog.pg_database AS o
            WHERE o.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()) AS d;

COMMENT ON VIEW pgadvisory.slot_status IS
'lockgen limited locks: one row per limited lock with its registered limit n, held = its slots held now '
'(at transaction or session level) and waiting = backends waiting in the server''s queue for one of them '
'(SQL jobs that block on a slot key; lockgen''s waiting calls hold no connection and are not counted).';

-- +goose Down
DROP VIEW pgadvisory.slot_status;
DROP FUNCTION pgadvisory.slot_register(bigint, integer);
DROP FUNCTION pgadvisory.slot_registered(bigint);
DROP FUNCTION pgadvisory.slot_try(bigint, integer, integer, boolean, integer[]);
DROP TABLE pgadvisory.slot_limit;
DROP FUNCTION pgadvisory.slot_id(bigint, integer);
