package doctor_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/doctor"
	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
	"github.com/lockgen/lockgen/internal/testkit/stubpg"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// The pooler and exclusion checks against a direct connection and PgBouncer
// in each pool mode, for every use and for transaction locks only.

var (
	everyUse      = doctor.Config{}
	exclusiveOnly = doctor.Config{Uses: []doctor.Use{doctor.UseExclusive}}
)

func TestPoolerDirectConnectionPasses(t *testing.T) {
	c := run(t, testdb.URL(t), doctor.Pooler)
	requireStatus(t, c, doctor.Pass, "no pooler seen", "the pid announced at connect is the server's",
		"sent 5 statements back to back", "was seen by 4 of the 4 that followed", "did not see the first connection's setting")
}

// roundRobin is PgBouncer in mode with server_round_robin=1 and two
// server connections (default_pool_size=2, the default), both idle when
// doctor connects.
func roundRobin(t *testing.T, mode string) string {
	t.Helper()
	requireNoLocksYet(t)
	url := pgcluster.StartPgBouncer(t, testdb.URL(t), mode,
		pgcluster.WithSetting("server_round_robin", "1"), pgcluster.WithSetting("default_pool_size", "2"))
	pgcluster.WarmPgBouncer(t, url, 2)
	return url
}

// alternate is the probe doctor had before: two connections asking for
// their backend pid in turn, A, B, A, B. It reports whether each kept one
// backend of its own, which that probe took for session pooling.
func alternate(t *testing.T, url string) bool {
	t.Helper()
	ctx := testdb.Context(t)
	db := open(t, url)
	a, err := db.Conn(ctx)
	require.NoError(t, err)
	defer a.Close()
	b, err := db.Conn(ctx)
	require.NoError(t, err)
	defer b.Close()
	seen := map[*sql.Conn][]int{}
	for range 3 {
		for _, c := range []*sql.Conn{a, b} {
			var pid int
			require.NoError(t, c.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
			seen[c] = append(seen[c], pid)
		}
	}
	t.Logf("alternating probe: %v and %v", seen[a], seen[b])
	for _, ps := range seen {
		for _, p := range ps {
			if p != ps[0] {
				return false
			}
		}
	}
	return seen[a][0] != seen[b][0]
}

// TestPoolerFailsOnTransactionPoolingWithRoundRobin: PgBouncer in
// transaction mode with server_round_robin=1 and idle server connections
// keeps two alternating clients on one backend each, as session pooling
// would (the probe doctor had before passed it). A client's session lock
// really leaks there: its unlock runs on another backend. Statements sent
// back to back on one client show the pooler; doctor fails the pooler and
// exclusion checks for every use, and passes them for transaction locks
// only.
func TestPoolerFailsOnTransactionPoolingWithRoundRobin(t *testing.T) {
	url := roundRobin(t, "transaction")
	require.True(t, alternate(t, url), "control: alternating clients each keep a backend of their own")
	requireSessionLockLeaks(t, url)

	pgcluster.WarmPgBouncer(t, url, 2)
	c := run(t, url, doctor.Pooler, everyUse)
	requireStatus(t, c, doctor.Fail, "one client's statements ran in more than one server session", "pool_mode=transaction",
		"these do not: session locks (RunSession), leader election (Lead, Campaign), pgadvisory.Migrate", "checked for every entry point")
	require.Contains(t, c.Fix, "-uses exclusive")
	require.Contains(t, c.Fix, "lead with WithLease", "the fix names what leads through a transaction pooler")
	requireStatus(t, run(t, url, doctor.Exclusion, everyUse), doctor.Fail,
		"session locks exclude nobody reliably here", "you don't own a lock", "no session lock was taken", "transaction locks (RunExclusive) exclude too")

	c = run(t, url, doctor.Pooler, exclusiveOnly)
	requireStatus(t, c, doctor.Pass, "these work: transaction locks (RunExclusive, RunOnce, fencing) [used]", "checked for -uses exclusive")
	requireStatus(t, run(t, url, doctor.Exclusion, exclusiveOnly), doctor.Pass,
		"transaction locks (RunExclusive) exclude too", "session locks were not tried")
	requireNoProbeLocks(t)
}

// TestPoolerSessionModeWithRoundRobin: the control: the same PgBouncer in
// session mode keeps each client on its server session. The probe proves
// nothing (it cannot prove session pooling, and says so): a warning for
// session-level uses, a pass for transaction locks only; exclusion passes.
func TestPoolerSessionModeWithRoundRobin(t *testing.T) {
	url := roundRobin(t, "session")
	c := run(t, url, doctor.Pooler, everyUse)
	requireStatus(t, c, doctor.Warn, "a pooler answers", "this probe saw no transaction pooling", "was seen by 4 of the 4 that followed",
		"A probe can prove transaction pooling, never session pooling")
	require.Contains(t, c.Fix, "confirm the pool's mode")
	requireStatus(t, run(t, url, doctor.Pooler, exclusiveOnly), doctor.Pass, "transaction locks work through a pooler in either mode")
	requireStatus(t, run(t, url, doctor.Exclusion, everyUse), doctor.Pass, "could not take the session lock", "transaction locks (RunExclusive) exclude too")
	requireNoProbeLocks(t)
}

// TestPoolerFailsOnTransactionPooling: PgBouncer's default hands a client
// the most recently used server connection: a second client lands in the
// first one's server session and sees its setting.
func TestPoolerFailsOnTransactionPooling(t *testing.T) {
	bouncer := pgcluster.StartPgBouncer(t, testdb.URL(t), "transaction")
	requireStatus(t, run(t, bouncer, doctor.Pooler), doctor.Fail,
		"moves clients between server connections", "a second client ran in the first one's server session", "pool_mode=transaction", "session locks (RunSession)")
	requireStatus(t, run(t, bouncer, doctor.Pooler, exclusiveOnly), doctor.Pass, "a second client ran in the first one's server session")
}

func TestPoolerWarnsAboutSessionPooling(t *testing.T) {
	bouncer := pgcluster.StartPgBouncer(t, testdb.URL(t), "session")
	requireStatus(t, run(t, bouncer, doctor.Pooler), doctor.Warn,
		"a pooler answers", "this probe saw no transaction pooling", "never session pooling")
}

func TestPoolerFailsOnStatementPooling(t *testing.T) {
	bouncer := pgcluster.StartPgBouncer(t, testdb.URL(t), "statement")
	requireStatus(t, run(t, bouncer, doctor.Pooler), doctor.Fail, "refuses a transaction of two statements", "pool_mode=statement")
	requireStatus(t, run(t, bouncer, doctor.Pooler, exclusiveOnly), doctor.Fail, "refuses a transaction of two statements")
}

func TestExclusionPassesOnADirectConnection(t *testing.T) {
	before := advisoryLocks(t)
	requireStatus(t, run(t, testdb.URL(t), doctor.Exclusion), doctor.Pass,
		"could not take the session lock", "transaction locks (RunExclusive) exclude too")
	require.Equal(t, before, advisoryLocks(t), "the check releases every lock it took")
}

// TestExclusionFailsThroughAMultiplexingPooler: PgBouncer in transaction
// mode with one server connection hands both client connections the same
// server session. Session locks fail without being taken; transaction
// locks cannot be tried (the second transaction waits for the only server
// connection), which warns when only transaction locks are used.
func TestExclusionFailsThroughAMultiplexingPooler(t *testing.T) {
	bouncer := pgcluster.StartPgBouncer(t, testdb.URL(t), "transaction", pgcluster.WithSetting("default_pool_size", "1"))
	before := advisoryLocks(t)
	c := run(t, bouncer, doctor.Exclusion)
	requireStatus(t, c, doctor.Fail, "session locks exclude nobody reliably here", "a second connection was answered by backend")
	require.Contains(t, c.Detail, "transaction locks not tested", "one server connection cannot serve a second transaction while the first is open")
	requireStatus(t, run(t, bouncer, doctor.Exclusion, exclusiveOnly), doctor.Warn, "transaction locks not tested", "a pooler with one server connection?")
	require.Equal(t, before, advisoryLocks(t), "the check leaves no lock behind")
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

// requireNoLocksYet waits until the package database holds no advisory
// lock before a test that counts them: an earlier test's backends, whose
// pooler stopped at its end, may still be exiting with their session locks.
// A lock that stays longer is an earlier test's leak, and fails here.
func requireNoLocksYet(t *testing.T) {
	t.Helper()
	db := testdb.DB(t) // one pool for every poll (testdb.DB opens one per call)
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n))
		return n == 0
	}, 15*time.Second, 20*time.Millisecond, "an earlier test left an advisory lock held in the package database: %s", lockHolders(t, db))
}

// lockHolders describes the sessions holding advisory locks in db's database.
func lockHolders(t *testing.T, db *sql.DB) string {
	var out string
	_ = db.QueryRow(`SELECT coalesce(string_agg(format('pid %s (%s, %s, %s): %s', a.pid, a.application_name, a.state, a.client_port, left(a.query, 80)), '; '), '')
		FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE l.locktype = 'advisory'
		AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&out)
	return out
}

// requireSessionLockLeaks takes a session lock through url and unlocks it
// on the same client connection: the unlock runs on another backend, and
// the lock stays held after the client has gone. The leaked lock is then
// released by unlocking through the pooler until an unlock lands on its
// backend (terminating the backend would leave the pooler a dead server
// connection to hand out).
func requireSessionLockLeaks(t *testing.T, url string) {
	t.Helper()
	ctx := testdb.Context(t)
	key := testdb.Key(t)
	db := open(t, url)
	c, err := db.Conn(ctx)
	require.NoError(t, err)
	var got, unlocked bool
	var lockPID, unlockPID int
	require.NoError(t, c.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1), pg_backend_pid()`, key).Scan(&got, &lockPID))
	require.True(t, got)
	require.NoError(t, c.QueryRowContext(ctx, `SELECT pg_advisory_unlock($1), pg_backend_pid()`, key).Scan(&unlocked, &unlockPID))
	require.NoError(t, c.Close())
	t.Logf("lock on backend %d, unlock on backend %d: %v", lockPID, unlockPID, unlocked)
	require.False(t, unlocked, "the unlock ran on another backend: you don't own a lock")
	require.NotEqual(t, lockPID, unlockPID)
	var holder int
	require.NoError(t, testdb.DB(t).QueryRowContext(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1
		AND ((classid::bigint << 32) | objid::bigint) = $1`, key).Scan(&holder))
	require.Equal(t, lockPID, holder, "the lock leaked: still held by the backend that took it")
	for i := 0; advisoryLocks(t) > 0; i++ {
		require.Less(t, i, 20, "the leaked lock could not be released through the pooler")
		_, err := db.ExecContext(ctx, `SELECT pg_advisory_unlock($1)`, key)
		require.NoError(t, err)
	}
}

// requireNoProbeLocks: doctor left no lock of its own in the package
// database (its keys are lockgen.doctor.exclusion instances, never held
// after a check).
func requireNoProbeLocks(t *testing.T) {
	t.Helper()
	require.Zero(t, advisoryLocks(t), "a check left an advisory lock behind")
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

var _ = context.Background
