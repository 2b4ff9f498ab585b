package fencegen_test

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/decl"
	"github.com/lockgen/lockgen/internal/fencegen"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden with the current output")

// declared returns the lock name from testdata/locks.yaml, checked.
func declared(t *testing.T, name string) *decl.Lock {
	t.Helper()
	src, err := os.ReadFile("testdata/locks.yaml")
	require.NoError(t, err)
	loaded, err := decl.LoadBytes("locks.yaml", src, nil)
	require.NoError(t, err)
	l := loaded.File.Lookup(name)
	require.NotNil(t, l, name)
	return l
}

// TestEmitGolden holds the migrations to testdata/NAME.golden (go test -run
// TestEmitGolden -update rewrites them).
func TestEmitGolden(t *testing.T) {
	for _, tc := range []struct {
		golden, lock, table, columns, policy string
		upgrade                              bool
	}{
		{"plain", "ledger.post", "app.entries", "", "strict", false},
		{"pinned", "legacy.cleanup", "app.order", "", "permissive", false},
		{"param", "billing.invoice", "billing.invoice", "tenant_id", "strict", false},
		{"param3", "exports.archive", "app.exports", "tenant_uuid, full , label", "permissive", false},
		{"upgrade_plain", "ledger.post", "app.entries", "", "strict", true},
		{"upgrade_param", "billing.invoice", "billing.invoice", "tenant_id", "strict", true},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			s, err := fencegen.NewSpec(declared(t, tc.lock), tc.table, tc.columns, tc.policy)
			require.NoError(t, err)
			s.Upgrade = tc.upgrade
			got := fencegen.Emit(s)
			if tc.upgrade {
				got = fencegen.EmitUpgrade(s)
			}
			golden := filepath.Join("testdata", tc.golden+".golden")
			if *update {
				require.NoError(t, os.WriteFile(golden, got, 0o644))
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err)
			require.Equal(t, string(want), string(got), "run go test -run TestEmitGolden -update to accept")

			text := string(got)
			require.True(t, strings.HasPrefix(text, fencegen.Header+"\n"))
			up := strings.Index(text, "\n-- +goose Up\n")
			down := strings.Index(text, "\n-- +goose Down\n")
			require.True(t, up > 0 && down > up)
			require.Contains(t, text[up:down], "run pgadvisory.Migrate (or lockgen''s migrations) first", "Up checks lockgen's schema first")
			require.Equal(t, 4+boolInt(!tc.upgrade), strings.Count(text[up:down], "\nCREATE TRIGGER "), "Up: row and statement triggers (and the TRUNCATE guard)")
			require.Equal(t, 4+boolInt(!tc.upgrade), strings.Count(text[down:], "\nDROP TRIGGER "), "Down drops what Up created")
			require.Equal(t, boolInt(!tc.upgrade), strings.Count(text[up:down], "ADD COLUMN"))
			require.Equal(t, boolInt(!tc.upgrade), strings.Count(text[down:], "DROP COLUMN"))
			require.Equal(t, boolInt(tc.upgrade), strings.Count(text[down:], "\nCREATE TRIGGER "), "an upgrade's Down restores the first layout's row trigger")
			require.Empty(t, unqualified(text), "casts and operators not written with pg_catalog")
		})
	}
}

// generatedNoise matches what a generated migration may contain that is
// not a cast or an operator: string literals, -- comments, and the
// assignments of RAISE's USING ERRCODE = ….
var generatedNoise = regexp.MustCompile(`'(?:[^']|'')*'|--[^\n]*|(?i:ERRCODE)\s*=`)

// castOrOperator matches a cast's type name (group 1 is the dot of a
// qualified one) or a comparison operator written bare.
var castOrOperator = regexp.MustCompile(`::\s*[a-z_][a-z0-9_]*(\s*\.)?|\s(=|<>|!=|<|>|<=|>=)\s`)

// unqualified returns each cast to a type not written pg_catalog.type and
// each operator not written OPERATOR(pg_catalog.op) in sql: the migration
// runs with the search_path of the role that applies it.
func unqualified(sql string) []string {
	code := generatedNoise.ReplaceAllString(sql, " ")
	var out []string
	for _, m := range castOrOperator.FindAllStringSubmatchIndex(code, -1) {
		if strings.HasPrefix(code[m[0]:], "::") && m[2] >= 0 {
			continue
		}
		out = append(out, strings.TrimSpace(code[m[0]:m[1]]))
	}
	return out
}

// TestUnqualified: the scan finds what it must and nothing else.
func TestUnqualified(t *testing.T) {
	for sql, want := range map[string]int{
		"WHERE c.oid = 'a'::regclass":                                 2,
		"WHERE c.oid OPERATOR(pg_catalog.=) 'a'::pg_catalog.regclass": 0,
		"RAISE EXCEPTION 'a = b::text' USING ERRCODE = '0A000';":      0,
		"-- x = y::bigint": 0,
		"DEFAULT NULLIF(pg_catalog.current_setting('x', true), '')::bigint": 1,
		"WHEN (NEW.fencing_token IS DISTINCT FROM x)":                       0,
	} {
		require.Len(t, unqualified(sql), want, sql)
	}
}

func TestEmitUsesDeclaredID(t *testing.T) {
	s, err := fencegen.NewSpec(declared(t, "legacy.cleanup"), "app.t", "", "strict")
	require.NoError(t, err)
	require.Contains(t, string(fencegen.Emit(s)), "pgadvisory.fence_stamp('72707', 'strict')")
	require.Contains(t, string(fencegen.Emit(s)), "pgadvisory.fence_check_statement('72707', 'strict')")

	s, err = fencegen.NewSpec(declared(t, "ledger.post"), "app.t", "", "strict")
	require.NoError(t, err)
	require.Contains(t, string(fencegen.Emit(s)), "pgadvisory.fence_check_statement('-2573528814301763175', 'strict')")
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestNewSpecRefuses(t *testing.T) {
	for _, tc := range []struct {
		lock, table, columns, policy, want string
	}{
		{"ledger.post", "entries", "", "strict", `table "entries": want schema.table, e.g. public.accounts`},
		{"ledger.post", "a.b.c", "", "strict", `table "a.b.c": want schema.table`},
		{"ledger.post", "App.entries", "", "strict", `table "App.entries": the schema must be a lowercase SQL identifier`},
		{"ledger.post", "app.", "", "strict", `table "app.": the table name is empty`},
		{"ledger.post", "app.my-table", "", "strict", `the table name must be a lowercase SQL identifier`},
		{"ledger.post", "app." + strings.Repeat("x", 64), "", "strict", `is longer than PostgreSQL's 63 bytes`},
		{"ledger.post", "app.t", "", "lenient", `policy "lenient": want strict`},
		{"ledger.post", "app.t", "tenant_id", "strict", `lock "ledger.post" has no parameters, so it takes no -columns; got 1`},
		{"billing.invoice", "app.t", "", "strict", `lock "billing.invoice" takes 1 parameter(s): tenant_id int64; -columns names 0 column(s)`},
		{"billing.invoice", "app.t", "a,b", "strict", `takes 1 parameter(s): tenant_id int64; -columns names 2 column(s)`},
		{"exports.archive", "app.t", "a,b", "strict", `takes 3 parameter(s): tenant uuid, full bool, label string; -columns names 2`},
		{"billing.invoice", "app.t", "Tenant", "strict", `column "Tenant" must be a lowercase SQL identifier`},
		{"billing.invoice", "app.t", "", "strict", `-columns names 0`},
		{"billing.invoice", "app.t", "fencing_token", "strict", `column "fencing_token" is the fencing column itself`},
		{"billing.invoice", "app.t", "a,", "strict", `column "" is empty`},
		{"reports.readers", "app.t", "", "strict", `lock "reports.readers" is shared`},
	} {
		_, err := fencegen.NewSpec(declared(t, tc.lock), tc.table, tc.columns, tc.policy)
		require.ErrorIs(t, err, fencegen.ErrInvalid, "%+v", tc)
		require.ErrorContains(t, err, tc.want, "%+v", tc)
	}
}

func TestNextVersion(t *testing.T) {
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.FixedZone("CET", 3600))
	for _, tc := range []struct {
		name  string
		files []string
		want  string
	}{
		{"empty", nil, "00001"},
		{"no migrations", []string{"README.md", "x.sql", "abc_x.sql"}, "00001"},
		{"padded", []string{"00001_init.sql", "00002_users.sql", "notes.txt"}, "00003"},
		{"go migrations count", []string{"00001_init.sql", "00007_backfill.go", "00008_x_test.go"}, "00008"},
		{"unpadded", []string{"1_init.sql", "9_more.sql"}, "10"},
		{"wider", []string{"001_init.sql", "099_x.sql"}, "100"},
		{"numeric order", []string{"00009_a.sql", "00010_b.sql"}, "00011"},
		{"timestamps", []string{"20240101120000_init.sql", "20250202120000_users.sql"}, "20260304040607"},
		{"timestamp in future", []string{"20991231235959_x.sql"}, "21000101000000"},
		{"timestamp now", []string{"20260304040607_x.sql"}, "20260304040608"},
		{"version 0 is no migration (goose starts at 1)", []string{"0_init.sql"}, "00001"},
		{"one version spelled twice: the first file by name sets the width", []string{"002_a.sql", "2_b.sql"}, "003"},
	} {
		dir := t.TempDir()
		for _, f := range tc.files {
			require.NoError(t, os.WriteFile(filepath.Join(dir, f), nil, 0o644))
		}
		got, err := fencegen.NextVersion(dir, now)
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.want, got, tc.name)
	}
	_, err := fencegen.NextVersion(filepath.Join(t.TempDir(), "missing"), now)
	require.Error(t, err)
}

func TestCheckVersion(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "00002_users.sql"), nil, 0o644))
	require.NoError(t, fencegen.CheckVersion(dir, "00003"))
	require.NoError(t, fencegen.CheckVersion(dir, "20260101000000"))
	for _, v := range []string{"0", "00000", "-1", "+3", "x", "3a", "", "99999999999999999999"} {
		require.ErrorIs(t, fencegen.CheckVersion(dir, v), fencegen.ErrInvalid, v)
	}
	err := fencegen.CheckVersion(dir, "2")
	require.ErrorContains(t, err, "version 2 is already used by 00002_users.sql")
	require.False(t, errors.Is(err, fencegen.ErrInvalid))
}

func TestWriteNewNeverReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "00001_fence_t.sql")
	require.NoError(t, fencegen.WriteNew(path, []byte("first\n")))
	err := fencegen.WriteNew(path, []byte("second\n"))
	require.ErrorContains(t, err, "already exists; lockgen fence does not overwrite files")
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "first\n", string(got))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file left behind")
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o644), fi.Mode().Perm())
}

func TestGenerate(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "00001_init.sql"), nil, 0o644))
	req := fencegen.Request{Lock: declared(t, "billing.invoice"), Table: "billing.invoice", Columns: "tenant_id", Policy: "strict", Dir: dir}
	path, err := fencegen.Generate(req)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, "00002_fence_invoice.sql"), path)

	// The explicit version of an existing migration is refused.
	other := req
	other.Table, other.Version = "billing.other", "00002"
	_, err = fencegen.Generate(other)
	require.ErrorContains(t, err, "version 00002 is already used by 00002_fence_invoice.sql")

	req.Version, req.Dir = "", filepath.Join(dir, "missing")
	_, err = fencegen.Generate(req)
	require.ErrorContains(t, err, "fencegen: the migrations directory")
}

// TestGenerateRefusesTableFencedTwice: a second migration for a table
// would fail at goose up (its column and triggers exist); it is refused,
// naming the migration that fences the table, whatever the lock, policy or
// version asked for, and nothing is written. Other tables are fine.
func TestGenerateRefusesTableFencedTwice(t *testing.T) {
	dir := t.TempDir()
	first := fencegen.Request{Lock: declared(t, "ledger.post"), Table: "app.entries", Policy: "strict", Dir: dir}
	path, err := fencegen.Generate(first)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, "00001_fence_entries.sql"), path)

	for _, again := range []fencegen.Request{
		first,
		{Lock: declared(t, "legacy.cleanup"), Table: "app.entries", Policy: "permissive", Dir: dir, Version: "00007"},
	} {
		_, err := fencegen.Generate(again)
		require.EqualError(t, err, "fencegen: app.entries is already fenced by 00001_fence_entries.sql; a second migration would fail at goose up")
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1)

	// Control: another table, and the same table name in another schema.
	for _, table := range []string{"app.journal", "archive.entries"} {
		req := first
		req.Table = table
		_, err = fencegen.Generate(req)
		require.NoError(t, err, table)
	}
	found, err := fencegen.Scan(dir)
	require.NoError(t, err)
	require.Equal(t, []fencegen.Fenced{
		{File: "00001_fence_entries.sql", Lock: "ledger.post", Table: "app.entries", Policy: "strict", Current: true},
		{File: "00002_fence_journal.sql", Lock: "ledger.post", Table: "app.journal", Policy: "strict", Current: true},
		{File: "00003_fence_entries.sql", Lock: "ledger.post", Table: "archive.entries", Policy: "strict", Current: true},
	}, found)
}

// TestGenerateUpgrade: a table fenced by a migration of the first layout
// (as lockgen fence wrote it before, testdata/legacy) cannot be fenced
// again, and the error says how to upgrade it; -upgrade writes the upgrade
// once, with the same lock, columns and policy.
func TestGenerateUpgrade(t *testing.T) {
	dir := t.TempDir()
	legacy, err := os.ReadFile("testdata/legacy/param.sql")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "00004_fence_invoice.sql"), legacy, 0o644))
	req := fencegen.Request{Lock: declared(t, "billing.invoice"), Table: "billing.invoice", Columns: "tenant_id", Policy: "strict", Dir: dir}

	_, err = fencegen.Generate(req)
	require.EqualError(t, err, "fencegen: billing.invoice is already fenced by 00004_fence_invoice.sql, in the first layout; "+
		"to move it to the current one: lockgen fence -upgrade -lock billing.invoice -table billing.invoice -columns tenant_id -policy strict")

	bad := req
	bad.Upgrade, bad.Policy = true, "permissive"
	_, err = fencegen.Generate(bad)
	require.ErrorIs(t, err, fencegen.ErrInvalid)
	require.ErrorContains(t, err, "-upgrade keeps the lock, columns and policy of 00004_fence_invoice.sql: -lock billing.invoice -columns tenant_id -policy strict")

	req.Upgrade = true
	path, err := fencegen.Generate(req)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, "00005_fence_invoice_upgrade.sql"), path)
	_, err = fencegen.Generate(req)
	require.EqualError(t, err, "fencegen: billing.invoice was already upgraded by 00005_fence_invoice_upgrade.sql")
	req.Upgrade = false
	_, err = fencegen.Generate(req)
	require.EqualError(t, err, "fencegen: billing.invoice is already fenced by 00004_fence_invoice.sql; a second migration would fail at goose up")

	// Nothing to upgrade: no migration, or one in the current layout.
	req.Upgrade, req.Table = true, "billing.other"
	_, err = fencegen.Generate(req)
	require.ErrorContains(t, err, "-upgrade: no migration in "+dir+" fences billing.other")
	req.Upgrade = false
	_, err = fencegen.Generate(req)
	require.NoError(t, err)
	req.Upgrade = true
	_, err = fencegen.Generate(req)
	require.ErrorContains(t, err, "fencegen: -upgrade: 00006_fence_other.sql fences billing.other in the current layout already")
}

// TestScanDanglingFlag: a recorded command line that ends with a flag and
// no value (a file edited by hand) reads as that flag unset, never as a
// crash; the control is the same line with the value.
func TestScanDanglingFlag(t *testing.T) {
	dir := t.TempDir()
	write := func(line string) {
		src := fencegen.Header + "\n-- lockgen fence " + line + "\n"
		require.NoError(t, os.WriteFile(filepath.Join(dir, "00001_fence.sql"), []byte(src), 0o644))
	}
	write("-table public.entries -lock")
	found, err := fencegen.Scan(dir)
	require.NoError(t, err)
	require.Len(t, found, 1)
	require.Equal(t, "public.entries", found[0].Table)
	require.Empty(t, found[0].Lock)

	write("-table public.entries -lock billing.entries")
	found, err = fencegen.Scan(dir)
	require.NoError(t, err)
	require.Equal(t, "billing.entries", found[0].Lock)
}
