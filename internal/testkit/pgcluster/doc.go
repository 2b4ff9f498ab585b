// Package pgcluster starts throwaway PostgreSQL clusters, hot standbys and
// PgBouncer instances for tests that the shared test server cannot serve:
// tests that need a standby, unusual server settings (a tiny lock table) or a
// pooler in front of the server.
//
// [Start] runs initdb in a private temporary directory and starts the server
// on 127.0.0.1 at a free port, with fsync off and its Unix socket in that
// directory; [Cluster.StartStandby] adds a streaming hot standby
// (pg_basebackup -R); [Cluster.Crash] and [Cluster.Restart] stop a server
// abruptly and start it again (crash recovery); [StartPgBouncer] puts a
// PgBouncer in front of any database. Everything is stopped (pg_ctl stop -m immediate for servers) and
// deleted when the test ends. [Shared] gives all tests of a test binary one
// cluster, which keeps CI time low: initdb is the slow step (about a second).
//
// When the test binary runs as root, every server and PgBouncer process runs
// as the OS user "postgres", because both refuse to run as root.
//
// Cleanup does not depend on the test binary ending normally. Each directory
// is watched by a small reaper process (a shell running as the server's user)
// that waits for its stdin, a pipe from the test binary, to close. The binary
// closes it at cleanup, and the kernel closes it when the binary exits for any
// reason (a panic, a -timeout, a kill); the reaper then stops the server and
// removes the directory. That is also how [Shared] clusters are cleaned up
// without a TestMain hook. PgBouncer is a child of the test binary that the
// kernel terminates when the binary dies (PR_SET_PDEATHSIG).
//
// The PostgreSQL binaries (initdb, pg_ctl, postgres, pg_basebackup) are taken
// from the directory named by LOCKGEN_PG_BINDIR, else from the newest
// /usr/lib/postgresql/*/bin (Debian, Ubuntu) or /usr/pgsql-*/bin (RHEL), else
// from PATH. PgBouncer is the binary LOCKGEN_PGBOUNCER names, else the one in PATH or /usr/sbin. When they are
// missing, the calling test is skipped, or fails when the CI environment
// variable is set (see testdb.InCI), so a CI run cannot pass by skipping.
//
// This package is Linux-only; elsewhere the calling tests are skipped.
package pgcluster
