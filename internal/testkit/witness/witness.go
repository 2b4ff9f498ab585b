// Package witness watches a test's calls from the side: a connection pool
// of its own on the package database (testdb) that never takes part in the
// calls under test. It reads what was committed (marks that fn writes into a
// table of the witness) and what the server holds: advisory locks in
// pg_locks, backends in pg_stat_activity. A call's own connection cannot
// tell these apart from its own view; the witness can.
//
//	w := witness.New(t)
//	err := door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
//		return w.Mark(ctx, tx, "ran")
//	})
//	require.False(t, w.Committed(t, "ran"))
//	require.True(t, w.LockFree(t, key))
package witness

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Witness is a connection pool that watches, and the table fn writes marks
// into ("" for a witness of locks only, see [Of]).
type Witness struct {
	DB    *sql.DB
	Table string // qualified name of the marks table (label text PRIMARY KEY)
}

// New opens a witness on the package database with a marks table in a
// private schema. When t fails, its cleanup ends any session still holding
// a lock on the table (a leaked connection's open transaction), so that
// dropping the schema does not wait forever.
func New(t testing.TB) *Witness {
	t.Helper()
	db := testdb.DB(t)
	table := pgx.Identifier{testdb.Schema(t), "marks"}.Sanitize()
	_, err := db.Exec("CREATE TABLE " + table + " (label text PRIMARY KEY)")
	require.NoError(t, err)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		_, _ = db.Exec(`SELECT pg_terminate_backend(pid, 10000) FROM pg_catalog.pg_locks
			WHERE relation = $1::regclass AND pid <> pg_backend_pid()`, table)
	})
	return &Witness{DB: db, Table: table}
}

// Of is a witness of locks and backends on db, without a marks table.
func Of(db *sql.DB) *Witness { return &Witness{DB: db} }

// Mark inserts label into the marks table through tx, the transaction
// under test.
func (w *Witness) Mark(ctx context.Context, tx frontdoor.Tx, label string) error {
	return tx.Exec(ctx, "INSERT INTO "+w.Table+" (label) VALUES ($1)", label)
}

// Committed reports whether a mark labelled label is visible to others.
func (w *Witness) Committed(t testing.TB, label string) bool {
	t.Helper()
	var n int
	require.NoError(t, w.DB.QueryRow("SELECT count(*) FROM "+w.Table+" WHERE label = $1", label).Scan(&n))
	return n == 1
}

// LockFree reports whether another session can take key right now (the
// probe's transaction-scoped lock ends with its own statement).
func (w *Witness) LockFree(t testing.TB, key int64) bool {
	t.Helper()
	var free bool
	require.NoError(t, w.DB.QueryRow("SELECT pg_try_advisory_xact_lock($1)", key).Scan(&free))
	return free
}

// Locks counts the advisory locks on keys in the witness's database, as
// pg_locks shows them: granted ones, or with granted false the requests
// still waiting.
func (w *Witness) Locks(t testing.TB, granted bool, keys ...int64) int {
	t.Helper()
	var n int
	require.NoError(t, w.DB.QueryRow(`SELECT count(*) FROM pg_catalog.pg_locks
WHERE locktype = 'advisory' AND objsubid = 1 AND granted = $2
  AND database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
  AND ((classid::bigint << 32) | objid::bigint) = ANY($1)`, keys, granted).Scan(&n))
	return n
}

// Hold is one advisory-lock row of pg_locks, with the holder's state.
type Hold struct {
	Key     int64
	PID     int32
	Mode    string // ExclusiveLock or ShareLock
	Granted bool
	State   string // pg_stat_activity.state: active, idle, idle in transaction, …
}

// Holds lists the pg_locks rows (granted or waiting) for keys in the
// witness's database, by key and pid. Unlike a try-lock probe it also sees
// a session lock leaked on a pooled connection, which is re-entrant for
// that connection.
func (w *Witness) Holds(t testing.TB, keys ...int64) []Hold {
	t.Helper()
	rows, err := w.DB.QueryContext(context.Background(), `
SELECT (l.classid::bigint << 32) | l.objid::bigint, l.pid, l.mode, l.granted, coalesce(a.state, '')
FROM pg_catalog.pg_locks l LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.objsubid = 1
  AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
  AND ((l.classid::bigint << 32) | l.objid::bigint) = ANY($1::bigint[])
ORDER BY 1, 2`, keys)
	require.NoError(t, err)
	defer rows.Close()
	var holds []Hold
	for rows.Next() {
		var h Hold
		require.NoError(t, rows.Scan(&h.Key, &h.PID, &h.Mode, &h.Granted, &h.State))
		holds = append(holds, h)
	}
	require.NoError(t, rows.Err())
	return holds
}

// Holder returns the one backend holding key, failing t if there is not
// exactly one.
func (w *Witness) Holder(t testing.TB, key int64) Hold {
	t.Helper()
	holds := w.Holds(t, key)
	require.Len(t, holds, 1, "holders of %d: %+v", key, holds)
	require.True(t, holds[0].Granted)
	return holds[0]
}

// BackendAlive reports whether the server still runs backend pid.
func (w *Witness) BackendAlive(t testing.TB, pid int64) bool {
	t.Helper()
	var n int
	require.NoError(t, w.DB.QueryRow("SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE pid = $1", pid).Scan(&n))
	return n == 1
}

// Sleeping reports whether backend pid is running pg_sleep. It may run
// outside the test's goroutine, so a failed query reads as false.
func (w *Witness) Sleeping(pid int64) bool {
	var n int
	err := w.DB.QueryRow(`SELECT count(*) FROM pg_catalog.pg_stat_activity
		WHERE pid = $1 AND state = 'active' AND query LIKE '%pg_sleep%'`, pid).Scan(&n)
	return err == nil && n == 1
}

// BlockedBy counts the backends running a statement like pattern (a LIKE
// pattern) that wait for a lock held by pid. It may run in a
// require.Eventually condition, so it reports a failed query with t.Errorf
// (and -1), not FailNow.
func (w *Witness) BlockedBy(t testing.TB, pid int64, pattern string) int64 {
	t.Helper()
	var n int64
	err := w.DB.QueryRow(`SELECT count(*) FROM pg_catalog.pg_stat_activity
		WHERE $1::int = ANY (pg_catalog.pg_blocking_pids(pid)) AND query LIKE $2`, pid, pattern).Scan(&n)
	if err != nil {
		t.Errorf("witness: reading pg_stat_activity: %v", err)
		return -1
	}
	return n
}

// Closing is what a failure story checks at its end, with
// [Witness.RequireClosing]: what became of the failed call's work, and
// that the call left nothing behind.
type Closing struct {
	// Mark is the label the failed call's fn marked; "" skips the check.
	Mark string
	// Committed: the mark must be committed (a COMMIT whose answer was
	// lost, the work committed anyway); false: it must not be.
	Committed bool
	// Late: the server may release the lock (and finish a commit) after
	// the call returned, once it notices a connection closed, or a
	// statement canceled, from a goroutine of the driver's: wait up to 30s
	// instead of checking at once.
	Late bool
	// Next is the label that a next call on the first key marks, to show
	// that the door still works; "" skips it.
	Next string
	// NextSetup is a statement that next call runs before its mark (for
	// example SET LOCAL synchronous_commit = local on a cluster whose
	// synchronous standby never answers); "" for none.
	NextSetup string
	// StaleConns is how many next calls may fail with ErrConnLost before
	// one commits: after a nemesis that killed backends whose calls then
	// ended normally, such a connection went back to the pool idle, and no
	// client can know before it uses it again. Each costs at most one call.
	StaleConns int
}

// RequireClosing is the closing check of a failure story on door: the
// failed call's mark committed or not (c.Mark, c.Committed), each of keys
// is free, no connection of door's pool is left checked out, and door
// still works (c.Next).
func (w *Witness) RequireClosing(t testing.TB, door frontdoor.Door, c Closing, keys ...int64) {
	t.Helper()
	const late, tick = 30 * time.Second, 10 * time.Millisecond
	if c.Mark != "" {
		if c.Committed && c.Late {
			require.Eventually(t, func() bool { return w.Committed(t, c.Mark) }, late, tick, "the failed call's work %q committed", c.Mark)
		} else {
			require.Equal(t, c.Committed, w.Committed(t, c.Mark), "the failed call's work %q committed", c.Mark)
		}
	}
	for _, key := range keys {
		if c.Late {
			require.Eventually(t, func() bool { return w.LockFree(t, key) }, late, tick, "lock %d is released", key)
		} else {
			require.True(t, w.LockFree(t, key), "lock %d is released", key)
		}
	}
	if c.Mark != "" && c.Late && !c.Committed {
		require.False(t, w.Committed(t, c.Mark), "nothing of the failed call %q committed once its lock was free", c.Mark)
	}
	frontdoor.RequireIdle(t, door)
	if c.Next == "" {
		return
	}
	require.NotEmpty(t, keys, "witness: Closing.Next needs a key")
	ctx, cancel := context.WithTimeout(context.Background(), late)
	defer cancel()
	for attempt := 0; ; attempt++ {
		err := door.RunExclusive(ctx, keys[0], func(tx frontdoor.Tx) error {
			if c.NextSetup != "" {
				if err := tx.Exec(ctx, c.NextSetup); err != nil {
					return err
				}
			}
			return w.Mark(ctx, tx, c.Next)
		})
		if err == nil {
			break
		}
		require.Less(t, attempt, c.StaleConns, "%s: the next call failed: %v", door, err)
		require.ErrorIs(t, err, pgadvisory.ErrConnLost, "attempt %d: only a stale pooled connection may fail a call", attempt)
		t.Logf("attempt %d found a stale pooled connection: %v", attempt, err)
	}
	require.True(t, w.Committed(t, c.Next), "control: a committed mark is seen")
}
