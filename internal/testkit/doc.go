// Package testkit is the room of everything lockgen's tests need and users
// never import. It holds no code itself; its packages are:
//
//   - testdb: a throwaway database per test package on LOCKGEN_DATABASE_URL,
//     unique lock keys and schemas per test, a bounded test context, empty
//     databases.
//   - migrated: the package database with lockgen's schema applied; a
//     database restored from a dump without it.
//   - frontdoor: one test body over both front doors (database/sql and
//     pgx): Door, Tx, Open, ForEach, Hold.
//   - witness: a pool of its own that sees what a call committed and what
//     the server holds (pg_locks, pg_stat_activity).
//   - sqlstate: assertions on an error's SQLSTATE and pgadvisory's typed
//     error.
//   - fencing: fenced tables, tokens, publishes, holders and writers of the
//     fencing tests.
//   - faultproxy: a TCP proxy that cuts, blackholes or cuts after a chosen
//     message.
//   - stubpg: a server speaking PostgreSQL's wire protocol whose advisory
//     locks exclude nobody (lockgen doctor's exclusion check).
//   - pgcluster: throwaway PostgreSQL clusters (standby, settings) and
//     PgBouncer.
//   - wirecount: round trips counted on the wire.
//   - lockscene: locks held and awaited by other sessions, for lockgen
//     status.
//   - designsource/pglock: the design source's RunExclusive, the baseline of
//     benchmarks and controls.
//   - generatedlocks: lockgen's generated code for declarations of every
//     shape.
//   - benchratio: the command that turns benchmark output into paired ratios
//     (.ci/bench, bench/anchors/run.sh).
package testkit
