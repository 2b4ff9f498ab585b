-- lockgen keyspace rule, SQL twin of keyspace.ParamID (see keyspace/doc.go).
--
-- key = convert_to(name, 'UTF8') || for each parameter p, in order:
--       0x00 || int4send(octet_length(convert_to(p, 'UTF8'))) || convert_to(p, 'UTF8')
-- id  = first 8 bytes of sha256(key), read as a big-endian two's-complement bigint
--
-- Written for PostgreSQL 13 and later: string bodies (no BEGIN ATOMIC), every
-- function schema-qualified, and no string literal whose meaning depends on
-- standard_conforming_strings.

-- +goose Up
CREATE SCHEMA pgadvisory;

-- The functions are pure; any role may call them.
GRANT USAGE ON SCHEMA pgadvisory TO PUBLIC;

-- +goose StatementBegin
CREATE FUNCTION pgadvisory.lock_id(name text, VARIADIC params text[] DEFAULT '{}')
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
SELECT CASE
    -- A NULL or multi-dimensional parameter has no Go counterpart: NULL,
    -- never an ID that silently equals another tuple's.
    WHEN pg_catalog.array_ndims(params) > 1 THEN NULL
    WHEN EXISTS (SELECT 1 FROM pg_catalog.unnest(params) AS n(p) WHERE n.p IS NULL) THEN NULL
    ELSE ('x' || pg_catalog.encode(pg_catalog.substr(pg_catalog.sha256(
            pg_catalog.convert_to(name, 'UTF8')
            || COALESCE((
                SELECT pg_catalog.string_agg(
                           pg_catalog.decode('00', 'hex')
                           || pg_catalog.int4send(pg_catalog.octet_length(e.b))
                           || e.b,
                           ''::bytea ORDER BY e.ord)
                FROM (
                    SELECT pg_catalog.convert_to(u.p, 'UTF8') AS b, u.ord
                    FROM pg_catalog.unnest(params) WITH ORDINALITY AS u(p, ord)
                ) AS e
            ), ''::bytea)
         ), 1, 8), 'hex'))::bit(64)::bigint
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.lock_id(text, text[]) IS
'lockgen keyspace rule (same IDs as Go keyspace.ParamID): the first 8 bytes of '
'sha256(key) as a big-endian bigint, where key = convert_to(name, ''UTF8'') followed, for '
'each parameter in order, by 0x00, its UTF-8 length as a 4-byte big-endian integer and its '
'UTF-8 bytes. Parameters are canonical text: int64 in decimal (''42''), uuid lowercase '
'hyphenated, bool ''true''/''false'', strings as is. lock_id(''reports.daily_email'') = '
'-6078806957557529815. Names are not validated (see pgadvisory.valid_lock_name). A NULL '
'name, a NULL parameter or a multi-dimensional array returns NULL.';

-- +goose StatementBegin
CREATE FUNCTION pgadvisory.valid_lock_name(name text)
RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
SELECT pg_catalog.octet_length(name) <= 128
   AND (name COLLATE "C") ~ '^[a-z][a-z0-9_]*([.][a-z][a-z0-9_]*)*$'
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION pgadvisory.valid_lock_name(text) IS
'lockgen lock-name rule (Go keyspace.ValidateName == nil): lowercase dotted segments, each '
'[a-z][a-z0-9_]*, at most 128 bytes, e.g. ''billing.invoice''.';

-- +goose Down
DROP FUNCTION pgadvisory.valid_lock_name(text);
DROP FUNCTION pgadvisory.lock_id(text, text[]);
-- Without CASCADE: objects that others put in the schema make Down fail
-- instead of disappearing.
DROP SCHEMA pgadvisory;
