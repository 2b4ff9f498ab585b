-- name: SetFencingToken :exec
-- Makes the current transaction carry token for fenced writes.
SELECT set_config('pgadvisory.fencing_token', sqlc.arg(token)::bigint::text, true);
