package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/doctor"
	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// lockgen doctor's output and exit status; the checks themselves are
// tested in internal/doctor.

func TestDoctorCommandPrintsOneLinePerCheck(t *testing.T) {
	_, url := testdb.EmptyDatabase(t)
	code, out, errOut := lockgen("doctor", "-db", url)
	require.Equal(t, exitOK, code, "no check fails on the test server: %s%s", out, errOut)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, lines, len(doctor.Names), out)
	for i, line := range lines {
		require.Regexp(t, `^(pass|warn|fail) +`+regexp.QuoteMeta(doctor.Names[i])+`: \S`, line)
		if strings.HasPrefix(line, "warn") {
			require.Contains(t, line, ". Fix: ", "a warning says what to do")
		}
	}
	require.Contains(t, out, "warn  schema: lockgen's schema is missing")
}

func TestDoctorCommandJSON(t *testing.T) {
	code, out, errOut := lockgen("doctor", "-db", testdb.URL(t), "-json")
	require.Equal(t, exitOK, code, errOut)
	var r struct {
		Checks []map[string]string `json:"checks"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Len(t, r.Checks, len(doctor.Names))
	for i, c := range r.Checks {
		require.Equal(t, doctor.Names[i], c["name"])
		require.Contains(t, []string{"pass", "warn", "fail"}, c["status"])
		require.NotEmpty(t, c["detail"])
		require.Contains(t, c, "fix")
		require.Len(t, c, 4, "exactly name, status, detail and fix")
	}
}

// TestDoctorCommandExitsOneOnAFailure: through PgBouncer in transaction
// mode with one server connection the pooler and exclusion checks fail;
// the report is still printed, JSON too.
func TestDoctorCommandExitsOneOnAFailure(t *testing.T) {
	bouncer := pgcluster.StartPgBouncer(t, testdb.URL(t), "transaction", pgcluster.WithSetting("default_pool_size", "1"))
	code, out, _ := lockgen("doctor", "-db", bouncer)
	require.Equal(t, exitFail, code, out)
	require.Regexp(t, `(?m)^fail  exclusion: session locks exclude nobody reliably here`, out)
	require.Regexp(t, `(?m)^fail  pooler: `, out)

	code, out, _ = lockgen("doctor", "-db", bouncer, "-json")
	require.Equal(t, exitFail, code)
	require.Contains(t, out, `"status": "fail"`)
}

// TestDoctorCommandUses: behind PgBouncer in transaction mode with
// server_round_robin=1 and idle server connections, doctor used to pass
// pooler (as session pooling) and exclusion and exit 0. It now exits 1 for
// every use, and 0 for a service that declares transaction locks only,
// saying what works there and what does not. An unknown use is a usage
// error.
func TestDoctorCommandUses(t *testing.T) {
	_, url := testdb.EmptyDatabase(t)
	code, _, errOut := lockgen("migrate", "up", "-db", url)
	require.Equal(t, exitOK, code, errOut)
	bouncer := pgcluster.StartPgBouncer(t, url, "transaction", pgcluster.WithSetting("server_round_robin", "1"))
	pgcluster.WarmPgBouncer(t, bouncer, 2)

	code, out, _ := lockgen("doctor", "-db", bouncer)
	require.Equal(t, exitFail, code, out)
	require.Regexp(t, `(?m)^fail  pooler: .*one client's statements ran in more than one server session`, out)
	require.Regexp(t, `(?m)^fail  exclusion: session locks exclude nobody reliably here`, out)

	for _, uses := range []string{"exclusive", "exclusive, exclusive"} {
		code, out, errOut = lockgen("doctor", "-db", bouncer, "-uses", uses)
		if uses != "exclusive" {
			require.Equal(t, exitUsage, code)
			require.Contains(t, errOut, `lockgen doctor: -uses: "exclusive" is listed twice`)
			continue
		}
		require.Equal(t, exitOK, code, out)
		require.Regexp(t, `(?m)^pass  pooler: .*these work: transaction locks \(RunExclusive, RunOnce, fencing\) \[used\], leases \(Lead, Campaign, RunSession with WithLease\); these do not: session locks \(RunSession\), leader election \(Lead, Campaign\), pgadvisory.Migrate`, out)
		require.Regexp(t, `(?m)^pass  exclusion: transaction locks \(RunExclusive\) exclude too`, out)
	}
	code, _, errOut = lockgen("doctor", "-db", bouncer, "-uses", "exclusive,leases")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, `lockgen doctor: -uses: unknown use "leases"; want a comma-separated list of exclusive, session, lead, lease, migrate`)
}

// TestDoctorCommandReadsDeclarations: with -f the registry check compares
// the file with the database.
func TestDoctorCommandReadsDeclarations(t *testing.T) {
	_, url := testdb.EmptyDatabase(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "locks.yaml")
	require.NoError(t, os.WriteFile(file, []byte("version: \"1\"\npackage: locks\nlocks:\n  - name: reports.daily_email\n"), 0o644))
	code, out, errOut := lockgen("migrate", "up", "-db", url)
	require.Equal(t, exitOK, code, errOut)

	code, out, errOut = lockgen("doctor", "-db", url, "-f", file)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "warn  registry: declared in "+file+" but not registered (lockgen status shows their raw keys): reports.daily_email. Fix: lockgen register -f "+file)
	require.Contains(t, out, "declares 1 lock(s) (1 plain, 0 parameterized)")

	code, _, errOut = lockgen("register", "-db", url, "-f", file)
	require.Equal(t, exitOK, code, errOut)
	code, out, _ = lockgen("doctor", "-db", url, "-f", file)
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "pass  registry: the registry holds the 1 lock(s) "+file+" declares")
}

func TestDoctorCommandRefusesBadInputs(t *testing.T) {
	code, out, errOut := lockgen("doctor", "-db", "postgres://127.0.0.1:1/test?connect_timeout=5")
	require.Equal(t, exitFail, code)
	require.Empty(t, out)
	require.Regexp(t, `^lockgen: connecting to \S+@127\.0\.0\.1:1/test \(from -db\): `, errOut)

	code, _, errOut = lockgen("doctor", "-db", testdb.URL(t), "-f", filepath.Join(t.TempDir(), "missing.yaml"))
	require.Equal(t, exitFail, code)
	require.Contains(t, errOut, "reading declarations")

	bad := filepath.Join(t.TempDir(), "locks.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("version: \"1\"\npackage: locks\nlocks:\n  - name: Bad.Name\n"), 0o644))
	code, _, errOut = lockgen("doctor", "-db", testdb.URL(t), "-f", bad)
	require.Equal(t, exitFail, code)
	require.Contains(t, errOut, bad+":4:")

	code, _, errOut = lockgen("doctor", "now")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, `unexpected argument "now"`)
}

// TestDoctorCommandConformance: -conformance adds the conformance checks
// after the others, in the same shape; on a direct connection they pass,
// through PgBouncer in transaction mode the session-lock ones fail (exit
// 1) unless -uses says the service takes only transaction locks and
// leases.
func TestDoctorCommandConformance(t *testing.T) {
	all := append(append([]string(nil), doctor.Names...), doctor.ConformanceNames...)
	code, out, errOut := lockgen("doctor", "-db", testdb.URL(t), "-conformance", "-json")
	require.Equal(t, exitOK, code, errOut)
	var r struct {
		Checks []map[string]string `json:"checks"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Len(t, r.Checks, len(all))
	for i, c := range r.Checks {
		require.Equal(t, all[i], c["name"])
		require.Len(t, c, 4, "exactly name, status, detail and fix")
		if i >= len(doctor.Names) {
			require.Equal(t, "pass", c["status"], c["detail"])
		}
	}

	bouncer := pgcluster.StartPgBouncer(t, testdb.URL(t), "transaction", pgcluster.WithSetting("server_round_robin", "1"))
	pgcluster.WarmPgBouncer(t, bouncer, 2)
	code, out, _ = lockgen("doctor", "-db", bouncer, "-conformance")
	require.Equal(t, exitFail, code, out)
	require.Regexp(t, `(?m)^pass  conformance\.xact_excludes_xact: `, out)
	require.Regexp(t, `(?m)^fail  conformance\.session_excludes_session: not tried: the pooler probe proved transaction pooling.*Fix: .*use only transaction locks`, out)
	code, out, _ = lockgen("doctor", "-db", bouncer, "-conformance", "-uses", "exclusive,lease")
	require.Equal(t, exitOK, code, out)
	require.NotContains(t, out, "\nfail ")
}
