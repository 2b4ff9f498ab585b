// Package sqlcstd is lockgen's own SQL (queries/) for database/sql, as sqlc
// generates it from sqlc.yaml (the "databasesql" target) against the
// migrations. Only pgadvisory imports it. Do not edit the generated files:
// change queries/ and run `go tool -modfile=tools/go.mod sqlc generate`.
package sqlcstd
