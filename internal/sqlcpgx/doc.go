// Package sqlcpgx is lockgen's own SQL (queries/) for pgx/v5, as sqlc
// generates it from sqlc.yaml (the "pgx" target) against the migrations.
// Only pgadvisory imports it. Do not edit the generated files:
// change queries/ and run `go tool -modfile=tools/go.mod sqlc generate`.
package sqlcpgx
