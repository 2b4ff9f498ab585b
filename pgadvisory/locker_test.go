package pgadvisory_test

import (
	"context"
	"database/sql"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestNewRefusals: New refuses a nil driver, a nil pool and every bad
// LockerOption, naming it, with ErrInvalidArgument and Op "options".
func TestNewRefusals(t *testing.T) {
	db := testdb.DB(t)
	refused := func(t *testing.T, err error, what string) {
		t.Helper()
		require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument)
		var pe *pgadvisory.Error
		require.ErrorAs(t, err, &pe)
		require.Equal(t, pgadvisory.OpOptions, pe.Op)
		require.Contains(t, err.Error(), what)
	}
	_, err := pgadvisory.New[*sql.Tx](nil)
	refused(t, err, "nil Driver")
	_, err = pgadvisory.New(pgadvisory.Stdlib(nil))
	refused(t, err, "nil *sql.DB")
	_, err = pgadvisory.New(pgadvisory.Pgx(nil))
	refused(t, err, "nil *pgxpool.Pool")

	for name, opt := range map[string]pgadvisory.LockerOption{
		"WithSessionConns":         pgadvisory.WithSessionConns(-1),
		"WithDefaultCheckInterval": pgadvisory.WithDefaultCheckInterval(0),
		"WithDefaultCheckTimeout":  pgadvisory.WithDefaultCheckTimeout(-time.Second),
		"WithDefaultHolder":        pgadvisory.WithDefaultHolder("a\x00b"),
		"WithLockerObserver":       pgadvisory.WithLockerObserver(nil),
	} {
		_, err := pgadvisory.New(pgadvisory.Stdlib(db), opt)
		refused(t, err, name)
	}
	_, err = pgadvisory.New(pgadvisory.Stdlib(db), pgadvisory.WithDefaultHolder(""))
	refused(t, err, "WithDefaultHolder")

	// Control: good options and nil ones are accepted.
	l, err := pgadvisory.New(pgadvisory.Stdlib(db), nil, pgadvisory.WithSessionConns(0), pgadvisory.WithSessionModePooler(),
		pgadvisory.WithDefaultCheckInterval(time.Second), pgadvisory.WithDefaultCheckTimeout(time.Second),
		pgadvisory.WithDefaultHolder("replica-1"), pgadvisory.WithLockerObserver(&callLog{}))
	require.NoError(t, err)
	require.NoError(t, l.Close())
}

// TestLockerClose: after Close every call fails with ErrClosed before
// anything is sent, Campaign included (it does not retry), while a session
// lock taken before Close runs to its end and its shared connection goes
// back to the pool. Close does not close the pool.
func TestLockerClose(t *testing.T) {
	frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
		ctx := testdb.Context(t)
		w := witness.New(t)
		key, other := testdb.Key(t), testdb.Key(t)
		require.NoError(t, door.RunExclusive(ctx, key, noop), "control: usable before Close")

		held, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- door.RunSession(ctx, pgadvisory.ID(other), func(context.Context) error {
				close(held)
				<-release
				return nil
			})
		}()
		frontdoor.Await(t, held, "the session lock")
		require.NoError(t, door.Close())
		require.NoError(t, door.Close(), "a second Close does nothing")

		closed := func(err error, what string) {
			t.Helper()
			require.ErrorIs(t, err, pgadvisory.ErrClosed, what)
		}
		closed(door.RunExclusive(ctx, key, txNotCalled(t)), "RunExclusive")
		closed(door.RunOnce(ctx, key, "w", txNotCalled(t)), "RunOnce")
		closed(door.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error { t.Error("fn was called"); return nil }), "RunSession")
		closed(door.Lead(ctx, pgadvisory.ID(key), notCalledLead(t)), "Lead")
		closed(door.Campaign(ctx, pgadvisory.ID(key), notCalledLead(t)), "Campaign")
		_, err := door.CurrentLeader(ctx, pgadvisory.ID(key))
		closed(err, "CurrentLeader")
		closed(door.RunFenced(ctx, 1, txNotCalled(t)), "RunFenced")
		tx, end, err := door.Begin(ctx, "")
		require.NoError(t, err)
		closed(door.LockTx(ctx, tx, pgadvisory.ID(key)), "LockTx")
		closed(door.SetFencingToken(ctx, tx, 1), "SetFencingToken")
		require.NoError(t, end(false))
		require.True(t, w.LockFree(t, key), "nothing was locked")

		require.False(t, w.LockFree(t, other), "the session lock taken before Close is still held")
		close(release)
		require.NoError(t, frontdoor.Await(t, done, "the session lock's return"))
		require.True(t, w.LockFree(t, other))
		frontdoor.RequireIdle(t, door)
		if door.Driver == frontdoor.SQL {
			require.NoError(t, door.DB().PingContext(ctx), "the pool itself is open")
		} else {
			require.NoError(t, door.Pool().Ping(ctx), "the pool itself is open")
		}
	})
}

// TestLockerSessionConnsAreItsOwn: a Locker's session locks share its own
// connections (WithSessionConns(1): one backend for all), another Locker on
// the same pool has others, and the deprecated SetSessionConns of the pool
// changes neither.
func TestLockerSessionConnsAreItsOwn(t *testing.T) {
	frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
		ctx := testdb.Context(t)
		w := witness.New(t)
		a := door.WithLocker(pgadvisory.WithSessionConns(1))
		b := door.WithLocker(pgadvisory.WithSessionConns(1))
		if door.Driver == frontdoor.SQL {
			require.NoError(t, pgadvisory.SetSessionConns(door.DB(), 0))
		} else {
			require.NoError(t, pgadvisory.SetSessionConnsPgx(door.Pool(), 0))
		}
		keys := []int64{testdb.Key(t), testdb.Key(t), testdb.Key(t)}
		hold := func(d frontdoor.Door, key int64, next func()) {
			require.NoError(t, d.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error { next(); return nil }))
		}
		hold(a, keys[0], func() {
			hold(a, keys[1], func() {
				hold(b, keys[2], func() {
					h0, h1, h2 := w.Holder(t, keys[0]), w.Holder(t, keys[1]), w.Holder(t, keys[2])
					require.Equal(t, h0.PID, h1.PID, "one Locker's locks share its one connection")
					require.NotEqual(t, h0.PID, h2.PID, "another Locker has its own")
				})
			})
		})
		frontdoor.RequireIdle(t, door)
	})
}

// TestLockerDefaults: the Locker's default holder names the run-once
// ledger's rows and the leader, a call's WithHolder wins, and its observer
// sees its calls: a leadership as CallLead.
func TestLockerDefaults(t *testing.T) {
	admin := migrated.DB(t)
	frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
		ctx := testdb.Context(t)
		key := testdb.Key(t)
		log := &callLog{keys: []int64{key}}
		d := door.WithLocker(pgadvisory.WithDefaultHolder("replica-7"), pgadvisory.WithLockerObserver(log))

		require.NoError(t, d.RunOnce(ctx, key, "w1", noop))
		require.NoError(t, d.RunOnce(ctx, key, "w2", noop, pgadvisory.WithHolder("call")))
		holder := func(window string) string {
			var h string
			require.NoError(t, admin.QueryRowContext(ctx, "SELECT holder FROM pgadvisory.run_once WHERE lock_id = $1 AND window_key = $2", key, window).Scan(&h))
			return h
		}
		require.Equal(t, "replica-7", holder("w1"))
		require.Equal(t, "call", holder("w2"))

		require.NoError(t, d.Lead(ctx, pgadvisory.ID(key), func(ctx context.Context, term int64) error {
			leader, err := d.CurrentLeader(ctx, pgadvisory.ID(key))
			require.NoError(t, err)
			require.Equal(t, "replica-7", leader.Holder)
			require.Equal(t, term, leader.Term)
			return nil
		}))

		calls := log.take()
		require.Len(t, calls, 3)
		require.Equal(t, []pgadvisory.CallKind{pgadvisory.CallOnce, pgadvisory.CallOnce, pgadvisory.CallLead},
			[]pgadvisory.CallKind{calls[0].call.Kind, calls[1].call.Kind, calls[2].call.Kind})
		require.Equal(t, pgadvisory.OutcomeAcquired, calls[2].end.Outcome)

		// Control: a Locker without defaults names the holder "<host>/<pid>".
		require.NoError(t, door.RunOnce(ctx, key, "w3", noop))
		require.NotEqual(t, "replica-7", holder("w3"))
		require.Empty(t, log.take(), "another Locker's calls are not its observer's")
	})
}

// TestLockTx: LockTx takes the lock in the caller's transaction, which
// holds it until it ends; a lock held elsewhere is ErrLocked and leaves the
// transaction usable; a transaction above READ COMMITTED is refused in the
// same statement, which takes nothing and leaves lock_timeout as it was;
// WithWait, WithShared and WithLocks apply and other options are refused.
func TestLockTx(t *testing.T) {
	frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
		ctx := testdb.Context(t)
		w := witness.New(t)
		key, second := testdb.Key(t), testdb.Key(t)
		begin := func(iso string) (frontdoor.Tx, func(bool) error) {
			t.Helper()
			tx, end, err := door.Begin(ctx, iso)
			require.NoError(t, err)
			t.Cleanup(func() { _ = end(false) })
			return tx, end
		}
		lock := pgadvisory.Lock{Name: "locktx.test", ID: key}

		holder, endHolder := begin("")
		require.NoError(t, door.LockTx(ctx, holder, lock))
		require.False(t, w.LockFree(t, key), "held by the caller's transaction")

		loser, endLoser := begin("read committed")
		err := door.LockTx(ctx, loser, lock)
		require.ErrorIs(t, err, pgadvisory.ErrLocked)
		var pe *pgadvisory.Error
		require.ErrorAs(t, err, &pe)
		require.Equal(t, pgadvisory.OpLock, pe.Op)
		require.Equal(t, "locktx.test", pe.Name)
		n, err := loser.QueryInt(ctx, "SELECT 1")
		require.NoError(t, err, "the loser's transaction is still usable")
		require.Equal(t, int64(1), n)

		err = door.LockTx(ctx, loser, lock, pgadvisory.WithWait(50*time.Millisecond))
		require.ErrorIs(t, err, pgadvisory.ErrLockTimeout)
		require.NoError(t, endLoser(false))

		require.NoError(t, endHolder(true))
		require.True(t, w.LockFree(t, key), "released with the transaction")

		for _, iso := range []string{"repeatable read", "serializable"} {
			tx, end := begin(iso)
			err := door.LockTx(ctx, tx, lock, pgadvisory.WithWait(time.Second))
			require.ErrorIs(t, err, pgadvisory.ErrIsolationLevel, iso)
			require.Contains(t, err.Error(), iso)
			require.True(t, w.LockFree(t, key), "%s: no lock was taken", iso)
			var lockTimeout string
			require.NoError(t, tx.QueryRow(ctx, "SELECT current_setting('lock_timeout')").Scan(&lockTimeout))
			require.Equal(t, "0", lockTimeout, "%s: the wait's lock_timeout was put back", iso)
			require.NoError(t, end(false))
		}

		// WithShared: two shared holders, an exclusive one refused.
		s1, end1 := begin("")
		s2, end2 := begin("")
		require.NoError(t, door.LockTx(ctx, s1, lock, pgadvisory.WithShared()))
		require.NoError(t, door.LockTx(ctx, s2, lock, pgadvisory.WithShared()))
		x, endX := begin("")
		require.ErrorIs(t, door.LockTx(ctx, x, lock), pgadvisory.ErrLocked)
		require.NoError(t, endX(false))
		require.NoError(t, end1(false))
		require.NoError(t, end2(false))

		// WithLocks: all of the set.
		set, endSet := begin("")
		require.NoError(t, door.LockTx(ctx, set, lock, pgadvisory.WithLocks(second)))
		require.False(t, w.LockFree(t, key))
		require.False(t, w.LockFree(t, second))
		require.NoError(t, endSet(true))
		require.True(t, w.LockFree(t, second))

		// Options that do not apply, and a nil transaction.
		tx, end := begin("")
		for name, opt := range map[string]pgadvisory.Option{
			"WithFencing":       pgadvisory.WithFencing(),
			"WithReadOnly":      pgadvisory.WithReadOnly(),
			"WithHolder":        pgadvisory.WithHolder("h"),
			"WithCheckInterval": pgadvisory.WithCheckInterval(time.Second),
		} {
			err := door.LockTx(ctx, tx, lock, opt)
			require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument, name)
			require.Contains(t, err.Error(), name+" does not apply to LockTx")
		}
		require.True(t, w.LockFree(t, key))
		require.NoError(t, end(false))
		if door.Driver == frontdoor.SQL {
			require.ErrorIs(t, door.SQLLocker().LockTx(ctx, nil, lock), pgadvisory.ErrInvalidArgument)
		} else {
			require.ErrorIs(t, door.PgxLocker().LockTx(ctx, nil, lock), pgadvisory.ErrInvalidArgument)
		}
	})
}

// TestLockTxObserved: observers see LockTx as CallLockTx, granted or
// contended.
func TestLockTxObserved(t *testing.T) {
	frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
		ctx := testdb.Context(t)
		key := testdb.Key(t)
		log := &callLog{keys: []int64{key}}
		d := door.WithLocker(pgadvisory.WithLockerObserver(log))
		tx, end, err := d.Begin(ctx, "")
		require.NoError(t, err)
		require.NoError(t, d.LockTx(ctx, tx, pgadvisory.ID(key)))
		other, endOther, err := d.Begin(ctx, "")
		require.NoError(t, err)
		require.ErrorIs(t, d.LockTx(ctx, other, pgadvisory.ID(key)), pgadvisory.ErrLocked)
		require.NoError(t, endOther(false))
		require.NoError(t, end(false))
		calls := log.take()
		require.Len(t, calls, 2)
		require.Equal(t, pgadvisory.CallLockTx, calls[0].call.Kind)
		require.Equal(t, pgadvisory.OutcomeAcquired, calls[0].end.Outcome)
		require.Equal(t, pgadvisory.OutcomeLocked, calls[1].end.Outcome)
	})
}

// TestLockerTransactionTypeIsInferred: TTx comes from the driver, so a
// func(*sql.Tx) error given to a pgx Locker does not compile, and the
// matching function does (the control). It builds two small programs
// against this module with go build's -overlay.
func TestLockerTransactionTypeIsInferred(t *testing.T) {
	if testing.Short() {
		t.Skip("builds programs")
	}
	_, self, _, ok := runtime.Caller(0)
	require.True(t, ok)
	pkgDir := filepath.Join(filepath.Dir(self), "internal", "txtypecheck")
	program := func(fn string) string {
		return `package main

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockgen/lockgen/pgadvisory"
)

var _ *sql.Tx
var _ pgx.Tx

func main() {
	l, _ := pgadvisory.New(pgadvisory.Pgx((*pgxpool.Pool)(nil)))
	_ = l.RunExclusive(context.Background(), pgadvisory.ID(1), ` + fn + `)
}
`
	}
	build := func(src string) (string, error) {
		dir := t.TempDir()
		file := filepath.Join(dir, "main.go")
		require.NoError(t, os.WriteFile(file, []byte(src), 0o600))
		overlay := filepath.Join(dir, "overlay.json")
		require.NoError(t, os.WriteFile(overlay, []byte(`{"Replace":{`+quote(filepath.Join(pkgDir, "main.go"))+`:`+quote(file)+`}}`), 0o600))
		// The package exists only in the overlay: build it from the module root.
		cmd := exec.Command("go", "build", "-overlay", overlay, "-o", os.DevNull, "./pgadvisory/internal/txtypecheck")
		cmd.Dir = filepath.Dir(filepath.Dir(filepath.Dir(pkgDir)))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := build(program("func(tx pgx.Tx) error { return nil }"))
	require.NoError(t, err, "control: the pgx function compiles: %s", out)
	out, err = build(program("func(tx *sql.Tx) error { return nil }"))
	require.Error(t, err, "a database/sql function given to a pgx Locker compiled")
	require.Contains(t, out, "*sql.Tx")
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `\`, `\\`) + `"` }

// TestPgxTxOptionsRefuseWhatTheyDrop: the deprecated WithPgxTxOptions
// carries AccessMode only; BeginQuery, CommitQuery and DeferrableMode are
// refused before anything is sent instead of being dropped, and
// WithReadOnly makes the transaction read-only.
func TestPgxTxOptionsRefuseWhatTheyDrop(t *testing.T) {
	frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
		ctx := testdb.Context(t)
		key := testdb.Key(t)
		for name, opts := range map[string]pgx.TxOptions{
			"BeginQuery":     {BeginQuery: "BEGIN"},
			"CommitQuery":    {CommitQuery: "COMMIT"},
			"DeferrableMode": {DeferrableMode: pgx.Deferrable},
		} {
			err := door.RunExclusive(ctx, key, txNotCalled(t), pgadvisory.WithPgxTxOptions(opts))
			require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument, name)
			require.Contains(t, err.Error(), name)
		}
		err := door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
			return tx.Exec(ctx, "CREATE TEMP TABLE read_only_probe (x int)")
		}, pgadvisory.WithReadOnly())
		require.Error(t, err, "WithReadOnly: a write is refused")
		require.Contains(t, err.Error(), "25006", "read_only_sql_transaction")
		require.NoError(t, door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
			return tx.Exec(ctx, "CREATE TEMP TABLE read_only_probe (x int)")
		}), "control: the same write without WithReadOnly")
	})
}
