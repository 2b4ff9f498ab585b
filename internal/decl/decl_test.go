package decl_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/decl"
	"github.com/lockgen/lockgen/keyspace"
)

func TestGoName(t *testing.T) {
	for name, want := range map[string]string{
		"reports.daily_email": "ReportsDailyEmail",
		"billing.invoice":     "BillingInvoice",
		"billing.invoice_id":  "BillingInvoiceID",
		"api.http_sync":       "APIHTTPSync",
		"a.b_c":               "ABC",
		"a_b.c":               "ABC",
		"v2.x":                "V2X",
		"reports.utf8_export": "ReportsUTF8Export",
		"a.b2c":               "AB2c",
		"zone.zip_zap":        "ZoneZipZap", // z, the last letter, is a letter too
	} {
		require.Equal(t, want, decl.GoName(name), name)
	}
}

func TestParamGoName(t *testing.T) {
	for name, want := range map[string]string{
		"tenant_id": "tenantID",
		"id":        "id",
		"url_path":  "urlPath",
		"user_uuid": "userUUID",
		"a1_b2":     "a1B2",
		"kind":      "kind",
	} {
		require.Equal(t, want, decl.ParamGoName(name), name)
	}
}

// parse parses src as locks.yaml and fails the test on problems.
func parse(t *testing.T, src string) *decl.File {
	t.Helper()
	f, err := decl.Parse("locks.yaml", []byte(src))
	require.NoError(t, err)
	require.NotNil(t, f)
	return f
}

// problems returns the problems of err as "line:col: message" strings.
func problems(t *testing.T, err error) []string {
	t.Helper()
	var list decl.ErrorList
	require.True(t, errors.As(err, &list), "want an ErrorList, got %v", err)
	var out []string
	for _, e := range list {
		require.Equal(t, "locks.yaml", e.File)
		out = append(out, strings.TrimPrefix(e.Error(), "locks.yaml:"))
	}
	return out
}

func TestParse(t *testing.T) {
	f := parse(t, `version: "1"
package: locks
locks:
  - name: reports.daily_email
    doc: |
      Sends the report.
      Once a day.
  - name: billing.invoice
    params:
      - name: tenant_id
        type: int64
      - {name: region, type: string}
  - name: reports.rebuild
    shared: true
    wait: 1m30s
  - name: legacy.cleanup
    id: -72707
`)
	require.Equal(t, "1", f.Version)
	require.Equal(t, "locks", f.Package)
	require.Equal(t, "locks_gen.go", f.Output, "default output: <base>_gen.go")
	require.Len(t, f.Locks, 4)

	daily := f.Lookup("reports.daily_email")
	require.Equal(t, "Sends the report.\nOnce a day.", daily.Doc)
	require.True(t, daily.Plain())
	require.Equal(t, decl.Pos{Line: 4, Col: 11}, daily.NamePos)

	inv := f.Lookup("billing.invoice")
	require.False(t, inv.Plain())
	require.Equal(t, []keyspace.ParamType{keyspace.Int64, keyspace.String}, inv.ParamTypes())
	require.Equal(t, "tenantID", inv.Params[0].GoName)
	require.Equal(t, decl.Pos{Line: 12, Col: 16}, inv.Params[1].NamePos)

	rb := f.Lookup("reports.rebuild")
	require.True(t, rb.Shared)
	require.True(t, rb.Wait)
	require.Equal(t, 90*time.Second, rb.WaitTimeout)

	pin := f.Lookup("legacy.cleanup")
	require.True(t, pin.HasPin)
	require.Equal(t, int64(-72707), pin.Pin)
	require.Nil(t, f.Lookup("nope"))
}

func TestParseFencing(t *testing.T) {
	f := parse(t, `version: "1"
package: locks
locks:
  - name: ledger.post
    fencing: true
  - name: billing.invoice
    fencing: true
    wait: 5s
    params: [{name: tenant_id, type: int64}]
  - name: reports.off
    fencing: false
  - name: reports.plain
`)
	require.NoError(t, decl.Check(f, nil))
	require.True(t, f.Lookup("ledger.post").Fencing)
	require.True(t, f.Lookup("billing.invoice").Fencing)
	require.False(t, f.Lookup("reports.off").Fencing)
	require.False(t, f.Lookup("reports.plain").Fencing)

	_, err := decl.Parse("locks.yaml", []byte(`version: "1"
package: locks
locks:
  - name: reports.readers
    shared: true
    fencing: true
  - name: reports.x
    fencing: on
`))
	require.Equal(t, []string{
		`6:5: fencing: true needs an exclusive lock, but this lock is shared: shared holders run at once, and each one's fencing token would make the others' writes stale; remove shared: or fencing:`,
		`8:14: fencing must be true or false, not "on"`,
	}, problems(t, err))
}

func TestOutputPath(t *testing.T) {
	for _, tc := range []struct{ path, output, want string }{
		{"locks.yaml", "", "locks_gen.go"},
		{"sub/my.locks.yml", "", filepath.Join("sub", "my.locks_gen.go")},
		{"sub/locks.yaml", "gen/./x.go", filepath.Join("sub", "gen", "x.go")},
	} {
		src := "version: \"1\"\npackage: p\n"
		if tc.output != "" {
			src += "output: " + tc.output + "\n"
		}
		f, err := decl.Parse(tc.path, []byte(src))
		require.NoError(t, err)
		require.Equal(t, tc.want, f.OutputPath(), tc.path)
	}
}

// TestNamePosition checks that an invalid name's column points at the
// offending byte inside plain and quoted scalars, and falls back to the
// scalar's start where the source does not spell the name verbatim.
func TestNamePosition(t *testing.T) {
	for _, tc := range []struct {
		line string // the lock line, on line 4
		want string
	}{
		{`  - name: reports.Daily`, "4:19"},
		{`  - name: 'reports.Daily'`, "4:20"},
		{`  - name: "reports.Daily"`, "4:20"},
		{`  - {name: reports.Daily}`, "4:20"},
		{`  - name: reports.daily.`, "4:25"}, // offset == len(name): just past the end
		{`  - name: "r\u0065ports.Daily"`, "4:11"},
		{`  - name: !!str reports.Daily`, "4:11"},
		{"  - name: |\n      reports.Daily", "4:11"},
	} {
		_, err := decl.Parse("locks.yaml", []byte("version: \"1\"\npackage: p\nlocks:\n"+tc.line+"\n"))
		require.Error(t, err, tc.line)
		got := problems(t, err)
		require.Len(t, got, 1, tc.line)
		require.True(t, strings.HasPrefix(got[0], tc.want+": invalid lock name"), "%s: got %s", tc.line, got[0])
	}
}

func TestParseCollectsEverything(t *testing.T) {
	f, err := decl.Parse("locks.yaml", []byte(`version: "3"
package: locks
locks:
  - name: a.B
  - name: b.c
    typo: 1
  - name: c.d
    wait: forever
`))
	require.NotNil(t, f, "a file with problems still comes back for Check")
	require.Equal(t, []string{
		`1:10: unsupported version "3": this lockgen reads version "1"`,
		`4:13: invalid lock name "a.B": uppercase letter: names are lowercase`,
		`6:5: unknown key "typo" in a lock (known keys: name, doc, params, id, shared, wait, fencing, limit, renamed_from, on_rename, on_id_change)`,
		`8:11: wait must be a Go duration such as 5s or 1m30s, not "forever"`,
	}, problems(t, err))
}

func TestCheckIDs(t *testing.T) {
	f := parse(t, `version: "1"
package: locks
locks:
  - name: reports.daily_email
  - name: legacy.cleanup
    id: 72707
  - name: reports.weekly
    renamed_from: reports.week
    on_rename: keep_id
  - name: reports.monthly
    renamed_from: reports.month
    on_rename: new_id
  - name: billing.invoice
    params: [{name: tenant_id, type: int64}]
`)
	require.NoError(t, decl.Check(f, nil))
	daily := f.Lookup("reports.daily_email")
	require.Equal(t, int64(-6078806957557529815), daily.ID)
	require.False(t, daily.Pinned)
	require.Equal(t, int64(72707), f.Lookup("legacy.cleanup").ID)
	require.True(t, f.Lookup("legacy.cleanup").Pinned)
	// Without history, keep_id keeps the ID derived from the old name.
	require.Equal(t, keyspace.ID("reports.week"), f.Lookup("reports.weekly").ID)
	require.True(t, f.Lookup("reports.weekly").Pinned)
	require.Equal(t, keyspace.ID("reports.monthly"), f.Lookup("reports.monthly").ID)
	require.Zero(t, f.Lookup("billing.invoice").ID)
}

func TestCheckKeepIDFromHistory(t *testing.T) {
	src := `version: "1"
package: locks
locks:
  - name: reports.weekly
    renamed_from: reports.week
    on_rename: keep_id
`
	// The old lock was pinned: keep_id keeps the pin, not the name's ID.
	f := parse(t, src)
	require.NoError(t, decl.Check(f, decl.History{"reports.week": {Name: "reports.week", ID: 72707}}))
	require.Equal(t, int64(72707), f.Lookup("reports.weekly").ID)

	// After the rename was generated the old name is gone from the history;
	// the lock keeps what it was emitted with.
	f = parse(t, src)
	require.NoError(t, decl.Check(f, decl.History{"reports.weekly": {Name: "reports.weekly", ID: 72707}}))
	require.Equal(t, int64(72707), f.Lookup("reports.weekly").ID)
}

func TestCheckHistory(t *testing.T) {
	hist := decl.History{
		"reports.week":    {Name: "reports.week", ID: keyspace.ID("reports.week")},
		"billing.invoice": {Name: "billing.invoice", Params: []keyspace.ParamType{keyspace.Int64}},
	}
	same := `version: "1"
package: locks
locks:
  - name: reports.week
  - name: billing.invoice
    params: [{name: tenant, type: int64}]
`
	require.NoError(t, decl.Check(parse(t, same), hist), "same IDs, renamed parameter: nothing to explain")

	gone := `version: "1"
package: locks
locks:
  - name: reports.weekly
`
	got := problems(t, decl.Check(parse(t, gone), hist))
	require.Len(t, got, 2)
	require.Contains(t, got[0], `3:1: lock "billing.invoice", with parameters (int64), was emitted before and is now missing`)
	require.Contains(t, got[1], `3:1: lock "reports.week" was emitted before and is now missing`)

	explained := `version: "1"
package: locks
locks:
  - name: reports.weekly
    renamed_from: reports.week
    on_rename: new_id
retired: [billing.invoice]
`
	require.NoError(t, decl.Check(parse(t, explained), hist))
	// Without a history, or with an empty one, nothing can be missing.
	require.NoError(t, decl.Check(parse(t, gone), nil))
	require.NoError(t, decl.Check(parse(t, gone), decl.History{}))
}

func TestErrorListSorted(t *testing.T) {
	err := decl.Join(
		decl.ErrorList{{File: "b.yaml", Pos: decl.Pos{Line: 1, Col: 1}, Msg: "b"}},
		decl.ErrorList{
			{File: "a.yaml", Pos: decl.Pos{Line: 3, Col: 2}, Msg: "z"},
			{File: "a.yaml", Pos: decl.Pos{Line: 3, Col: 1}, Msg: "y"},
			{File: "a.yaml", Pos: decl.Pos{Line: 1, Col: 9}, Msg: "x"},
		},
		nil,
	)
	require.EqualError(t, err, "a.yaml:1:9: x\na.yaml:3:1: y\na.yaml:3:2: z\nb.yaml:1:1: b")
	require.NoError(t, decl.Join(nil, nil))
}

// TestCheckRenameAndIDChangeRules: keep_id from a lock that had parameters
// is refused (there is no single ID to keep), new_id is not; an ID that
// changed since the last output is refused unless on_id_change: new_id
// says it is intended.
func TestCheckRenameAndIDChangeRules(t *testing.T) {
	hist := decl.History{"reports.by_day": {Name: "reports.by_day", Params: []keyspace.ParamType{keyspace.Int64}}}
	renamed := func(onRename string) string {
		return "version: \"1\"\npackage: locks\nlocks:\n  - name: reports.daily\n    renamed_from: reports.by_day\n    on_rename: " + onRename + "\n"
	}
	err := decl.Check(parse(t, renamed("keep_id")), hist)
	require.ErrorContains(t, err, `on_rename: keep_id needs the old lock to be plain, but "reports.by_day" had parameters (int64)`)
	require.NoError(t, decl.Check(parse(t, renamed("new_id")), hist), "control: new_id")

	hist = decl.History{"legacy.cleanup": {Name: "legacy.cleanup", ID: 72707}}
	pinned := "version: \"1\"\npackage: locks\nlocks:\n  - name: legacy.cleanup\n    id: 72708\n"
	err = decl.Check(parse(t, pinned), hist)
	require.ErrorContains(t, err, "on_id_change: new_id")
	require.NoError(t, decl.Check(parse(t, pinned+"    on_id_change: new_id\n"), hist), "control: the change is declared")
	require.NoError(t, decl.Check(parse(t, strings.Replace(pinned, "72708", "72707", 1)), hist), "control: the same ID")

	hist = decl.History{"billing.invoice": {Name: "billing.invoice", Params: []keyspace.ParamType{keyspace.Int64}}}
	retyped := "version: \"1\"\npackage: locks\nlocks:\n  - name: billing.invoice\n    params: [{name: tenant, type: string}]\n"
	err = decl.Check(parse(t, retyped), hist)
	require.ErrorContains(t, err, "on_id_change: new_id", "a parameter's type changed: every ID changed")
	require.NoError(t, decl.Check(parse(t, retyped+"    on_id_change: new_id\n"), hist), "control: the change is declared")

	hist = decl.History{"billing.invoice": {Name: "billing.invoice", ID: keyspace.ID("billing.invoice")}}
	err = decl.Check(parse(t, retyped), hist)
	require.ErrorContains(t, err, `lock "billing.invoice" was emitted with no parameters and now has parameters (string)`)
}

// TestParseParamsAndDocRules: a parameter name given twice, and two names
// that become one Go identifier (a_id and a_i_d are both aID), are refused
// at the second one; a doc may hold tabs and newlines but no other control
// character. Each refusal has its control.
func TestParseParamsAndDocRules(t *testing.T) {
	lock := func(body string) string {
		return "version: \"1\"\npackage: locks\nlocks:\n  - name: billing.invoice\n" + body
	}
	_, err := decl.Parse("locks.yaml", []byte(lock("    params: [{name: a_id, type: int64}, {name: a_id, type: string}]\n")))
	require.ErrorContains(t, err, `duplicate parameter "a_id"`)
	_, err = decl.Parse("locks.yaml", []byte(lock("    params: [{name: a_id, type: int64}, {name: a_i_d, type: string}]\n")))
	require.ErrorContains(t, err, `parameters "a_id" and "a_i_d" both become the Go identifier aID`)
	_, err = decl.Parse("locks.yaml", []byte(lock("    params: [{name: a_id, type: int64}, {name: b_id, type: string}]\n")))
	require.NoError(t, err, "control: two names, two identifiers")

	f, err := decl.Parse("locks.yaml", []byte(lock("    doc: \"one\\ttwo\\nthree\"\n")))
	require.NoError(t, err)
	require.Equal(t, "one\ttwo\nthree", f.Lookup("billing.invoice").Doc)
	_, err = decl.Parse("locks.yaml", []byte(lock("    doc: \"one\\x01two\"\n")))
	require.ErrorContains(t, err, "doc contains the control character U+0001")
}

// TestErrorPositionInsideScalar: a problem at a byte inside a name is
// reported at that character, wherever the scalar is: a whole file on one
// line without a final newline (the first line is also the last), a flow
// value continued at the first column of the next line, and the usual
// block layout.
func TestErrorPositionInsideScalar(t *testing.T) {
	for src, want := range map[string]string{
		`{version: "1", package: p, locks: [{name: a.B}]}`:        "locks.yaml:1:45: invalid lock name",
		"{version: \"1\", package: p, locks: [{name:\na.B}]}\n":   "locks.yaml:2:3: invalid lock name",
		"version: \"1\"\npackage: p\nlocks:\n  - name: a.B\n":     "locks.yaml:4:13: invalid lock name",
		"version: \"1\"\npackage: p\nlocks:\n  - name: \"a.B\"\n": "locks.yaml:4:14: invalid lock name",
	} {
		_, err := decl.Parse("locks.yaml", []byte(src))
		require.ErrorContains(t, err, want, "%q", src)
	}
}
