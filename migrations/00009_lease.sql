-- lockgen leases: a leadership held by a row with an expiry on the
-- database's clock, taken, renewed and released in single short
-- transactions, so that it needs no session of its own and works through
-- any pooler (PgBouncer in transaction mode among them).
--
--   * pgadvisory.lease has one row per lock that was ever leased: the
--     holder's name, the SHA-256 digest of its owner secret (the secret
--     itself is never stored), its term, since when it holds the lease and
--     when the lease expires (clock_timestamp() of the statement that took
--     or renewed it, plus the ttl). A row whose owner_secret is NULL or
--     whose expires_at has passed is vacant.
--   * lease_acquire takes a vacant or expired lease. Its term is a
--     leader's term: it holds the lock's session-level advisory lock for
--     the length of the call and calls pgadvisory.leader_elect, which draws
--     the term from pgadvisory.fencing_token_seq, publishes it as the lock's
--     fencing token (waiting at most the publish timeout for writers that
--     still hold the fence row FOR SHARE with the previous token) and
--     forces a durable commit (synchronous_commit on, for synchronous
--     standbys too). A fenced table therefore rejects the writes of every
--     older term, of a lease or of a session-lock leader, once the
--     transaction of lease_acquire commits. The session-level lock is
--     released before lease_acquire returns; a lock held by a session (a
--     session-lock leader, RunSession) makes lease_acquire return NULL.
--     The row leader_elect writes in pgadvisory.leader gets pid 0, which no
--     backend has: pgadvisory.current_leader reports session-lock leaders
--     only, and never this lease's holder through a backend that later
--     takes the lock for something else.
--   * lease_renew renews, in one statement, every lease of p_lock_ids that
--     is held with the owner secret, has not expired, and whose term is
--     still the lock's published token; it returns the IDs it renewed.
--   * lease_release vacates a lease held with the owner secret, at once.
--   * current_leader (redefined; Down restores 00007's) reports a lease's
--     holder while the lease is held, unexpired and its term is the
--     published token, with pid 0.
--   * leader_resign ends a session-lock leadership: it sets pid 0 in the
--     leader row of the caller's backend and term, then releases the
--     session-level advisory lock, in one statement. Without it the row
--     kept the backend's pid, and current_leader (and the status view)
--     named the resigned leader again as soon as a plain session lock on
--     the same key was taken on the same backend (a shared connection).
--
-- The lease functions and leader_resign are SECURITY DEFINER (callers need
-- no privilege on pgadvisory.lease, pgadvisory.fence, pgadvisory.leader or
-- the sequence) and executable by PUBLIC, like leader_elect: whoever may
-- elect a leader may take a lease; leader_resign changes only the row of
-- the caller's own backend. Their arguments are of built-in types, every function
-- pins search_path = pg_catalog, pg_temp, lockgen's names are
-- schema-qualified and comparisons are written OPERATOR(pg_catalog.=).
-- Nobody but the schema's owner reads pgadvisory.lease (no privilege is
-- granted on it).
--
-- Errors (messages start with "pgadvisory: "): 22023 a NULL or invalid
-- argument (a ttl that is not positive); 25006 on a hot standby; 55P03
-- and LF004 from leader_elect's publish.
--
-- Written for PostgreSQL 13 and later.

-- +goose Up
CREATE TABLE pgadvisory.lease (
    lock_id      bigint PRIMARY KEY,
    holder       text,
    owner_secret bytea,
    term         bigint,
    since        timestamptz,
    expires_at   timestamptz
);

COMMENT ON TABLE pgadvisory.lease IS
'lockgen leases: the lease of each lock that was ever leased (pgadvisory.lease_acquire). holder '
'names the holder; owner_secret is the SHA-256 digest of its owner secret; term is its term (the '
'lock''s fencing token when it was taken); since and expires_at are on the database''s clock '
'(clock_timestamp()). A row with a NULL owner_secret or an expires_at in the past is vacant. '
'Written only by lease_acquire, lease_renew and lease_release.';

-- +goose StatementBegin
CREATE FUNCTION pgadvisory.lease_acquire(
    p_lock_id bigint, p_holder text, p_owner_secret uuid, p_ttl interval, p_publish_timeout text)
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now    timestamptz;
    v_row    record;
    v_term   bigint;
BEGIN
    IF p_lock_id IS NULL OR p_holder IS NULL OR p_owner_secret IS NULL OR p_ttl IS NULL OR p_publish_timeout IS NULL THEN
        RAISE EXCEPTION 'pgadvisory: lease_acquire needs a lock ID, a holder, an owner secret, a ttl and a publish timeout'
            USING ERRCODE = '22023';
    END IF;
    IF p_ttl OPERATOR(pg_catalog.<=) '0'::pg_catalog.interval THEN
        RAISE EXCEPTION 'pgadvisory: lease_acquire: the ttl must be positive (got %)', p_ttl
            USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.pg_is_in_recovery() THEN
        RAISE EXCEPTION 'pgadvisory: lease_acquire on a hot standby: leases are taken on the primary'
            USING ERRCODE = '25006';
    END IF;

    -- One acquirer at a time per lock: the row, locked. A row another
    -- transaction holds (an acquisition or a renewal in progress) means the
    -- lease is busy: this call does not wait for it.
    INSERT INTO pgadvisory.lease AS l (lock_id) VALUES (p_lock_id) ON CONFLICT (lock_id) DO NOTHING;
    SELECT l.owner_secret, l.expires_at INTO v_row
    FROM pgadvisory.lease AS l
    WHERE l.lock_id OPERATOR(pg_catalog.=) p_lock_id
    FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF v_row.owner_secret IS NOT NULL
       AND v_row.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() THEN
        RETURN NULL;
    END IF;

    -- The term is an election's (leader_elect: the durable publish, writers
    -- of the previous token ordered before it), for which this session holds
    -- the lock at session level for the length of the call. A lock that a
    -- session holds (a session-lock leader) is busy.
    IF NOT pg_catalog.pg_try_advisory_lock(p_lock_id) THEN
        RETURN NULL;
    END IF;
    BEGIN
        SELECT e.term INTO v_term FROM pgadvisory.leader_elect(p_lock_id, p_holder, p_publish_timeout) AS e;
        PERFORM pg_catalog.pg_advisory_unlock(p_lock_id);
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        -- Session locks survive the rollback of this block.
        PERFORM pg_catalog.pg_advisory_unlock(p_lock_id);
        RAISE;
    END;
    -- No backend holds the lock for this leader: pid 0 keeps
    -- current_leader from confirming it through a backend that later takes
    -- the lock for something else.
    UPDATE pgadvisory.leader AS d SET pid = 0
    WHERE d.lock_id OPERATOR(pg_catalog.=) p_lock_id AND d.term OPERATOR(pg_catalog.=) v_term;

    v_now := pg_catalog.clock_timestamp();
    UPDATE pgadvisory.lease AS l
    SET holder = p_holder,
        owner_secret = pg_catalog.sha256(pg_catalog.uuid_send(p_owner_secret)),
        term = v_term,
        since = v_now,
        expires_at = v_now OPERATOR(pg_catalog.+) p_ttl
    WHERE l.lock_id OPERATOR(pg_catalog.=) p_lock_id;
    RETURN v_term;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.lease_acquire(bigint, text, uuid, interval, text) IS
'lockgen leases: takes the lease of p_lock_id when it is vacant or expired and no session holds the '
'advisory lock, for p_ttl from now on the database''s clock, and returns its term; NULL when the '
'lease or the lock is held (or an acquisition or renewal of it is in progress). The term is drawn '
'and published as the lock''s fencing token by pgadvisory.leader_elect (durable commit; 55P03 '
'after p_publish_timeout while writers of the previous token are in flight; LF004). The owner '
'secret renews and releases the lease; only its SHA-256 digest is stored. SECURITY DEFINER.';

-- +goose StatementBegin
CREATE FUNCTION pgadvisory.lease_renew(p_lock_ids bigint[], p_owner_secret uuid, p_ttl interval)
RETURNS bigint[]
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_held bigint[];
BEGIN
    IF p_lock_ids IS NULL OR p_owner_secret IS NULL OR p_ttl IS NULL THEN
        RAISE EXCEPTION 'pgadvisory: lease_renew needs lock IDs, an owner secret and a ttl'
            USING ERRCODE = '22023';
    END IF;
    IF p_ttl OPERATOR(pg_catalog.<=) '0'::pg_catalog.interval THEN
        RAISE EXCEPTION 'pgadvisory: lease_renew: the ttl must be positive (got %)', p_ttl
            USING ERRCODE = '22023';
    END IF;
    -- A lease that expired is lost, even when nobody took it: its holder
    -- stopped counting on it at its own deadline, which comes first. A
    -- lease whose term is no longer the published token was superseded (a
    -- session-lock leader, a fenced acquisition of the same lock).
    WITH renewed AS (
        UPDATE pgadvisory.lease AS l
        SET expires_at = pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) p_ttl
        FROM pgadvisory.fence AS f
        WHERE l.lock_id OPERATOR(pg_catalog.=) ANY (p_lock_ids)
          AND l.owner_secret OPERATOR(pg_catalog.=) pg_catalog.sha256(pg_catalog.uuid_send(p_owner_secret))
          AND l.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
          AND f.lock_id OPERATOR(pg_catalog.=) l.lock_id
          AND f.token OPERATOR(pg_catalog.=) l.term
        RETURNING l.lock_id
    )
    SELECT COALESCE(pg_catalog.array_agg(r.lock_id ORDER BY r.lock_id), '{}') INTO v_held FROM renewed AS r;
    RETURN v_held;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.lease_renew(bigint[], uuid, interval) IS
'lockgen leases: renews, in one statement, the leases of p_lock_ids held with p_owner_secret that '
'have not expired and whose term is still the lock''s published fencing token, to p_ttl from now on '
'the database''s clock, and returns their IDs in ascending order; the others are lost. SECURITY DEFINER.';

-- +goose StatementBegin
CREATE FUNCTION pgadvisory.lease_release(p_lock_id bigint, p_owner_secret uuid)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_lock_id IS NULL OR p_owner_secret IS NULL THEN
        RAISE EXCEPTION 'pgadvisory: lease_release needs a lock ID and an owner secret'
            USING ERRCODE = '22023';
    END IF;
    UPDATE pgadvisory.lease AS l
    SET holder = NULL, owner_secret = NULL, since = NULL, expires_at = NULL
    WHERE l.lock_id OPERATOR(pg_catalog.=) p_lock_id
      AND l.owner_secret OPERATOR(pg_catalog.=) pg_catalog.sha256(pg_catalog.uuid_send(p_owner_secret));
    RETURN FOUND;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.lease_release(bigint, uuid) IS
'lockgen leases: vacates the lease of p_lock_id held with p_owner_secret at once (expired or not) '
'and returns whether it did; the term stays in the row. SECURITY DEFINER.';

REVOKE ALL ON TABLE pgadvisory.lease FROM PUBLIC;

-- leader_resign: the leader row stops naming the caller's backend, then the
-- lock is released. The UPDATE commits with the statement; a candidate
-- granted the lock meanwhile waits for that row in leader_elect, so the
-- new leader's row is written after this one.
-- +goose StatementBegin
CREATE FUNCTION pgadvisory.leader_resign(p_lock_id bigint, p_term bigint)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_lock_id IS NULL OR p_term IS NULL THEN
        RAISE EXCEPTION 'pgadvisory: leader_resign needs a lock ID and a term (got %, %)', p_lock_id, p_term
            USING ERRCODE = '22023';
    END IF;
    UPDATE pgadvisory.leader AS l SET pid = 0
    WHERE l.lock_id OPERATOR(pg_catalog.=) p_lock_id
      AND l.term OPERATOR(pg_catalog.=) p_term
      AND l.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid();
    RETURN pg_catalog.pg_advisory_unlock(p_lock_id)::pg_catalog.int4;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.leader_resign(bigint, bigint) IS
'lockgen leader election: ends the session-lock leadership of p_lock_id with term p_term held by the '
'calling backend: its leader row gets pid 0 (no backend has it, so current_leader and the status '
'view no longer name it), then the session-level advisory lock is released; returns 1 if it was '
'held, else 0. SECURITY DEFINER: changes only the row of the caller''s own backend.';

-- current_leader reports a lease's holder too: while the lease is held, has
-- not expired on the database's clock and its term is the published token.
-- Its row has pid 0 (no backend holds a lease) and elected_at is the time
-- the lease was taken. A session-lock leader is confirmed as before.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadvisory.current_leader(p_lock_id bigint)
RETURNS SETOF pgadvisory.leader
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
SELECT l.*
FROM pgadvisory.leader AS l
JOIN pgadvisory.fence AS f ON f.lock_id OPERATOR(pg_catalog.=) l.lock_id AND f.token OPERATOR(pg_catalog.=) l.term
WHERE l.lock_id OPERATOR(pg_catalog.=) p_lock_id
  AND EXISTS (
    SELECT 1
    FROM pg_catalog.pg_locks AS k
    WHERE k.locktype OPERATOR(pg_catalog.=) 'advisory' AND k.objsubid OPERATOR(pg_catalog.=) 1 AND k.granted
      AND k.mode OPERATOR(pg_catalog.=) 'ExclusiveLock'
      AND k.pid OPERATOR(pg_catalog.=) l.pid
      AND ((k.classid::pg_catalog.int8 OPERATOR(pg_catalog.<<) 32) OPERATOR(pg_catalog.|) k.objid::pg_catalog.int8) OPERATOR(pg_catalog.=) l.lock_id
      AND k.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()))
  AND EXISTS (
    SELECT 1
    FROM pg_catalog.pg_stat_activity AS a
    WHERE a.pid OPERATOR(pg_catalog.=) l.pid
      AND (a.backend_start IS NULL OR a.backend_start OPERATOR(pg_catalog.<) l.elected_at))
UNION ALL
SELECT s.lock_id, s.holder, s.term, 0, s.since
FROM pgadvisory.lease AS s
JOIN pgadvisory.fence AS f ON f.lock_id OPERATOR(pg_catalog.=) s.lock_id AND f.token OPERATOR(pg_catalog.=) s.term
WHERE s.lock_id OPERATOR(pg_catalog.=) p_lock_id
  AND s.owner_secret IS NOT NULL
  AND s.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.current_leader(bigint) IS
'lockgen leader election: the leader of p_lock_id now. A session-lock leader, from '
'pgadvisory.leader, only while its backend is alive, is the same backend (that pid, started '
'before elected_at, where the owner can read backend_start), holds the advisory lock in '
'exclusive mode, and its term is the published token. A lease leader, from pgadvisory.lease '
'(pid 0, elected_at: when the lease was taken), only while its lease is held, has not expired '
'and its term is the published token. No row otherwise. SECURITY DEFINER: readers need no '
'privilege on lockgen''s tables.';

-- +goose Down
-- current_leader as 00007 defined it.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgadvisory.current_leader(p_lock_id bigint)
RETURNS SETOF pgadvisory.leader
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
SELECT l.*
FROM pgadvisory.leader AS l
JOIN pgadvisory.fence AS f ON f.lock_id = l.lock_id AND f.token = l.term
WHERE l.lock_id = p_lock_id
  AND EXISTS (
    SELECT 1
    FROM pg_catalog.pg_locks AS k
    WHERE k.locktype = 'advisory' AND k.objsubid = 1 AND k.granted AND k.mode = 'ExclusiveLock'
      AND k.pid = l.pid
      AND ((k.classid::bigint << 32) | k.objid::bigint) = l.lock_id
      AND k.database = (SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname = pg_catalog.current_database()))
  AND EXISTS (
    SELECT 1
    FROM pg_catalog.pg_stat_activity AS a
    WHERE a.pid = l.pid
      AND (a.backend_start IS NULL OR a.backend_start < l.elected_at))
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.current_leader(bigint) IS
'lockgen leader election: the leader of p_lock_id now, from pgadvisory.leader, only while its '
'backend is alive, is the same backend (that pid, started before elected_at, where the owner '
'can read backend_start), '
'holds the advisory lock in exclusive mode, and its term is the published token; no row '
'otherwise. SECURITY DEFINER: readers need no privilege on lockgen''s tables.';

DROP FUNCTION pgadvisory.leader_resign(bigint, bigint);
DROP FUNCTION pgadvisory.lease_release(bigint, uuid);
DROP FUNCTION pgadvisory.lease_renew(bigint[], uuid, interval);
DROP FUNCTION pgadvisory.lease_acquire(bigint, text, uuid, interval, text);
DROP TABLE pgadvisory.lease;
