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
--   * leader_resign ends a session-lock leadership: it releases the
--     session-level advisory lock, then records the resigned term in
--     pgadvisory.leader_resigned, in one statement; current_leader and the
--     status view name no leader row whose term is recorded there. Without
--     it the leader row kept naming the backend, and current_leader (and
--     the status view) named the resigned leader again as soon as a plain
--     session lock on the same key was taken on the same backend (a shared
--     connection). The record is a row of its own, not the leader row,
--     which the successor's election writes: neither waits for the other's
--     row lock, and the lock is free before the record is written, so a
--     hand-off waits for neither. Its transaction commits with
--     synchronous_commit = off when the resignation is its first write: a
--     hand-off costs the one WAL flush of the successor's election.
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

    -- Two passes over the same check. The first reads the row: a lease
    -- held and unexpired is answered without a write (no row lock, no
    -- transaction ID, no WAL flush at commit), which keeps a campaign's
    -- polls cheap. The second makes it one acquirer at a time per lock: the
    -- row, locked, checked again. A row another transaction holds (an
    -- acquisition or a renewal in progress) means the lease is busy: this
    -- call does not wait for it.
    FOR v_pass IN 1..2 LOOP
        IF v_pass OPERATOR(pg_catalog.=) 1 THEN
            SELECT l.owner_secret, l.expires_at INTO v_row
            FROM pgadvisory.lease AS l
            WHERE l.lock_id OPERATOR(pg_catalog.=) p_lock_id;
        ELSE
            INSERT INTO pgadvisory.lease AS l (lock_id) VALUES (p_lock_id) ON CONFLICT (lock_id) DO NOTHING;
            SELECT l.owner_secret, l.expires_at INTO v_row
            FROM pgadvisory.lease AS l
            WHERE l.lock_id OPERATOR(pg_catalog.=) p_lock_id
            FOR UPDATE SKIP LOCKED;
            IF NOT FOUND THEN
                RETURN NULL;
            END IF;
        END IF;
        IF v_row.owner_secret IS NOT NULL
           AND v_row.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() THEN
            RETURN NULL;
        END IF;
    END LOOP;

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

CREATE TABLE pgadvisory.leader_resigned (
    lock_id bigint PRIMARY KEY,
    term    bigint NOT NULL
);

COMMENT ON TABLE pgadvisory.leader_resigned IS
'lockgen leader election: the newest term of each lock whose session-lock leader resigned '
'(pgadvisory.leader_resign). current_leader and the status view name no leader row whose term is '
'at most this one. Written only by leader_resign.';

REVOKE ALL ON TABLE pgadvisory.leader_resigned FROM PUBLIC;

-- leader_resign: the lock is released, then the resigned term is recorded
-- in pgadvisory.leader_resigned (when the leader row names the caller's
-- backend and that term: a caller records only its own leadership). The
-- lock comes first, so a waiting candidate is granted it without waiting
-- for this write; the record is not the leader row, which the candidate's
-- election writes, so neither waits for the other's row lock. Between the
-- unlock and the commit, current_leader names nobody through the leader
-- row: its backend no longer holds the lock and cannot take it again
-- before this statement ends. The recorded term only grows: a resignation
-- that reaches the table after a newer leader's own resignation (its
-- backend held back between the unlock and the write) leaves the newer
-- term.
--
-- The commit does not wait for a WAL flush (synchronous_commit = off for
-- the transaction, when the resignation is its first write, so no earlier
-- write of the caller's loses durability; lockgen sends it as a
-- transaction of its own). Nothing depends on the resignation surviving a
-- crash: the leader row it marks names a backend that a crash ends, and
-- current_leader names no backend that is gone, started after elected_at
-- or does not hold the lock. Without a later flush the WAL writer flushes
-- it within three times wal_writer_delay (PostgreSQL's asynchronous
-- commit).
-- +goose StatementBegin
CREATE FUNCTION pgadvisory.leader_resign(p_lock_id bigint, p_term bigint)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_held boolean;
BEGIN
    IF p_lock_id IS NULL OR p_term IS NULL THEN
        RAISE EXCEPTION 'pgadvisory: leader_resign needs a lock ID and a term (got %, %)', p_lock_id, p_term
            USING ERRCODE = '22023';
    END IF;
    v_held := pg_catalog.pg_advisory_unlock(p_lock_id);
    PERFORM FROM pgadvisory.leader AS l
    WHERE l.lock_id OPERATOR(pg_catalog.=) p_lock_id
      AND l.term OPERATOR(pg_catalog.=) p_term
      AND l.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid();
    IF FOUND THEN
        IF pg_catalog.pg_current_xact_id_if_assigned() IS NULL THEN
            PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
        END IF;
        UPDATE pgadvisory.leader_resigned AS r SET term = p_term
        WHERE r.lock_id OPERATOR(pg_catalog.=) p_lock_id AND r.term OPERATOR(pg_catalog.<) p_term;
        IF NOT FOUND THEN
            INSERT INTO pgadvisory.leader_resigned AS r (lock_id, term) VALUES (p_lock_id, p_term)
            ON CONFLICT (lock_id) DO UPDATE SET term = excluded.term
            WHERE r.term OPERATOR(pg_catalog.<) excluded.term;
        END IF;
    END IF;
    RETURN v_held::pg_catalog.int4;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.leader_resign(bigint, bigint) IS
'lockgen leader election: ends the session-lock leadership of p_lock_id with term p_term held by the '
'calling backend: the session-level advisory lock is released, then the term is recorded in '
'pgadvisory.leader_resigned (so current_leader and the status view no longer name it) when the '
'leader row names this backend and term; returns 1 if the lock was held, else 0. Sets '
'synchronous_commit = off for the transaction when nothing was written in it before (the record '
'need not survive a crash: current_leader names no backend that is gone). SECURITY DEFINER: '
'records only the caller''s own leadership.';

-- current_leader reports a lease's holder too: while the lease is held, has
-- not expired on the database's clock and its term is the published token.
-- Its row has pid 0 (no backend holds a lease) and elected_at is the time
-- the lease was taken. A session-lock leader is confirmed as before, unless
-- its term was resigned (pgadvisory.leader_resigned).
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
  AND NOT EXISTS (
    SELECT 1
    FROM pgadvisory.leader_resigned AS r
    WHERE r.lock_id OPERATOR(pg_catalog.=) l.lock_id AND r.term OPERATOR(pg_catalog.>=) l.term)
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
'exclusive mode, its term is the published token and was not resigned '
'(pgadvisory.leader_resigned). A lease leader, from pgadvisory.lease '
'(pid 0, elected_at: when the lease was taken), only while its lease is held, has not expired '
'and its term is the published token. No row otherwise. SECURITY DEFINER: readers need no '
'privilege on lockgen''s tables.';

-- lease_expires: when a lease leader's lease expires unless renewed, for
-- pgadvisory.CurrentLeader beside current_leader's row (readers have no
-- privilege on pgadvisory.lease). NULL unless the lease of p_lock_id is
-- held with term p_term.
-- +goose StatementBegin
CREATE FUNCTION pgadvisory.lease_expires(p_lock_id bigint, p_term bigint)
RETURNS timestamptz
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
SELECT s.expires_at
FROM pgadvisory.lease AS s
WHERE s.lock_id OPERATOR(pg_catalog.=) p_lock_id
  AND s.term OPERATOR(pg_catalog.=) p_term
  AND s.owner_secret IS NOT NULL
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.lease_expires(bigint, bigint) IS
'lockgen leases: when the lease of p_lock_id held with term p_term expires unless renewed (the '
'database''s clock); NULL when no such lease is held. SECURITY DEFINER: readers need no privilege '
'on pgadvisory.lease.';

-- The status view names no resigned leader either (current_leader's check
-- of pgadvisory.leader_resigned); otherwise 00008's view. Its comment is
-- said again for sqlc, whose catalog drops a view's comment when the view is
-- replaced.
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
      AND NOT EXISTS (SELECT 1 FROM pgadvisory.leader_resigned AS x
                      WHERE x.lock_id OPERATOR(pg_catalog.=) e.lock_id AND x.term OPERATOR(pg_catalog.>=) e.term)
WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory'
  AND l.objsubid OPERATOR(pg_catalog.=) 1
  AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database AS d
                    WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database());

COMMENT ON VIEW pgadvisory.status IS
'lockgen: advisory locks (bigint keys) held or awaited in this database, one row per backend, '
'key and mode, named from pgadvisory.registry (name NULL: an unregistered key; see lock_id). '
'waiting = NOT granted; blocked_by = pg_blocking_pids(pid), the backends this one waits for on '
'any lock. leader_holder, leader_term and leader_since are set on the row of a backend that '
'leads its lock now (pgadvisory.current_leader), NULL otherwise. pg_locks cannot tell '
'session-level from transaction-level holds (one row for both, whatever the hold count). '
'pg_locks and pg_stat_activity are not read atomically: a backend that just ended may show NULL '
'activity columns.';

-- +goose Down
-- 00008's status view.
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

COMMENT ON VIEW pgadvisory.status IS
'lockgen: advisory locks (bigint keys) held or awaited in this database, one row per backend, '
'key and mode, named from pgadvisory.registry (name NULL: an unregistered key; see lock_id). '
'waiting = NOT granted; blocked_by = pg_blocking_pids(pid), the backends this one waits for on '
'any lock. leader_holder, leader_term and leader_since are set on the row of a backend that '
'leads its lock now (pgadvisory.current_leader), NULL otherwise. pg_locks cannot tell '
'session-level from transaction-level holds (one row for both, whatever the hold count). '
'pg_locks and pg_stat_activity are not read atomically: a backend that just ended may show NULL '
'activity columns.';

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

DROP FUNCTION pgadvisory.lease_expires(bigint, bigint);
DROP FUNCTION pgadvisory.leader_resign(bigint, bigint);
DROP TABLE pgadvisory.leader_resigned;
DROP FUNCTION pgadvisory.lease_release(bigint, uuid);
DROP FUNCTION pgadvisory.lease_renew(bigint[], uuid, interval);
DROP FUNCTION pgadvisory.lease_acquire(bigint, text, uuid, interval, text);
DROP TABLE pgadvisory.lease;
