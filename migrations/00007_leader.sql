-- lockgen leader election: terms the database enforces (see pgadvisory.Lead).
--
-- A candidate holds the SESSION-level advisory lock of a leadership on its
-- own connection. Once the lock is granted it sends, on that connection and
-- outside any transaction, one statement:
--
--   SELECT term, elected_at FROM pgadvisory.leader_elect(lock_id, holder, publish_timeout);
--
-- leader_elect checks that the calling backend holds the advisory lock
-- lock_id at session level in exclusive mode (without reading pg_locks,
-- which costs a scan of the whole lock table: see the function), draws the
-- next token from pgadvisory.fencing_token_seq and publishes it in
-- pgadvisory.fence for lock_id exactly as the fenced acquisition does
-- (waiting at most publish_timeout for writes still in flight with the
-- previous token: 55P03; LF004 when a newer token is already published,
-- i.e. the sequence went backwards), and records the leader in
-- pgadvisory.leader. It forces synchronous_commit = on for its transaction
-- when it is off, so the term is durable before the leader acts. The term IS
-- a fencing token: RunFenced / SetFencingToken with an older term fail with
-- LF001 once a newer leader is elected.
--
-- pgadvisory.leader keeps the last elected leader of each lock: lock_id,
-- holder (a name for people), term, pid of the backend that holds the lock,
-- elected_at (server clock). A row alone does not say that its leader
-- still leads: pgadvisory.current_leader(lock_id) returns it only while
-- that backend is alive, is the same backend, holds the lock in exclusive
-- mode, and its term is the lock's published token. The same backend: a
-- backend with that pid that started before elected_at (pg_stat_activity's
-- backend_start). The elected backend was running at elected_at; a backend
-- that reuses its pid can start only after it ended, so after elected_at.
-- This needs no read of pg_stat_activity in the election (a scan of every
-- backend's entry), only in current_leader.
--
-- The status view gains the columns leader_holder, leader_term and
-- leader_since on the row of a backend that leads its lock now.
--
-- Privileges: leader_elect and current_leader run as their owner (SECURITY
-- DEFINER, search_path fixed), so candidates and readers need no privilege
-- on lockgen's tables; EXECUTE stays granted to PUBLIC, as for
-- fence_acquire: leader_elect publishes only a fresh token, and only for a
-- caller that holds the lock. current_leader runs as its owner: where the
-- owner may not read another role's backend_start (neither a superuser nor
-- a member of pg_read_all_stats or of that role), pg_stat_activity shows it
-- NULL and the reused-pid check is skipped; the others remain.
--
-- Written for PostgreSQL 13 and later; every function and relation is
-- schema-qualified.

-- +goose Up
CREATE TABLE pgadvisory.leader (
    lock_id       bigint PRIMARY KEY,
    holder        text NOT NULL,
    term          bigint NOT NULL,
    pid           integer NOT NULL,
    elected_at    timestamptz NOT NULL
);

COMMENT ON TABLE pgadvisory.leader IS
'lockgen leader election: the last leader elected for each lock (pgadvisory.leader_elect). A row '
'alone does not mean that its leader still leads: pgadvisory.current_leader(lock_id) confirms it '
'(the backend pid, started before elected_at, is alive and holds the lock, and term is the '
'published fencing token).';

-- +goose StatementBegin
CREATE FUNCTION pgadvisory.leader_elect(
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

-- +goose StatementBegin
CREATE FUNCTION pgadvisory.current_leader(p_lock_id bigint)
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
-- 00003's status view: CREATE OR REPLACE cannot drop columns.
DROP VIEW pgadvisory.status;

CREATE VIEW pgadvisory.status AS
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
       pg_catalog.pg_blocking_pids(l.pid) AS blocked_by
FROM pg_catalog.pg_locks AS l
CROSS JOIN LATERAL (SELECT (l.classid::bigint << 32) | l.objid::bigint AS lock_id) AS k
LEFT JOIN pg_catalog.pg_stat_activity AS a ON a.pid = l.pid
LEFT JOIN pgadvisory.registry AS r ON r.lock_id = k.lock_id
WHERE l.locktype = 'advisory'
  AND l.objsubid = 1
  AND l.database = (SELECT d.oid FROM pg_catalog.pg_database AS d
                    WHERE d.datname = pg_catalog.current_database());

COMMENT ON VIEW pgadvisory.status IS
'lockgen: advisory locks (bigint keys) held or awaited in this database, one row per backend, '
'key and mode, named from pgadvisory.registry (name NULL: an unregistered key; see lock_id). '
'waiting = NOT granted; blocked_by = pg_blocking_pids(pid), the backends this one waits for on '
'any lock. pg_locks cannot tell session-level from transaction-level holds (one row for both, '
'whatever the hold count). pg_locks and pg_stat_activity are not read atomically: a backend '
'that just ended may show NULL activity columns.';

DROP FUNCTION pgadvisory.current_leader(bigint);
DROP FUNCTION pgadvisory.leader_elect(bigint, text, text);
DROP TABLE pgadvisory.leader;
