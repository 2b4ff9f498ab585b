-- name: RunOnceDone :one
-- Whether a successful run of lock_id in window_key is recorded. Runs in the
-- lock transaction after the lock statement, so (at READ COMMITTED) it sees
-- every run committed before the lock was granted.
SELECT EXISTS (
  SELECT 1 FROM pgadvisory.run_once
  WHERE lock_id = sqlc.arg(lock_id)::bigint AND window_key = sqlc.arg(window_key)::text
);

-- name: RecordRun :exec
-- Records a successful run in the lock transaction, so it commits with the
-- run's own writes (and a failed run leaves no row). The primary key
-- (lock_id, window_key) makes a second success impossible.
INSERT INTO pgadvisory.run_once (lock_id, window_key, token, holder, started_at, finished_at)
VALUES (sqlc.arg(lock_id)::bigint, sqlc.arg(window_key)::text, sqlc.narg(token)::bigint,
        sqlc.arg(holder)::text, sqlc.arg(started_at)::timestamptz, clock_timestamp());
