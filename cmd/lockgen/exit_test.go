package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// TestExitStatusRule: one rule for every command, as lockgen -h states it:
// 0 done, 1 a check or an operation failed, 2 the command line is wrong.
// Each command is run once for each status it can give.
func TestExitStatusRule(t *testing.T) {
	code, usage, _ := lockgen("-h")
	require.Equal(t, exitOK, code)
	require.Contains(t, usage, "Exit status, for every command:\n\n\t0  done")
	require.Contains(t, usage, "\t1  a check or an operation failed")
	require.Contains(t, usage, "\t2  the command line is wrong")

	dir := t.TempDir()
	file := filepath.Join(dir, "locks.yaml")
	require.NoError(t, os.WriteFile(file, []byte("version: \"1\"\npackage: locks\nlocks:\n  - name: exit.ledger_post\n    fencing: true\n"), 0o644))
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("version: \"1\"\npackage: locks\nlocks:\n  - name: Not.Valid\n"), 0o644))
	missing := filepath.Join(dir, "missing.yaml")
	_, url := testdb.EmptyDatabase(t)
	unreachable := "postgres://127.0.0.1:1/x?connect_timeout=5"
	unparsable := "postgres://127.0.0.1:99999/x"
	fenceDir := filepath.Join(dir, "migrations")
	require.NoError(t, os.Mkdir(fenceDir, 0o755))

	type run struct {
		want int
		args []string
	}
	for _, step := range []struct {
		name string
		runs []run
	}{
		{"generate", []run{
			{exitOK, []string{"generate", "-f", file}},
			{exitFail, []string{"generate", "-f", bad}},
			{exitUsage, []string{"generate", "-f", file, "extra"}},
		}},
		{"check", []run{
			{exitOK, []string{"check", "-f", file}},
			{exitFail, []string{"check", "-f", missing}},
			{exitUsage, []string{"check", "-nope"}},
		}},
		{"list", []run{
			{exitOK, []string{"list", "-f", file}},
			{exitFail, []string{"list", "-f", bad}},
			{exitUsage, []string{"list", "extra"}},
		}},
		{"id", []run{
			{exitOK, []string{"id", "exit.ledger_post"}},
			{exitFail, []string{"id", "-f", missing, "exit.ledger_post"}},
			{exitUsage, []string{"id"}},
		}},
		{"fence", []run{
			{exitOK, []string{"fence", "-f", file, "-lock", "exit.ledger_post", "-table", "app.entries", "-dir", fenceDir}},
			{exitFail, []string{"fence", "-f", file, "-lock", "exit.ledger_post", "-table", "app.entries", "-dir", fenceDir}},
			{exitUsage, []string{"fence", "-f", file, "-table", "app.entries"}},
		}},
		{"migrate up", []run{
			{exitOK, []string{"migrate", "up", "-db", url}},
			{exitFail, []string{"migrate", "up", "-db", unreachable}},
			{exitUsage, []string{"migrate", "up", "-to", "99", "-db", url}},
		}},
		{"migrate status", []run{
			{exitOK, []string{"migrate", "status", "-db", url}},
			{exitFail, []string{"migrate", "status", "-db", unreachable}},
			{exitUsage, []string{"migrate", "status", "-db", unparsable}},
		}},
		{"migrate sql", []run{
			{exitOK, []string{"migrate", "sql", "-goose"}},
			{exitUsage, []string{"migrate", "sql", "-from", "99"}},
		}},
		{"register", []run{
			{exitOK, []string{"register", "-f", file, "-db", url}},
			{exitFail, []string{"register", "-f", file, "-db", unreachable}},
			{exitUsage, []string{"register", "-f", file, "-db", unparsable}},
		}},
		{"status", []run{
			{exitOK, []string{"status", "-db", url}},
			{exitFail, []string{"status", "-db", unreachable}},
			{exitUsage, []string{"status", "-db", url, "extra"}},
		}},
		{"doctor", []run{
			{exitOK, []string{"doctor", "-db", url, "-f", file}},
			{exitFail, []string{"doctor", "-db", unreachable}},
			{exitUsage, []string{"doctor", "-db", url, "-uses", "everything"}},
		}},
		{"migrate down", []run{
			{exitUsage, []string{"migrate", "down", "-to", "0", "-db", url}}, // drops state: -force
			{exitOK, []string{"migrate", "down", "-to", "0", "-force", "-db", url}},
			{exitFail, []string{"migrate", "down", "-db", url}}, // nothing to roll back
			{exitUsage, []string{"migrate", "down", "-to", "-1", "-db", url}},
		}},
		{"version", []run{
			{exitOK, []string{"version"}},
			{exitUsage, []string{"version", "extra"}},
		}},
		{"no command", []run{
			{exitOK, []string{"help"}},
			{exitUsage, []string{"frobnicate"}},
		}},
	} {
		for _, r := range step.runs {
			code, out, errOut := lockgen(r.args...)
			require.Equal(t, r.want, code, "%s: lockgen %s\nstdout: %s\nstderr: %s", step.name, strings.Join(r.args, " "), out, errOut)
			if r.want != exitOK {
				require.NotEmpty(t, errOut, "%s: a failure says why on stderr", step.name)
			}
		}
	}
}
