-- name: CurrentLeader :one
-- The leader of a lock now (pgadvisory.current_leader, migration 00007):
-- no row when none leads.
SELECT holder, term, pid, elected_at FROM pgadvisory.current_leader(sqlc.arg(lock_id)::bigint);
