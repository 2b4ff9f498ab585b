package status_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/status"
	"github.com/lockgen/lockgen/internal/testkit/lockscene"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/keyspace"
	"github.com/lockgen/lockgen/pgadvisory"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// ofScene keeps the rows of the scene's keys, by key then holder first.
func ofScene(s *lockscene.Scene, locks []status.Lock) map[int64][]status.Lock {
	out := map[int64][]status.Lock{}
	for _, l := range locks {
		if slices.Contains(s.Keys(), l.LockID) {
			out[l.LockID] = append(out[l.LockID], l)
		}
	}
	return out
}

func TestQueryShowsLocksByName(t *testing.T) {
	ctx := context.Background()
	db := testdb.DB(t)
	s := lockscene.Start(t, db)

	locks, err := status.Query(ctx, db, "")
	require.NoError(t, err)
	rows := ofScene(s, locks)
	require.Len(t, rows, 4, "%+v", rows)

	// The declared plain lock: its holder, granted, and its waiter.
	plain := rows[s.Plain.ID]
	require.Len(t, plain, 2)
	holder, waiter := plain[0], plain[1]
	require.Equal(t, s.Plain.Name, holder.Name)
	require.Equal(t, s.Plain.Name, holder.Label())
	require.Nil(t, holder.Params)
	require.Equal(t, "exclusive", holder.Mode)
	require.True(t, holder.Granted)
	require.Equal(t, s.HolderPID, holder.PID)
	require.Equal(t, s.HolderApp, holder.AppName)
	require.NotEmpty(t, holder.ClientAddr, "the scene connects over TCP")
	require.Equal(t, "idle in transaction", holder.State, "the holder is parked in fn")
	require.False(t, holder.XactStart.IsZero())
	require.Positive(t, holder.XactAge)
	require.Empty(t, holder.BlockedBy)

	require.Equal(t, s.Plain.Name, waiter.Name)
	require.False(t, waiter.Granted)
	require.True(t, waiter.Waiting())
	require.Equal(t, s.WaiterPID, waiter.PID)
	require.Equal(t, s.WaiterApp, waiter.AppName)
	require.Equal(t, "active", waiter.State)
	require.Equal(t, "advisory", waiter.WaitEvent)
	require.Equal(t, []int{s.HolderPID}, waiter.BlockedBy)

	// The registered instance: name and parameters.
	inst := rows[s.InstanceID]
	require.Len(t, inst, 1)
	require.Equal(t, s.Invoice.Name, inst[0].Name)
	require.Equal(t, []status.Param{{Name: "tenant_id", Value: keyspace.Int64Param(s.Tenant)}}, inst[0].Params)
	require.Equal(t, s.SessionPID, inst[0].PID)
	require.Equal(t, s.SessionApp, inst[0].AppName)
	// A session lock on an idle connection: no transaction.
	require.Equal(t, "idle", inst[0].State)
	require.True(t, inst[0].XactStart.IsZero())

	// Control: the unregistered instance of the same declaration and the
	// undeclared key have no name; they show their raw keys.
	unknown := rows[s.UnknownID]
	require.Len(t, unknown, 1)
	require.Empty(t, unknown[0].Name)
	require.Nil(t, unknown[0].Params)
	require.Equal(t, "shared", unknown[0].Mode)
	require.Equal(t, strconv.FormatInt(s.UnknownID, 10), unknown[0].Label())
	raw := rows[s.RawKey]
	require.Len(t, raw, 1)
	require.Less(t, s.RawKey, int64(0), "the raw key is negative: the view must rebuild the sign")
	require.Empty(t, raw[0].Name)
	require.Equal(t, strconv.FormatInt(s.RawKey, 10), raw[0].Label())
	require.True(t, raw[0].Granted)

	// Sorted: names before raw keys.
	var order []int64
	for _, l := range locks {
		if slices.Contains(s.Keys(), l.LockID) && !slices.Contains(order, l.LockID) {
			order = append(order, l.LockID)
		}
	}
	wantFirst := []int64{s.InstanceID, s.Plain.ID} // "…invoice" < "…plain"
	require.Equal(t, wantFirst, order[:2])
	require.ElementsMatch(t, []int64{s.UnknownID, s.RawKey}, order[2:])

	// Control: the listing is live. Once the holder commits and the waiter
	// has had its turn, the plain lock is gone.
	s.Release(t)
	locks, err = status.Query(ctx, db, "")
	require.NoError(t, err)
	rows = ofScene(s, locks)
	require.NotContains(t, rows, s.Plain.ID)
	require.Contains(t, rows, s.RawKey)
}

func TestQueryNamePrefix(t *testing.T) {
	ctx := context.Background()
	db := testdb.DB(t)
	s := lockscene.Start(t, db)

	locks, err := status.Query(ctx, db, s.Prefix)
	require.NoError(t, err)
	require.Len(t, locks, 3, "holder, waiter, registered instance: %+v", locks)
	for _, l := range locks {
		require.True(t, strings.HasPrefix(l.Name, s.Prefix), l.Name)
	}
	locks, err = status.Query(ctx, db, s.Plain.Name)
	require.NoError(t, err)
	require.Len(t, locks, 2)
	// A prefix is text, not a pattern: "_" and "%" match themselves.
	locks, err = status.Query(ctx, db, strings.ReplaceAll(s.Prefix, ".", "_"))
	require.NoError(t, err)
	require.Empty(t, locks)
	// Control: without a prefix the unregistered keys are there too.
	locks, err = status.Query(ctx, db, "")
	require.NoError(t, err)
	require.Len(t, ofScene(s, locks), 4)
}

// TestViewMatchesPgLocks: the view's lock_id is the bigint key, rebuilt from
// pg_locks' classid and objid exactly as Go splits it, and the view returns
// the rows Query reads.
func TestViewMatchesPgLocks(t *testing.T) {
	ctx := context.Background()
	db := testdb.DB(t)
	s := lockscene.Start(t, db)

	type row struct {
		ID      int64
		Name    string
		Granted bool
		PID     int
	}
	read := func(q string, args ...any) []row {
		rs, err := db.QueryContext(ctx, q, args...)
		require.NoError(t, err)
		defer rs.Close()
		var out []row
		for rs.Next() {
			var r row
			var name sql.NullString
			require.NoError(t, rs.Scan(&r.ID, &name, &r.Granted, &r.PID))
			r.Name = name.String
			out = append(out, r)
		}
		require.NoError(t, rs.Err())
		return out
	}
	var want []row
	for _, k := range s.Keys() {
		// Straight from pg_locks, matching on the halves Go computes.
		for _, r := range read(`SELECT $1::bigint, '', granted, pid FROM pg_catalog.pg_locks
			WHERE locktype = 'advisory' AND objsubid = 1 AND classid = $2::bigint::oid AND objid = $3::bigint::oid`,
			k, uint32(uint64(k)>>32), uint32(k)) {
			switch k {
			case s.Plain.ID:
				r.Name = s.Plain.Name
			case s.InstanceID:
				r.Name = s.Invoice.Name
			}
			want = append(want, r)
		}
	}
	require.Len(t, want, 5)
	got := read(`SELECT lock_id, name, granted, pid FROM pgadvisory.status WHERE lock_id = ANY($1)`, s.Keys())
	require.ElementsMatch(t, want, got)

	locks, err := status.Query(ctx, db, "")
	require.NoError(t, err)
	var fromGo []row
	for _, l := range locks {
		if slices.Contains(s.Keys(), l.LockID) {
			fromGo = append(fromGo, row{l.LockID, l.Name, l.Granted, l.PID})
		}
	}
	require.ElementsMatch(t, want, fromGo)
}

func TestWriteTableAndJSON(t *testing.T) {
	ctx := context.Background()
	db := testdb.DB(t)
	s := lockscene.Start(t, db)
	locks, err := status.Query(ctx, db, s.Prefix)
	require.NoError(t, err)
	all, err := status.Query(ctx, db, "")
	require.NoError(t, err)
	for _, l := range all {
		if l.LockID == s.RawKey {
			locks = append(locks, l)
		}
	}

	var table bytes.Buffer
	require.NoError(t, status.WriteTable(&table, locks))
	lines := strings.Split(strings.TrimSuffix(table.String(), "\n"), "\n")
	require.Len(t, lines, 5, table.String())
	require.Regexp(t, `^NAME/KEY +PARAMS +MODE +STATE +PID +APP +CLIENT +XACT AGE +BACKEND +BLOCKED BY$`, lines[0])
	cols := func(line string) []string { return regexp.MustCompile(`  +`).Split(line, -1) }
	// Aligned: every column starts where its header does.
	starts := func(line string) []int {
		var out []int
		for _, m := range regexp.MustCompile(`(^|  )[^ ]`).FindAllStringIndex(line, -1) {
			out = append(out, m[1]-1)
		}
		return out
	}
	for _, line := range lines[1:] {
		require.Len(t, cols(line), 10, line)
		require.Equal(t, starts(lines[0]), starts(line), "%q\n%q", lines[0], line)
	}
	inst, holder, waiter, raw := cols(lines[1]), cols(lines[2]), cols(lines[3]), cols(lines[4])
	require.Equal(t, []string{s.Invoice.Name, fmt.Sprintf("tenant_id=%d", s.Tenant), "exclusive", "granted", strconv.Itoa(s.SessionPID), s.SessionApp}, inst[:6])
	require.Equal(t, "-", inst[7], "no transaction")
	require.Equal(t, []string{s.Plain.Name, "-", "exclusive", "granted", strconv.Itoa(s.HolderPID), s.HolderApp}, holder[:6])
	require.Equal(t, "idle", inst[8], "a session lock's backend between statements")
	require.Equal(t, "idle in transaction", holder[8])
	require.Equal(t, "-", holder[9])
	require.Regexp(t, `^[0-9.]+(ms|s|m)`, holder[7])
	require.Equal(t, []string{s.Plain.Name, "-", "exclusive", "waiting", strconv.Itoa(s.WaiterPID), s.WaiterApp}, waiter[:6])
	require.Equal(t, "active", waiter[8], "waiting inside pg_advisory_xact_lock")
	require.Equal(t, strconv.Itoa(s.HolderPID), waiter[9])
	require.Equal(t, strconv.FormatInt(s.RawKey, 10), raw[0])

	var out bytes.Buffer
	require.NoError(t, status.WriteJSON(&out, locks))
	// Stable field names: decode loosely, as a tool would.
	var generic []map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &generic))
	require.Len(t, generic, 4)
	keys := make([]string, 0)
	for k := range generic[0] {
		keys = append(keys, k)
	}
	require.ElementsMatch(t, []string{"lock_id", "name", "params", "mode", "state", "granted", "pid",
		"application_name", "client_addr", "xact_start", "xact_age_seconds", "backend_state", "wait_event", "blocked_by", "int4_keys", "leader", "limit", "queue"}, keys)
	require.Equal(t, strconv.FormatInt(s.InstanceID, 10), generic[0]["lock_id"])
	require.Equal(t, map[string]any{"tenant_id": keyspace.Int64Param(s.Tenant)}, generic[0]["params"])
	require.Nil(t, generic[0]["xact_start"])
	require.Equal(t, "waiting", generic[2]["state"])
	require.Equal(t, []any{float64(s.HolderPID)}, generic[2]["blocked_by"])
	require.Equal(t, []any{}, generic[1]["blocked_by"])
	require.Nil(t, generic[3]["name"])
	require.Nil(t, generic[3]["params"])
	require.Equal(t, strconv.FormatInt(s.RawKey, 10), generic[3]["lock_id"])

	var typed []status.JSONLock
	require.NoError(t, json.Unmarshal(out.Bytes(), &typed))
	require.NotNil(t, typed[1].XactStart)
	require.WithinDuration(t, time.Now(), *typed[1].XactStart, time.Hour)

	// Nothing held: a sentence, and an empty array.
	table.Reset()
	require.NoError(t, status.WriteTable(&table, nil))
	require.Equal(t, status.Empty+"\n", table.String())
	out.Reset()
	require.NoError(t, status.WriteJSON(&out, nil))
	require.Equal(t, "[]\n", out.String())
}

func TestWriteTableSanitizesCells(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, status.WriteTable(&b, []status.Lock{{LockID: 7, Mode: "exclusive", Granted: true, PID: 1, AppName: "evil\tapp\nname"}}))
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	require.Len(t, lines, 2)
	require.Contains(t, lines[1], "evil app name")
}

func TestFormatAge(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second:                           "0s",
		1234567 * time.Nanosecond:              "1ms",
		3*time.Second + 260*time.Millisecond:   "3.3s",
		61*time.Minute + 2600*time.Millisecond: "1h1m3s",
	} {
		require.Equal(t, want, status.FormatAge(d), d.String())
	}
}

// TestQueryWithoutMigrations: a database without the schema gets an error
// that says what to do.
func TestQueryWithoutMigrations(t *testing.T) {
	ctx := context.Background()
	_, u := testdb.EmptyDatabase(t)
	db, err := sql.Open("pgx", u)
	require.NoError(t, err)
	defer db.Close()

	_, err = status.Query(ctx, db, "")
	require.ErrorContains(t, err, "status: the view pgadvisory.status is missing: run pgadvisory.Migrate or goose up first")
	// Control: with the migrations applied the same query works.
	require.NoError(t, pgadvisory.Migrate(ctx, db))
	_, err = status.Query(ctx, db, "")
	require.NoError(t, err)
}

// TestInt4KeyLocksCounted: locks taken with two int4 keys are invisible to
// the view (objsubid = 2) and counted by Int4KeyLocks instead. Control: the
// bigint-key lock taken beside them is listed by Query and not counted.
func TestInt4KeyLocksCounted(t *testing.T) {
	ctx := testdb.Context(t)
	db := migrated.DB(t)
	before, err := status.Int4KeyLocks(ctx, db)
	require.NoError(t, err)

	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	key := testdb.Key(t)
	a, b := int32(key>>32), int32(key)
	_, err = conn.ExecContext(ctx, "SELECT pg_advisory_lock($1::int4, $2::int4), pg_advisory_lock_shared($2::int4, $1::int4), pg_advisory_lock($3::bigint)", a, b, key)
	require.NoError(t, err)

	n, err := status.Int4KeyLocks(ctx, db)
	require.NoError(t, err)
	require.Equal(t, before+2, n)
	locks, err := status.Query(ctx, db, "")
	require.NoError(t, err)
	var listed int
	for _, l := range locks {
		if l.LockID == key {
			listed++
		}
	}
	require.Equal(t, 1, listed, "control: the bigint-key lock is listed")

	_, err = conn.ExecContext(ctx, "SELECT pg_advisory_unlock_all()")
	require.NoError(t, err)
	n, err = status.Int4KeyLocks(ctx, db)
	require.NoError(t, err)
	require.Equal(t, before, n)
}

// TestReadWithoutSchema: without lockgen's schema Read lists every advisory
// lock from pg_locks, bigint and two-int4 keys, unnamed (Named false); a
// name prefix matches nothing. Control: Query alone fails there.
func TestReadWithoutSchema(t *testing.T) {
	ctx := testdb.Context(t)
	_, u := testdb.EmptyDatabase(t)
	db, err := sql.Open("pgx", u)
	require.NoError(t, err)
	defer db.Close()
	_, err = status.Query(ctx, db, "")
	require.ErrorContains(t, err, "the view pgadvisory.status is missing")

	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	key := testdb.Key(t)
	var pid int
	require.NoError(t, conn.QueryRowContext(ctx, "SELECT pg_backend_pid() FROM (SELECT pg_advisory_lock($1::bigint), pg_advisory_lock_shared(-1, 2)) AS l", key).Scan(&pid))
	defer conn.ExecContext(context.Background(), "SELECT pg_advisory_unlock_all()")

	snap, err := status.Read(ctx, db, "")
	require.NoError(t, err)
	require.False(t, snap.Named)
	require.Len(t, snap.Locks, 2)
	require.Equal(t, key, snap.Locks[0].LockID)
	require.Equal(t, pid, snap.Locks[0].PID)
	require.Equal(t, "exclusive", snap.Locks[0].Mode)
	require.True(t, snap.Locks[1].Int4)
	require.Equal(t, [2]int32{-1, 2}, [2]int32{snap.Locks[1].Key1, snap.Locks[1].Key2})
	require.Equal(t, "shared", snap.Locks[1].Mode)
	require.Equal(t, "int4(-1,2)", snap.Locks[1].Label())

	snap, err = status.Read(ctx, db, "reports.")
	require.NoError(t, err)
	require.False(t, snap.Named)
	require.Empty(t, snap.Locks)
}
