package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rogpeppe/go-internal/testscript"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/decl"
	"github.com/lockgen/lockgen/internal/status"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/generatedlocks"
	"github.com/lockgen/lockgen/internal/testkit/lockscene"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// lockgen runs the command in-process and returns its exit status and
// output.
func lockgen(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestDBScripts runs testdata/dbscript against the package database while
// a lockscene holds and awaits locks. Scripts get LOCKGEN_DATABASE_URL and
// the scene: PREFIX, PLAIN (name), PLAIN_ID, HOLDER_PID, HOLDER_APP,
// WAITER_PID, WAITER_APP, INVOICE (name), TENANT, SESSION_PID, SESSION_APP,
// UNKNOWN_ID (an unregistered instance), RAWKEY (an undeclared key).
func TestDBScripts(t *testing.T) {
	db := testdb.DB(t)
	s := lockscene.Start(t, db)
	vars := map[string]string{
		"LOCKGEN_DATABASE_URL": testdb.URL(t),
		"PREFIX":               s.Prefix,
		"PLAIN":                s.Plain.Name,
		"PLAIN_ID":             strconv.FormatInt(s.Plain.ID, 10),
		"HOLDER_PID":           strconv.Itoa(s.HolderPID),
		"HOLDER_APP":           s.HolderApp,
		"WAITER_PID":           strconv.Itoa(s.WaiterPID),
		"WAITER_APP":           s.WaiterApp,
		"INVOICE":              s.Invoice.Name,
		"TENANT":               strconv.FormatInt(s.Tenant, 10),
		"SESSION_PID":          strconv.Itoa(s.SessionPID),
		"SESSION_APP":          s.SessionApp,
		"UNKNOWN_ID":           strconv.FormatInt(s.UnknownID, 10),
		"RAWKEY":               strconv.FormatInt(s.RawKey, 10),
	}
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/dbscript",
		RequireExplicitExec: true,
		RequireUniqueNames:  true,
		Setup: func(env *testscript.Env) error {
			for k, v := range vars {
				env.Setenv(k, v)
			}
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){"status": cmdStatus},
	})
}

// TestStatusCommandJSON: the command's -json output parses and holds the
// scene's rows; the table and -json list the same locks.
func TestStatusCommandJSON(t *testing.T) {
	db := testdb.DB(t)
	s := lockscene.Start(t, db)
	u := testdb.URL(t)

	code, out, errOut := lockgen("status", "-db", u, "-json")
	require.Equal(t, exitOK, code, errOut)
	var rows []status.JSONLock
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	byKey := map[string][]status.JSONLock{}
	for _, r := range rows {
		if r.LockID != nil {
			byKey[*r.LockID] = append(byKey[*r.LockID], r)
		}
	}
	plain := byKey[strconv.FormatInt(s.Plain.ID, 10)]
	require.Len(t, plain, 2)
	require.Equal(t, s.Plain.Name, *plain[0].Name)
	require.Equal(t, "granted", plain[0].State)
	require.Equal(t, s.HolderPID, *plain[0].PID)
	require.Equal(t, s.HolderApp, *plain[0].ApplicationName)
	require.NotNil(t, plain[0].ClientAddr)
	require.Equal(t, "waiting", plain[1].State)
	require.Equal(t, []int{s.HolderPID}, plain[1].BlockedBy)
	require.Equal(t, "advisory", *plain[1].WaitEvent)
	raw := byKey[strconv.FormatInt(s.RawKey, 10)]
	require.Len(t, raw, 1)
	require.Nil(t, raw[0].Name)

	// The table lists the same locks, one line each after the header.
	code, table, errOut := lockgen("status", "-db", u)
	require.Equal(t, exitOK, code, errOut)
	lines := strings.Split(strings.TrimSuffix(table, "\n"), "\n")
	require.Len(t, lines, len(rows)+1, table)
	for i, r := range rows {
		var label string
		switch {
		case r.Name != nil:
			label = *r.Name
		case r.LockID != nil:
			label = *r.LockID
		default:
			label = "int4("
		}
		require.True(t, strings.HasPrefix(lines[i+1], label+" "), "row %d: %q, want %s", i, lines[i+1], label)
	}
}

// TestStatusCommandListsInt4Keys: locks taken with two int4 keys, which the
// view does not list, are listed too (shown, not only counted), after the others, as int4(KEY1,KEY2); in JSON with int4_keys and
// a null lock_id. Control: before they are taken, no such row.
func TestStatusCommandListsInt4Keys(t *testing.T) {
	ctx := testdb.Context(t)
	db := testdb.DB(t)
	require.NoError(t, pgadvisory.Migrate(ctx, db))
	u := testdb.URL(t)
	key := testdb.Key(t)
	k1, k2 := int32(key>>32), int32(key)
	row := regexp.MustCompile(`(?m)^int4\(` + strconv.Itoa(int(k1)) + `,` + strconv.Itoa(int(k2)) + `\) +- +exclusive +granted +(\d+) `)
	code, out, errOut := lockgen("status", "-db", u)
	require.Equal(t, exitOK, code, errOut)
	require.NotRegexp(t, row, out, "control: not taken yet")

	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	var pid int
	require.NoError(t, conn.QueryRowContext(ctx, "SELECT pg_backend_pid() FROM (SELECT pg_advisory_lock($1::int4, $2::int4)) AS l", k1, k2).Scan(&pid))

	code, out, errOut = lockgen("status", "-db", u)
	require.Equal(t, exitOK, code, errOut)
	require.Empty(t, errOut)
	m := row.FindStringSubmatch(out)
	require.NotNil(t, m, out)
	require.Equal(t, strconv.Itoa(pid), m[1])

	code, out, errOut = lockgen("status", "-db", u, "-json")
	require.Equal(t, exitOK, code, errOut)
	var rows []status.JSONLock
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	var found int
	for _, r := range rows {
		if len(r.Int4Keys) == 2 && r.Int4Keys[0] == k1 && r.Int4Keys[1] == k2 {
			found++
			require.Nil(t, r.LockID)
			require.Nil(t, r.Name)
			require.Equal(t, pid, *r.PID)
		}
	}
	require.Equal(t, 1, found, out)
}

// TestStatusCommandWithoutMigrations: in an incident the schema may be
// missing; status still lists the advisory locks from pg_locks (raw keys,
// pids, ages, waits, both key spaces), and a note says names need the
// schema. register still needs it.
func TestStatusCommandWithoutMigrations(t *testing.T) {
	ctx := testdb.Context(t)
	_, u := testdb.EmptyDatabase(t)
	holder, waiter := openTestDB(t, u), openTestDB(t, u)
	key := testdb.Key(t)
	hc, err := holder.Conn(ctx)
	require.NoError(t, err)
	defer hc.Close()
	var holderPID, waiterPID int
	require.NoError(t, hc.QueryRowContext(ctx, "SELECT pg_backend_pid() FROM (SELECT pg_advisory_lock($1::bigint), pg_advisory_lock(7, 8)) AS l", key).Scan(&holderPID))
	wc, err := waiter.Conn(ctx)
	require.NoError(t, err)
	defer wc.Close()
	require.NoError(t, wc.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&waiterPID))
	waitCtx, stopWaiting := context.WithCancel(ctx)
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		_, _ = wc.ExecContext(waitCtx, "SELECT pg_advisory_lock($1::bigint)", key)
	}()
	defer func() { // before the connections close: the waiter must not wait for ever
		stopWaiting()
		<-waited
		_, _ = hc.ExecContext(context.Background(), "SELECT pg_advisory_unlock_all()")
	}()
	require.Eventually(t, func() bool {
		code, out, _ := lockgen("status", "-db", u)
		return code == exitOK && strings.Contains(out, " waiting ")
	}, 10*time.Second, 20*time.Millisecond)

	code, out, errOut := lockgen("status", "-db", u)
	require.Equal(t, exitOK, code, errOut)
	k := strconv.FormatInt(key, 10)
	require.Regexp(t, `(?m)^`+k+` +- +exclusive +granted +`+strconv.Itoa(holderPID)+` +\S+ +\S+ +- +idle +-$`, out)
	require.Regexp(t, `(?m)^`+k+` +- +exclusive +waiting +`+strconv.Itoa(waiterPID)+` +\S+ +\S+ +\S+ +active +`+strconv.Itoa(holderPID)+`$`, out)
	require.Regexp(t, `(?m)^int4\(7,8\) +- +exclusive +granted +`+strconv.Itoa(holderPID)+` `, out)
	require.Equal(t, "lockgen status: note: this database has no lockgen schema (the view pgadvisory.status), so locks show raw keys from pg_locks: "+
		"names need the schema and the registry (lockgen migrate up, then lockgen register)\n", errOut)

	// A name prefix cannot match without names: nothing, and the note.
	code, out, errOut = lockgen("status", "-db", u, "-name", "reports.")
	require.Equal(t, exitOK, code)
	require.Equal(t, status.Empty+"\n", out)
	require.Contains(t, errOut, "names need the schema")

	code, _, errOut = lockgen("register", "-f", "../../internal/testkit/generatedlocks/locks.yaml", "-db", u)
	require.Equal(t, exitFail, code)
	require.Contains(t, errOut, "the lock registry is missing: run pgadvisory.Migrate or goose up first")
}

// TestRegisterDeclaredMatchesGenerated: what lockgen register registers from
// a locks.yaml is exactly the generated Declared.
func TestRegisterDeclaredMatchesGenerated(t *testing.T) {
	loaded, err := decl.Load("../../internal/testkit/generatedlocks/locks.yaml", decl.LoadOptions{})
	require.NoError(t, err)
	got := declared(loaded.File)
	slices.SortFunc(got, func(a, b pgadvisory.Declared) int { return strings.Compare(a.Name, b.Name) })
	require.Equal(t, generatedlocks.Declared, got)
}

// TestRegisterCommandMatchesRegister: the registry rows lockgen register
// writes are the ones pgadvisory.Register writes for the generated code.
func TestRegisterCommandMatchesRegister(t *testing.T) {
	ctx := context.Background()
	db := testdb.DB(t)
	require.NoError(t, pgadvisory.Migrate(ctx, db))
	names := make([]string, len(generatedlocks.Declared))
	for i, d := range generatedlocks.Declared {
		names[i] = d.Name
	}
	clear := func() {
		for _, table := range []string{"registry", "registry_declaration"} {
			_, err := db.Exec(`DELETE FROM pgadvisory.`+table+` WHERE name = ANY($1)`, names)
			require.NoError(t, err)
		}
	}
	snapshot := func() string {
		var s string
		require.NoError(t, db.QueryRow(`SELECT
			(SELECT coalesce(jsonb_agg(to_jsonb(d) - 'registered_at' ORDER BY name), '[]') FROM pgadvisory.registry_declaration AS d WHERE name = ANY($1))::text
			|| (SELECT coalesce(jsonb_agg(to_jsonb(r) - 'registered_at' ORDER BY lock_id), '[]') FROM pgadvisory.registry AS r WHERE name = ANY($1))::text`,
			names).Scan(&s))
		return s
	}
	clear()
	require.Equal(t, "[][]", snapshot())

	code, out, errOut := lockgen("register", "-f", "../../internal/testkit/generatedlocks/locks.yaml", "-db", testdb.URL(t))
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, "registered 5 lock(s) from ../../internal/testkit/generatedlocks/locks.yaml: 3 plain, 2 parameterized\n", out)
	fromCLI := snapshot()
	require.Contains(t, fromCLI, `"maintenance.nightly_cleanup"`)
	require.Contains(t, fromCLI, `"tenant_uuid"`)

	clear()
	require.NoError(t, pgadvisory.Register(ctx, db, generatedlocks.Declared))
	require.Equal(t, fromCLI, snapshot())

	// Control: the snapshot sees a difference in any registered field.
	_, err := db.Exec(`UPDATE pgadvisory.registry_declaration SET doc = doc || '.' WHERE name = 'billing.invoice'`)
	require.NoError(t, err)
	require.NotEqual(t, fromCLI, snapshot())
}

// TestRegisterErrorPrefix: pgadvisory's errors reach the user once
// prefixed, as lockgen's: "lockgen: register: …", never "lockgen:
// pgadvisory: register: …". A database without lockgen's schema makes
// Register fail.
func TestRegisterErrorPrefix(t *testing.T) {
	_, url := testdb.EmptyDatabase(t)
	file := filepath.Join(t.TempDir(), "locks.yaml")
	require.NoError(t, os.WriteFile(file, []byte("version: \"1\"\npackage: locks\nlocks:\n  - name: script.prefix\n"), 0o644))
	code, _, errOut := lockgen("register", "-f", file, "-db", url)
	require.Equal(t, exitFail, code)
	require.True(t, strings.HasPrefix(errOut, "lockgen: register: "), errOut)
	require.NotContains(t, errOut, "pgadvisory: register", errOut)
	require.Contains(t, errOut, "run pgadvisory.Migrate", "the hint survives")
}

// TestStatusCommandShowsLeadership: a pgadvisory.Lead leadership shows as
// such, on the leader's row only (not on a waiting candidate's): holder
// name, term and since, in the table's LEADER column and in -json. Control:
// once the leader resigns the column is gone, and a database migrated
// before 00007 (a view without the leader columns) is still read.
func TestStatusCommandShowsLeadership(t *testing.T) {
	ctx := testdb.Context(t)
	db := testdb.DB(t)
	require.NoError(t, pgadvisory.Migrate(ctx, db))
	u := testdb.URL(t)
	key := testdb.Key(t)
	keyText := strconv.FormatInt(key, 10)

	elected := make(chan int64, 1)
	resign := make(chan struct{})
	done, waiterDone := make(chan error, 1), make(chan error, 1)
	go func() {
		done <- pgadvisory.Lead(ctx, db, key, func(ctx context.Context, term int64) error {
			elected <- term
			<-resign
			return nil
		}, pgadvisory.WithHolder("scheduler-a"))
	}()
	term := frontdoor.Await(t, elected, "the election")
	waiterCtx, stopWaiter := context.WithCancel(ctx)
	// A candidate waits in lockgen's queue, holding no connection: a line
	// of its own, mode queued, no pid and no leader.
	own, err := pgadvisory.New(pgadvisory.Stdlib(db))
	require.NoError(t, err)
	go func() {
		waiterDone <- own.Lead(waiterCtx, pgadvisory.ID(key), func(context.Context, int64) error { return nil }, pgadvisory.WithHolder("scheduler-b"))
	}()
	require.Eventually(t, func() bool {
		_, out, _ := lockgen("status", "-db", u)
		return strings.Contains(out, "1 queued")
	}, 30*time.Second, 20*time.Millisecond)

	code, table, errOut := lockgen("status", "-db", u)
	require.Equal(t, exitOK, code, errOut)
	require.Regexp(t, `(?m)^NAME/KEY .* BLOCKED BY +LEADER$`, table)
	require.Regexp(t, `(?m)^`+keyText+` +- +exclusive +granted +.* +scheduler-a, term `+strconv.FormatInt(term, 10)+`, since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`, table)
	require.Regexp(t, `(?m)^`+keyText+` +- +queued +1 queued +- +- +- +- +- +- +-$`, table, "a waiting candidate is no leader")

	code, out, errOut := lockgen("status", "-db", u, "-json")
	require.Equal(t, exitOK, code, errOut)
	var rows []status.JSONLock
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	var leaders []status.JSONLeader
	for _, r := range rows {
		if r.LockID != nil && *r.LockID == keyText && r.Leader != nil {
			require.Equal(t, "granted", r.State)
			leaders = append(leaders, *r.Leader)
		}
	}
	require.Len(t, leaders, 1)
	require.Equal(t, "scheduler-a", leaders[0].Holder)
	require.Equal(t, term, leaders[0].Term)
	require.WithinDuration(t, time.Now(), leaders[0].Since, time.Minute)

	stopWaiter()
	require.ErrorIs(t, frontdoor.Await(t, waiterDone, "the waiter"), context.Canceled)
	close(resign)
	require.NoError(t, frontdoor.Await(t, done, "the leader's return"))
	require.Eventually(t, func() bool {
		_, out, _ := lockgen("status", "-db", u)
		return !strings.Contains(out, keyText)
	}, 30*time.Second, 20*time.Millisecond)
	_, table, _ = lockgen("status", "-db", u)
	require.NotContains(t, table, "LEADER")

	// A database migrated before 00007: its view has no leader columns.
	old := migrated.UpTo(t, 6)
	var url string
	require.NoError(t, old.QueryRowContext(ctx, `SELECT current_database()`).Scan(&url))
	held, err := old.Conn(ctx)
	require.NoError(t, err)
	defer held.Close()
	_, err = held.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, key)
	require.NoError(t, err)
	code, table, errOut = lockgen("status", "-db", urlWithDatabase(t, u, url))
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, table, keyText)
	require.NotContains(t, table, "LEADER")
}

// urlWithDatabase is url with its database name replaced.
func urlWithDatabase(t *testing.T, url, name string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	return fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Host, cfg.Port, name)
}
