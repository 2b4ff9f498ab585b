-- name: ClaimRun :one
-- Claims the run of lock_id in window_key in the lock transaction, before fn
-- runs: the row commits with fn's work or not at all, so a window's work
-- never runs twice, even when fn ends the transaction itself, and the
-- primary key (lock_id, window_key) makes a second run impossible even for
-- code that bypasses lockgen. No row comes back when the window already has
-- a run (committed before the lock was granted: at READ COMMITTED the
-- statement sees it), or when the lock statement did not grant the call's
-- locks (pgadvisory.granted is not 'on'): a claim pipelined behind a lock
-- that was not granted writes nothing and waits for nobody. token is the
-- call's fencing token, if any (pgadvisory.fencing_token); finished_at is
-- set at COMMIT by the trigger run_once_finish.
INSERT INTO pgadvisory.run_once (lock_id, window_key, token, holder, started_at, finished_at)
SELECT sqlc.arg(lock_id)::bigint, sqlc.arg(window_key)::text,
       NULLIF(current_setting('pgadvisory.fencing_token', true), '')::bigint,
       sqlc.arg(holder)::text, clock_timestamp(), clock_timestamp()
WHERE current_setting('pgadvisory.granted', true) = 'on'
ON CONFLICT (lock_id, window_key) DO NOTHING
RETURNING true AS claimed;
