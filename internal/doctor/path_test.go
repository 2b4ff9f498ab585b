package doctor_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/doctor"
	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
	"github.com/lockgen/lockgen/internal/testkit/stubpg"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// The pooler and exclusion checks against a direct connection and PgBouncer
// in each pool mode.

func TestPoolerDirectConnectionPasses(t *testing.T) {
	requireStatus(t, run(t, testdb.URL(t), doctor.Pooler), doctor.Pass, "no pooler seen", "the pid announced at connect is the server's")
}

func TestPoolerWarnsAboutTransactionPooling(t *testing.T) {
	bouncer := pgcluster.StartPgBouncer(t, testdb.URL(t), "transaction")
	requireStatus(t, run(t, bouncer, doctor.Pooler), doctor.Warn,
		"moves clients between server connections", "pool_mode=transaction", "session locks (RunSession)")
}

func TestPoolerWarnsAboutSessionPooling(t *testing.T) {
	bouncer := pgcluster.StartPgBouncer(t, testdb.URL(t), "session")
	requireStatus(t, run(t, bouncer, doctor.Pooler), doctor.Warn,
		"a pooler answers", "each connection kept its server connection", "pool_mode=session")
}

func TestPoolerFailsOnStatementPooling(t *testing.T) {
	bouncer := pgcluster.StartPgBouncer(t, testdb.URL(t), "statement")
	requireStatus(t, run(t, bouncer, doctor.Pooler), doctor.Fail, "refuses a transaction of two statements", "pool_mode=statement")
}

func TestExclusionPassesOnADirectConnection(t *testing.T) {
	before := advisoryLocks(t)
	requireStatus(t, run(t, testdb.URL(t), doctor.Exclusion), doctor.Pass,
		"could not take the session lock", "transaction locks (RunExclusive) exclude too")
	require.Equal(t, before, advisoryLocks(t), "the check releases every lock it took")
}

// TestExclusionFailsThroughAMultiplexingPooler: PgBouncer in transaction
// mode with one server connection hands both client connections the same
// server session, where a session lock is granted again to its holder. The
// check sees the second connection get the lock, says why, and releases
// both grants.
func TestExclusionFailsThroughAMultiplexingPooler(t *testing.T) {
	bouncer := pgcluster.StartPgBouncer(t, testdb.URL(t), "transaction", pgcluster.WithSetting("default_pool_size", "1"))
	before := advisoryLocks(t)
	c := run(t, bouncer, doctor.Exclusion)
	requireStatus(t, c, doctor.Fail, "a second connection also got the session lock", "both were answered by backend", "multiplexes client connections onto one server session")
	require.Contains(t, c.Detail, "transaction locks not tested", "one server connection cannot serve a second transaction while the first is open")
	require.Equal(t, before, advisoryLocks(t), "the check releases every lock it took, through the pooler too")
}

// TestExclusionPassesThroughSessionPooling: the control for the test above:
// the same PgBouncer in session mode keeps each client on its own server
// session, so session locks exclude.
func TestExclusionPassesThroughSessionPooling(t *testing.T) {
	bouncer := pgcluster.StartPgBouncer(t, testdb.URL(t), "session")
	requireStatus(t, run(t, bouncer, doctor.Exclusion), doctor.Pass, "could not take the session lock")
}

// advisoryLocks counts the advisory locks held in the package database, as
// seen directly on the server.
func advisoryLocks(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, testdb.DB(t).QueryRow(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n))
	return n
}

// TestExclusionFailsOnAStubImplementation: a server whose advisory-lock
// functions answer without excluding (a protocol-level double, like
// CockroachDB's no-op session locks) grants the lock to two backends.
func TestExclusionFailsOnAStubImplementation(t *testing.T) {
	stub := stubpg.Start(t)
	c := run(t, stub.URL(), doctor.Exclusion)
	requireStatus(t, c, doctor.Fail, "a second connection also got the session lock", "both hold it", "exclude nobody (a stub implementation")
	require.Contains(t, c.Detail, "transaction locks exclude nobody either")
}
