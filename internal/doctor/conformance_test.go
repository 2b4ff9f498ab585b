package doctor_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/doctor"
	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
	"github.com/lockgen/lockgen/internal/testkit/stubpg"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// tierBudget is how long the whole conformance tier may take on a healthy
// path (one to four seconds on a loaded 2-vCPU test machine).
const tierBudget = 10 * time.Second

// conformance runs every conformance check through url and returns the
// outcomes by name, failing t if they took tierBudget or more.
func conformance(t *testing.T, url string, cfg ...doctor.Config) map[string]doctor.Check {
	t.Helper()
	c := doctor.Config{}
	if len(cfg) > 0 {
		c = cfg[0]
	}
	c.DB = open(t, url)
	defer c.DB.Close()
	start := time.Now()
	r, err := doctor.RunConformance(testdb.Context(t), c)
	require.NoError(t, err)
	took := time.Since(start)
	t.Logf("doctor -conformance: %v", took)
	require.Less(t, took, tierBudget, "the whole tier on a path that answers")
	require.Len(t, r.Checks, len(doctor.ConformanceNames))
	got := map[string]doctor.Check{}
	for i, ch := range r.Checks {
		require.Equal(t, doctor.ConformanceNames[i], ch.Name)
		t.Logf("%s %s: %s | fix: %s", ch.Status, ch.Name, ch.Detail, ch.Fix)
		got[ch.Name] = ch
	}
	return got
}

// TestConformancePassesDirect: on a direct connection every conformance
// check passes and no lock is left behind.
func TestConformancePassesDirect(t *testing.T) {
	before := advisoryLocks(t)
	for _, c := range conformance(t, testdb.URL(t)) {
		requireStatus(t, c, doctor.Pass)
	}
	require.Equal(t, before, advisoryLocks(t), "the checks release every lock they took")
}

// TestConformancePassesThroughSessionPooling: PgBouncer in session mode
// passes every check too, the closed connection's lock released by its
// server_reset_query (DISCARD ALL).
func TestConformancePassesThroughSessionPooling(t *testing.T) {
	bouncer := pgcluster.StartPgBouncer(t, testdb.URL(t), "session")
	before := advisoryLocks(t)
	for _, c := range conformance(t, bouncer) {
		requireStatus(t, c, doctor.Pass)
	}
	require.Equal(t, before, advisoryLocks(t), "the checks release every lock they took")
}

// TestConformanceSessionPoolingWithoutReset: the control of the returned
// connection check: PgBouncer in session mode that does not reset server
// connections (server_reset_query empty) hands the next client a session
// that still holds the closed client's lock.
func TestConformanceSessionPoolingWithoutReset(t *testing.T) {
	bouncer := pgcluster.StartPgBouncer(t, testdb.URL(t), "session", pgcluster.WithSetting("server_reset_query", ""))
	got := conformance(t, bouncer)
	requireStatus(t, got[doctor.ReturnedConnClean], doctor.Fail, "closed without unlocking", "is still held",
		"unsafe on this path: session locks (RunSession), leader election (Lead, Campaign), pgadvisory.Migrate")
	require.Contains(t, got[doctor.ReturnedConnClean].Fix, "server_reset_query")
	requireStatus(t, got[doctor.SessionExcludesSession], doctor.Pass)
}

// TestConformanceThroughTransactionPooling: through PgBouncer in
// transaction mode the transaction-lock checks pass; the session-lock
// checks take no lock and fail, naming the entry points that are safe
// there, unless the service declares that it uses only those.
func TestConformanceThroughTransactionPooling(t *testing.T) {
	bouncer := pgcluster.StartPgBouncer(t, testdb.URL(t), "transaction", pgcluster.WithSetting("server_round_robin", "1"))
	pgcluster.WarmPgBouncer(t, bouncer, 2)
	before := advisoryLocks(t)
	got := conformance(t, bouncer)
	for _, name := range []string{doctor.XactExcludesXact, doctor.HeldThroughTransaction} {
		requireStatus(t, got[name], doctor.Pass)
	}
	for _, name := range []string{doctor.SessionExcludesSession, doctor.SessionExcludesXact, doctor.XactExcludesSession,
		doctor.SameBackend, doctor.ReturnedConnClean} {
		requireStatus(t, got[name], doctor.Fail, "not tried: the pooler probe proved transaction pooling",
			"these work: transaction locks (RunExclusive, RunOnce, fencing), leases (Lead, Campaign, RunSession with WithLease)")
		require.Contains(t, got[name].Fix, "use only transaction locks (RunExclusive, RunOnce, LockTx, fencing) and leases")
	}
	for _, c := range conformance(t, bouncer, doctor.Config{Uses: []doctor.Use{doctor.UseExclusive, doctor.UseLease}}) {
		requireStatus(t, c, doctor.Pass)
	}
	require.Equal(t, before, advisoryLocks(t), "no session lock was taken through the transaction pooler")
}

// TestConformanceFailsOnAStubImplementation: advisory locks that exclude
// nobody fail every exclusion check (both ways between session and
// transaction locks) and the held-through check; lockgen's RunExclusive
// reports there a lock its backend does not hold, which fails the timeout
// check.
func TestConformanceFailsOnAStubImplementation(t *testing.T) {
	stub := stubpg.Start(t)
	got := map[string]doctor.Check{}
	for _, name := range doctor.ConformanceNames { // one by one: the stub answers no ping
		got[name] = run(t, stub.URL(), name)
	}
	requireStatus(t, got[doctor.XactExcludesXact], doctor.Fail, "transaction locks exclude nobody",
		"unsafe on this path: transaction locks (RunExclusive, RunOnce, fencing)")
	requireStatus(t, got[doctor.SessionExcludesSession], doctor.Fail, "got the session lock", "that the first (backend")
	requireStatus(t, got[doctor.SessionExcludesXact], doctor.Fail, "got the transaction lock")
	requireStatus(t, got[doctor.XactExcludesSession], doctor.Fail, "got the session lock", "while a transaction of the first")
	requireStatus(t, got[doctor.HeldThroughTransaction], doctor.Fail, "the lock does not last the transaction")
	// lockgen's RunExclusive is granted a lock that fn's backend does not hold.
	requireStatus(t, got[doctor.TimeoutLeavesNothing], doctor.Fail, "RunExclusive (database/sql), its wait for the lock",
		"returned nil while fn saw the lock held 0 times, not once", "unsafe on this path: transaction locks (RunExclusive, RunOnce, fencing)")
}
