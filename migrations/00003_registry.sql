-- lockgen registry of declared locks and the pgadvisory.status view: which
-- advisory locks are held or awaited in this database, by declared name.
--
-- pg_locks shows an advisory lock taken with a bigint key as
-- classid = key >> 32, objid = key & 0xffffffff, objsubid = 1 (the two-int4
-- key space has objsubid = 2 and is not shown here); the key is rebuilt as
-- ((classid::bigint << 32) | objid::bigint). A key is a hash, so its name
-- comes from a registry that services fill at start-up:
--
--   pgadvisory.registry_declaration  one row per declared lock (plain and
--                                    parameterized), by name
--   pgadvisory.registry              one row per known lock ID: every plain
--                                    lock, and the registered instances of
--                                    parameterized locks (e.g. one row per
--                                    tenant of billing.invoice)
--
-- Go: pgadvisory.Register(ctx, db, locks.Declared) fills both from the
-- generated registry, pgadvisory.RegisterInstance adds one instance;
-- CLI: lockgen register -f locks.yaml; SQL, for many instances at once:
--
--   SELECT pgadvisory.register_instance('billing.invoice', id::text) FROM tenants;
--
-- A held lock whose ID is in neither (an instance never registered, or a key
-- lockgen did not declare) is shown with its raw key and a NULL name.
--
-- Privileges: the migrating role owns everything and grants nothing beyond
-- schema USAGE (granted by 00001). Registering roles need INSERT, SELECT and
-- UPDATE on both tables and EXECUTE on register_instance (PUBLIC has it by
-- default); readers of the view need SELECT on it, and pg_read_all_stats
-- (or pg_monitor) to see application_name, client_addr, xact_start and state
-- of other roles' sessions.
--
-- Written for PostgreSQL 13 and later; every function and relation is
-- schema-qualified.

-- +goose Up
CREATE TABLE pgadvisory.registry_declaration (
    name            text PRIMARY KEY CHECK (pgadvisory.valid_lock_name(name)),
    lock_id         bigint,
    declared_params jsonb CHECK (pg_catalog.jsonb_typeof(declared_params) = 'array'),
    doc             text,
    registered_at   timestamptz NOT NULL DEFAULT now(),
    -- A plain lock has an ID and no parameters; a parameterized one has one
    -- ID per parameter value, so no ID here.
    CHECK ((lock_id IS NULL) <> (declared_params IS NULL))
);

COMMENT ON TABLE pgadvisory.registry_declaration IS
'lockgen registry: one row per declared lock, filled by pgadvisory.Register or lockgen register. '
'A plain lock has lock_id and NULL declared_params; a parameterized lock has NULL lock_id and '
'declared_params, its parameters in declaration order: [{"name": "tenant_id", "type": "int64"}]. '
'Rows are added and updated, never deleted by lockgen (several services may share the database); '
'delete a retired declaration by hand.';

CREATE TABLE pgadvisory.registry (
    lock_id         bigint PRIMARY KEY,
    name            text NOT NULL CHECK (pgadvisory.valid_lock_name(name)),
    params          jsonb CHECK (pg_catalog.jsonb_typeof(params) = 'object'),
    declared_params jsonb CHECK (pg_catalog.jsonb_typeof(declared_params) = 'array'),
    doc             text,
    registered_at   timestamptz NOT NULL DEFAULT now(),
    CHECK ((params IS NULL) = (declared_params IS NULL))
);

COMMENT ON TABLE pgadvisory.registry IS
'lockgen registry: the name of each known advisory-lock ID. Plain locks have NULL params and '
'declared_params; a registered instance of a parameterized lock has params, its canonical '
'parameter text by name ({"tenant_id": "42"}), and the declared_params it was registered with '
'(they define the ID). An ID registered again under another name (a rename that kept the ID) '
'takes the last name registered. pgadvisory.status looks names up here.';

-- The migration lock: visible by name while Migrate runs.
INSERT INTO pgadvisory.registry (lock_id, name, doc) VALUES
    (7946592368616403100, 'lockgen.migrate',
     'Held (session level) by pgadvisory.Migrate while it applies lockgen''s migrations.');

-- +goose StatementBegin
CREATE FUNCTION pgadvisory.register_instance(name text, VARIADIC params text[] DEFAULT '{}')
RETURNS bigint
LANGUAGE plpgsql VOLATILE STRICT
AS $$
DECLARE
    v_decl  pgadvisory.registry_declaration;
    v_n     integer := COALESCE(pg_catalog.cardinality(params), 0);
    v_want  integer;
    v_param jsonb;
    v_canon text[] := '{}';
    v_obj   jsonb := '{}';
    v_text  text;
    v_id    bigint;
BEGIN
    SELECT d.* INTO v_decl FROM pgadvisory.registry_declaration AS d WHERE d.name = register_instance.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgadvisory: lock % is not in pgadvisory.registry_declaration', name
            USING ERRCODE = '22023',
                  HINT = 'Register the declarations first: pgadvisory.Register or lockgen register.';
    END IF;
    IF v_decl.declared_params IS NULL THEN
        RAISE EXCEPTION 'pgadvisory: lock % is a plain lock (ID %): it takes no parameters', name, v_decl.lock_id
            USING ERRCODE = '22023';
    END IF;
    v_want := pg_catalog.jsonb_array_length(v_decl.declared_params);
    IF pg_catalog.array_ndims(params) > 1 OR v_n <> v_want THEN
        RAISE EXCEPTION 'pgadvisory: lock % takes % parameter(s), got %', name, v_want, v_n
            USING ERRCODE = '22023';
    END IF;
    FOR i IN 1 .. v_n LOOP
        v_param := v_decl.declared_params -> (i - 1);
        IF params[i] IS NULL THEN
            RAISE EXCEPTION 'pgadvisory: lock %: parameter % is NULL', name, v_param ->> 'name'
                USING ERRCODE = '22004';
        END IF;
        -- Canonical text, as keyspace.Canonical: '+042' is 42, upper-case
        -- UUIDs are lower-cased, booleans are true/false.
        BEGIN
            v_text := CASE v_param ->> 'type'
                WHEN 'int64' THEN params[i]::bigint::text
                WHEN 'uuid'  THEN params[i]::uuid::text
                WHEN 'bool'  THEN params[i]::boolean::text
                WHEN 'string' THEN params[i]
            END;
        EXCEPTION WHEN data_exception THEN
            RAISE EXCEPTION 'pgadvisory: lock %: parameter % (%): %', name, v_param ->> 'name', v_param ->> 'type', SQLERRM
                USING ERRCODE = SQLSTATE;
        END;
        IF v_text IS NULL THEN
            RAISE EXCEPTION 'pgadvisory: lock %: parameter % has unknown type %', name, v_param ->> 'name', v_param ->> 'type'
                USING ERRCODE = '22023';
        END IF;
        v_canon := v_canon || v_text;
        v_obj := v_obj || pg_catalog.jsonb_build_object(v_param ->> 'name', v_text);
    END LOOP;
    v_id := pgadvisory.lock_id(name, VARIADIC v_canon);
    INSERT INTO pgadvisory.registry AS r (lock_id, name, params, declared_params, doc)
    VALUES (v_id, name, v_obj, v_decl.declared_params, v_decl.doc)
    ON CONFLICT (lock_id) DO UPDATE
        SET name = excluded.name, params = excluded.params,
            declared_params = excluded.declared_params, doc = excluded.doc, registered_at = now()
        WHERE (r.name, r.params, r.declared_params, r.doc)
              IS DISTINCT FROM (excluded.name, excluded.params, excluded.declared_params, excluded.doc);
    RETURN v_id;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.register_instance(text, text[]) IS
'lockgen registry: records one instance of the parameterized lock name (which must be in '
'pgadvisory.registry_declaration) in pgadvisory.registry and returns its ID. Parameters are '
'given in declaration order and canonicalized by their declared types (''+042'' registers '
'tenant 42). For many at once: SELECT pgadvisory.register_instance(''billing.invoice'', '
'id::text) FROM tenants. A NULL name or array returns NULL and registers nothing.';

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

-- +goose Down
DROP VIEW pgadvisory.status;
DROP FUNCTION pgadvisory.register_instance(text, text[]);
DROP TABLE pgadvisory.registry;
DROP TABLE pgadvisory.registry_declaration;
