-- lockgen run-once ledger: finished_at is set at COMMIT.
--
-- pgadvisory.RunOnce claims its window before fn runs (INSERT .. ON CONFLICT
-- DO NOTHING in the lock transaction), so the claim and fn's work commit or
-- fail together and a window's work never runs twice, even when fn ends the
-- transaction itself. The claim cannot know when fn will finish: a deferred
-- constraint trigger sets finished_at when the transaction commits, at no
-- extra round trip, for lockgen's claims and for rows that other code writes
-- alike. Before this migration, finished_at of a claim is its claim time.
--
-- Privileges: the trigger function is SECURITY DEFINER (owned by the
-- migrating role, which owns the table), so callers of RunOnce still need
-- only INSERT and SELECT on pgadvisory.run_once.
--
-- Written for PostgreSQL 13 and later; every function and relation is
-- schema-qualified.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION pgadvisory.run_once_finish()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE pgadvisory.run_once SET finished_at = pg_catalog.clock_timestamp()
    WHERE lock_id = NEW.lock_id AND window_key = NEW.window_key;
    RETURN NULL;
END $$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.run_once_finish() IS
'lockgen run-once ledger: sets finished_at of a new row when its transaction commits '
'(deferred constraint trigger run_once_finish).';

CREATE CONSTRAINT TRIGGER run_once_finish
AFTER INSERT ON pgadvisory.run_once
DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW EXECUTE FUNCTION pgadvisory.run_once_finish();

COMMENT ON COLUMN pgadvisory.run_once.started_at IS
'when the window was claimed: right after the lock was granted, before fn ran';
COMMENT ON COLUMN pgadvisory.run_once.finished_at IS
'when the run committed (set by the deferred trigger run_once_finish)';

-- +goose Down
DROP TRIGGER run_once_finish ON pgadvisory.run_once;
DROP FUNCTION pgadvisory.run_once_finish();
COMMENT ON COLUMN pgadvisory.run_once.started_at IS NULL;
COMMENT ON COLUMN pgadvisory.run_once.finished_at IS NULL;
