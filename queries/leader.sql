-- name: CurrentLeader :one
-- The leader of a lock now (pgadvisory.current_leader, migration 00007):
-- no row when none leads.
-- A lease leader (pid 0) comes with its lease's expiry; a session-lock
-- leader's expires_at is elected_at, never read (so that it is not NULL).
SELECT l.holder, l.term, l.pid, l.elected_at,
       COALESCE(pgadvisory.lease_expires(l.lock_id, l.term), l.elected_at) AS expires_at
FROM pgadvisory.current_leader(sqlc.arg(lock_id)::bigint) AS l;
