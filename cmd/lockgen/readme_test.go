package main

import (
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

// TestReadmeDoctorSample: the lockgen doctor sample of docs/operations.md
// (Before you deploy) is what doctor
// prints: the command it shows, run through PgBouncer in transaction mode
// in front of a migrated and registered database, prints one line per
// check, each matching the sample's line in order ("…" stands for anything).
func TestReadmeDoctorSample(t *testing.T) {
	readme, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	block := regexp.MustCompile("(?s)```text\n\\$ (lockgen doctor [^\n]*)\n(.*?)```").FindSubmatch(readme)
	require.NotNil(t, block, "docs/operations.md's doctor sample")
	command := strings.Fields(strings.ReplaceAll(string(block[1]), `"$DATABASE_URL"`, "DB"))
	sample := strings.Split(strings.TrimSuffix(string(block[2]), "\n"), "\n")
	require.Len(t, sample, len(doctor.Names), "one line per check")

	_, url := testdb.EmptyDatabase(t)
	code, _, errOut := lockgen("migrate", "up", "-db", url)
	require.Equal(t, exitOK, code, errOut)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "locks.yaml"), []byte("version: \"1\"\npackage: locks\nlocks:\n"+
		"  - name: reports.daily_email\n  - name: billing.invoice\n    params:\n      - {name: tenant_id, type: int64}\n"), 0o644))
	t.Chdir(dir)
	code, _, errOut = lockgen("register", "-db", url, "-f", "locks.yaml")
	require.Equal(t, exitOK, code, errOut)
	bouncer := pgcluster.StartPgBouncer(t, url, "transaction", pgcluster.WithSetting("server_round_robin", "1"))
	pgcluster.WarmPgBouncer(t, bouncer, 2)

	args := command[1:]
	for i, a := range args {
		if a == "DB" {
			args[i] = bouncer
		}
	}
	code, out, errOut := lockgen(args...)
	require.Equal(t, exitOK, code, out+errOut)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, lines, len(sample), out)
	for i, want := range sample {
		parts := strings.Split(want, "…")
		for j, p := range parts {
			parts[j] = regexp.QuoteMeta(p)
		}
		require.Regexp(t, "^"+strings.Join(parts, ".*")+"$", lines[i], "the sample's line %d", i+1)
	}

	// Without -uses the same path fails pooler and exclusion, as docs/operations.md says.
	code, out, _ = lockgen("doctor", "-db", bouncer, "-f", "locks.yaml")
	require.Equal(t, exitFail, code)
	require.Regexp(t, `(?m)^fail  pooler: `, out)
	require.Regexp(t, `(?m)^fail  exclusion: `, out)
}
