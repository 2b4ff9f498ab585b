-- name: PublishFence :execrows
-- Publishes token as lock_id's current fencing token, unless a newer one is
-- already published (0 rows: the caller is stale). It waits at most
-- lock_timeout for writes still in flight with the previous token (they hold
-- the fence row FOR SHARE); the FROM subquery sets that timeout for this
-- statement's own transaction before the row lock is requested.
INSERT INTO pgadvisory.fence AS f (lock_id, token)
SELECT sqlc.arg(lock_id)::bigint, sqlc.arg(token)::bigint
FROM (SELECT set_config('lock_timeout', sqlc.arg(lock_timeout)::text, true)) AS timeout
ON CONFLICT (lock_id) DO UPDATE
SET token = excluded.token, published_at = now()
WHERE f.token < excluded.token;

-- name: SetFencingToken :exec
-- Makes the current transaction carry token for fenced writes.
SELECT set_config('pgadvisory.fencing_token', sqlc.arg(token)::bigint::text, true);
