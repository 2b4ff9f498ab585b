package pgcluster_test

import (
	"bufio"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
)

func TestStartAppliesSettingsAndCleansUp(t *testing.T) {
	var dir, url string
	t.Run("cluster", func(t *testing.T) {
		c := pgcluster.Start(t, pgcluster.WithSetting("max_locks_per_transaction", "17"))
		dir, url = c.Dir(), c.URL()
		conn := connect(t, url)
		require.Equal(t, "17", queryString(t, conn, "SHOW max_locks_per_transaction"))
		require.Equal(t, "off", queryString(t, conn, "SHOW fsync"))
		require.Equal(t, "127.0.0.1", queryString(t, conn, "SHOW listen_addresses"))
		require.Equal(t, c.Dir(), queryString(t, conn, "SHOW unix_socket_directories"))
		require.Equal(t, c.DataDir(), queryString(t, conn, "SHOW data_directory"))
		require.Equal(t, "false", queryString(t, conn, "SELECT pg_is_in_recovery()::text"))
		require.Equal(t, pgcluster.Superuser, queryString(t, conn, "SELECT current_user::text"))
		require.DirExists(t, dir)
	})
	// The subtest's cleanup stopped the server and removed its directory.
	_, err := os.Stat(dir)
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.False(t, reachable(url), "server still answers at %s", url)
}

func TestSharedReturnsOneCluster(t *testing.T) {
	a := sharedCluster(t)
	b := sharedCluster(t)
	require.Same(t, a, b)
	require.True(t, reachable(a.URL()))

	// Asking for the same name with other settings is a test bug.
	r := record(t, func(tb testing.TB) {
		pgcluster.Shared(tb, "pgcluster-tests", pgcluster.WithSetting("max_connections", "7"))
	})
	require.True(t, r.failed)
	require.Contains(t, r.msg, "max_connections=7")
}

func TestInvalidSettingsAreRejected(t *testing.T) {
	for _, opt := range []pgcluster.Option{
		pgcluster.WithSetting("port", "5432"),
		pgcluster.WithSetting("bad name", "1"),
		pgcluster.WithSetting("work_mem", "1MB\nfsync = on"),
	} {
		r := record(t, func(tb testing.TB) { pgcluster.Start(tb, opt) })
		require.True(t, r.failed, "setting accepted")
		require.False(t, r.skipped)
	}
}

func TestMissingBinariesSkipLocallyAndFailInCI(t *testing.T) {
	t.Setenv(pgcluster.EnvBinDir, t.TempDir())

	t.Setenv("CI", "")
	r := record(t, func(tb testing.TB) { pgcluster.Start(tb) })
	require.True(t, r.skipped, "without CI a missing installation skips")
	require.False(t, r.failed)
	require.Contains(t, r.msg, pgcluster.EnvBinDir)

	t.Setenv("CI", "true")
	r = record(t, func(tb testing.TB) { pgcluster.Start(tb) })
	require.True(t, r.failed, "under CI a missing installation fails")
	require.False(t, r.skipped)
	require.Contains(t, r.msg, "CI is set")
}

func TestMissingPgBouncerSkipsLocallyAndFailsInCI(t *testing.T) {
	t.Setenv(pgcluster.EnvPgBouncer, t.TempDir()+"/pgbouncer")

	t.Setenv("CI", "")
	r := record(t, func(tb testing.TB) {
		pgcluster.StartPgBouncer(tb, "postgres://postgres@127.0.0.1:1/postgres", "session")
	})
	require.True(t, r.skipped, "without CI a missing pgbouncer skips")
	require.False(t, r.failed)
	require.Contains(t, r.msg, pgcluster.EnvPgBouncer)

	t.Setenv("CI", "true")
	r = record(t, func(tb testing.TB) {
		pgcluster.StartPgBouncer(tb, "postgres://postgres@127.0.0.1:1/postgres", "session")
	})
	require.True(t, r.failed, "under CI a missing pgbouncer fails")
	require.False(t, r.skipped)
	require.Contains(t, r.msg, "CI is set")
}

// TestPgBouncerTestsWithoutPgBouncer runs TestPgBouncerPoolsInFrontOfTarget,
// whose later steps use what its first subtest started, in a child process
// on a machine without pgbouncer (LOCKGEN_PGBOUNCER names nothing): it
// skips, and fails when CI is set.
func TestPgBouncerTestsWithoutPgBouncer(t *testing.T) {
	if os.Getenv(pgcluster.EnvPgBouncer) != "" {
		t.Skip("in a child process")
	}
	sharedCluster(t) // skip (or fail under CI) as the child would without PostgreSQL
	child := func(ci string) (string, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestPgBouncerPoolsInFrontOfTarget$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), pgcluster.EnvPgBouncer+"="+t.TempDir()+"/pgbouncer", "CI="+ci)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := child("")
	require.NoError(t, err, out)
	require.Contains(t, out, "--- SKIP: TestPgBouncerPoolsInFrontOfTarget ", out)
	require.NotContains(t, out, "--- FAIL", out)

	out, err = child("true")
	require.Error(t, err, out)
	require.Contains(t, out, "--- FAIL: TestPgBouncerPoolsInFrontOfTarget ", out)
	require.Contains(t, out, "CI is set", out)
}

func TestStandbyStreamsAndCleansUp(t *testing.T) {
	primary := sharedCluster(t)
	pconn := connect(t, primary.URL())
	table := "standby_" + strings.ReplaceAll(time.Now().Format("150405.000000000"), ".", "_")
	_, err := pconn.Exec(context.Background(), "CREATE TABLE "+table+" (v int)")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = pconn.Exec(context.Background(), "DROP TABLE "+table) })

	var dir, url string
	t.Run("standby", func(t *testing.T) {
		s := primary.StartStandby(t)
		dir, url = s.Dir(), s.URL()
		require.Same(t, primary, s.Primary())
		require.NotEqual(t, primary.Port(), s.Port())
		sconn := connect(t, url)
		require.Equal(t, "true", queryString(t, sconn, "SELECT pg_is_in_recovery()::text"))

		// Rows written on the primary after the base backup arrive.
		_, err := pconn.Exec(context.Background(), "INSERT INTO "+table+" VALUES (42)")
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			var n int
			err := sconn.QueryRow(context.Background(), "SELECT count(*) FROM "+table+" WHERE v = 42").Scan(&n)
			return err == nil && n == 1
		}, 30*time.Second, 20*time.Millisecond)

		// It is read-only.
		_, err = sconn.Exec(context.Background(), "INSERT INTO "+table+" VALUES (1)")
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "25006", pgErr.Code)
	})
	_, err = os.Stat(dir)
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.False(t, reachable(url), "standby still answers at %s", url)
	require.True(t, reachable(primary.URL()), "stopping the standby must not stop the primary")
}

func TestPgBouncerPoolsInFrontOfTarget(t *testing.T) {
	c := sharedCluster(t)
	var url string
	t.Run("transaction", func(t *testing.T) {
		url = pgcluster.StartPgBouncer(t, c.URL(), "transaction")
		conn := connect(t, url+"&default_query_exec_mode=simple_protocol")
		// PgBouncer announces its own process id, not the backend's.
		require.NotEqual(t, queryString(t, conn, "SELECT pg_backend_pid()::text"), pidString(conn.PgConn().PID()))
		require.Equal(t, "5", queryString(t, conn, "SELECT 2 + 3 AS five"))

		admin := connect(t, strings.Replace(url, "/postgres?", "/pgbouncer?", 1)+"&default_query_exec_mode=simple_protocol")
		require.Equal(t, "transaction", showConfig(t, admin, "pool_mode"))
		require.Equal(t, "2", showConfig(t, admin, "default_pool_size"))
	})
	if url == "" {
		// The subtest skipped: no pgbouncer on this machine (under CI it
		// failed instead).
		t.Skip("no pgbouncer: the transaction subtest skipped")
	}
	require.False(t, reachable(url), "pgbouncer still answers at %s", url)

	// Control for the pid check: a direct connection announces the backend.
	direct := connect(t, c.URL())
	require.Equal(t, queryString(t, direct, "SELECT pg_backend_pid()::text"), pidString(direct.PgConn().PID()))

	t.Run("session with settings", func(t *testing.T) {
		url := pgcluster.StartPgBouncer(t, c.URL(), "session", pgcluster.WithSetting("default_pool_size", "3"))
		admin := connect(t, strings.Replace(url, "/postgres?", "/pgbouncer?", 1)+"&default_query_exec_mode=simple_protocol")
		require.Equal(t, "session", showConfig(t, admin, "pool_mode"))
		require.Equal(t, "3", showConfig(t, admin, "default_pool_size"))
	})
}

// showConfig reads one key from PgBouncer's admin console.
func showConfig(t *testing.T, admin interface {
	PgConn() *pgconn.PgConn
}, key string) string {
	t.Helper()
	results, err := admin.PgConn().Exec(context.Background(), "SHOW CONFIG").ReadAll()
	require.NoError(t, err)
	require.Len(t, results, 1)
	for _, row := range results[0].Rows {
		if string(row[0]) == key {
			return string(row[1])
		}
	}
	t.Fatalf("SHOW CONFIG has no %s", key)
	return ""
}

func pidString(pid uint32) string { return strconv.FormatUint(uint64(pid), 10) }

// crashHelperEnv makes TestCrashHelper run: it is the child process of
// TestCleanupSurvivesAKilledTestBinary.
const crashHelperEnv = "LOCKGEN_PGCLUSTER_CRASH_HELPER"

// TestCrashHelper starts a shared cluster and a PgBouncer, reports where,
// and waits to be killed.
func TestCrashHelper(t *testing.T) {
	if os.Getenv(crashHelperEnv) == "" {
		t.Skip("helper process for TestCleanupSurvivesAKilledTestBinary")
	}
	c := pgcluster.Shared(t, "crash-helper")
	bouncer := pgcluster.StartPgBouncer(t, c.URL(), "transaction")
	_, _ = os.Stdout.WriteString("READY " + c.Dir() + " " + c.URL() + " " + bouncer + "\n")
	time.Sleep(2 * time.Minute) // the parent kills us long before
	t.Fatal("not killed")
}

func TestCleanupSurvivesAKilledTestBinary(t *testing.T) {
	if os.Getenv(crashHelperEnv) != "" {
		t.Skip("in the helper process")
	}
	// Skip (or fail under CI) here, as the helper would, when the machine
	// cannot run clusters or PgBouncer.
	pgcluster.StartPgBouncer(t, sharedCluster(t).URL(), "transaction")

	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelper$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), crashHelperEnv+"=1")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})

	var fields []string
	var output strings.Builder
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		if f := strings.Fields(lines.Text()); len(f) == 4 && f[0] == "READY" {
			fields = f
			break
		}
		output.WriteString(lines.Text() + "\n")
	}
	if fields == nil {
		t.Fatalf("the helper process exited without starting a cluster:\n%s", output.String())
	}
	dir, url, bouncer := fields[1], fields[2], fields[3]
	// Controls: while the helper lives, all of it is there.
	require.DirExists(t, dir)
	require.True(t, reachable(url))
	require.True(t, reachable(bouncer+"&default_query_exec_mode=simple_protocol"))

	// SIGKILL: no deferred function, no t.Cleanup runs in the helper.
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	killed = true

	require.Eventually(t, func() bool {
		_, err := os.Stat(dir)
		return os.IsNotExist(err)
	}, 60*time.Second, 50*time.Millisecond, "reaper did not remove %s", dir)
	require.False(t, reachable(url), "server outlived the test binary")
	require.Eventually(t, func() bool {
		return !reachable(bouncer + "&default_query_exec_mode=simple_protocol")
	}, 30*time.Second, 50*time.Millisecond, "pgbouncer outlived the test binary")
}
