-- name: EnsureReport :exec
INSERT INTO reports (day) VALUES ($1)
ON CONFLICT (day) DO NOTHING;

-- name: GetReport :one
SELECT day, sent_at, sent_by FROM reports
WHERE day = $1;

-- name: MarkReportSent :execrows
UPDATE reports SET sent_at = now(), sent_by = sqlc.arg(sent_by)::text
WHERE day = sqlc.arg(day) AND sent_at IS NULL;

-- name: HoldsAdvisoryLock :one
-- HoldsAdvisoryLock reports whether the backend running the query holds the
-- bigint advisory lock lock_id. Inside Locker.RunExclusive it is true:
-- the repository runs on the lock's own transaction.
SELECT EXISTS (
    SELECT 1 FROM pg_catalog.pg_locks
    WHERE locktype = 'advisory' AND objsubid = 1 AND granted
      AND pid = pg_backend_pid()
      AND ((classid::bigint << 32) | objid::bigint) = sqlc.arg(lock_id)::bigint
) AS held;
