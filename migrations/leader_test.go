package migrations_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/migrations"
	"github.com/lockgen/lockgen/pgadvisory"
)

// electSQL is how a leader publishes its term (pgadvisory's Lead sends
// the same statement on the connection that holds the lock).
const electSQL = `SELECT term FROM pgadvisory.leader_elect($1, $2, '5s')`

// conn is one dedicated connection of db, closed when t ends.
func conn(t *testing.T, db *sql.DB) *sql.Conn {
	t.Helper()
	c, err := db.Conn(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestLeaderElectRefusesCallerWithoutTheLock: leader_elect publishes
// nothing for a caller that does not hold the lock, holds it shared, or
// while another session holds it; the control, the holder, publishes a
// term that is the lock's token, and its leader row.
func TestLeaderElectRefusesCallerWithoutTheLock(t *testing.T) {
	db := migrated.DB(t)
	ctx := context.Background()
	key := testdb.Key(t)
	before := fencing.Publish(t, db, key)

	attacker := conn(t, db)
	var term int64
	err := attacker.QueryRowContext(ctx, electSQL, key, "attacker").Scan(&term)
	sqlstate.Require(t, err, "55000")
	require.ErrorContains(t, err, "does not hold the advisory lock")

	_, err = attacker.ExecContext(ctx, `SELECT pg_advisory_lock_shared($1)`, key)
	require.NoError(t, err)
	sqlstate.Require(t, attacker.QueryRowContext(ctx, electSQL, key, "attacker").Scan(&term), "55000")
	_, err = attacker.ExecContext(ctx, `SELECT pg_advisory_unlock_shared($1)`, key)
	require.NoError(t, err)

	// A transaction-level hold is not a leadership: it ends with the
	// transaction.
	tx, err := attacker.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, key)
	require.NoError(t, err)
	sqlstate.Require(t, tx.QueryRowContext(ctx, electSQL, key, "attacker").Scan(&term), "55000")
	require.NoError(t, tx.Rollback())

	holder := conn(t, db)
	_, err = holder.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, key)
	require.NoError(t, err)
	sqlstate.Require(t, attacker.QueryRowContext(ctx, electSQL, key, "attacker").Scan(&term), "55000")
	// Another key's lock does not count for this one, nor a lock whose
	// key shares the low or high 32 bits.
	_, err = attacker.ExecContext(ctx, `SELECT pg_advisory_lock($1), pg_advisory_lock($2)`, key^(1<<40), key^1)
	require.NoError(t, err)
	sqlstate.Require(t, attacker.QueryRowContext(ctx, electSQL, key, "attacker").Scan(&term), "55000")

	require.Equal(t, before, fencing.Published(t, db, key), "no refused call published")
	var n int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM pgadvisory.leader WHERE lock_id = $1`, key).Scan(&n))
	require.Zero(t, n)

	// Control: the holder publishes, and still holds the lock, once.
	require.NoError(t, holder.QueryRowContext(ctx, electSQL, key, "holder").Scan(&term))
	var unlocked, again bool
	require.NoError(t, holder.QueryRowContext(ctx, `SELECT pg_advisory_unlock($1)`, key).Scan(&unlocked))
	require.True(t, unlocked)
	require.NoError(t, attacker.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&again))
	require.True(t, again, "one unlock frees it: the election left the hold count as it was")
	_, err = attacker.ExecContext(ctx, `SELECT pg_advisory_unlock($1)`, key)
	require.NoError(t, err)
	_, err = holder.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, key)
	require.NoError(t, err)
	require.Greater(t, term, before)
	require.Equal(t, term, fencing.Published(t, db, key))
	var holderName string
	require.NoError(t, db.QueryRow(`SELECT holder FROM pgadvisory.current_leader($1)`, key).Scan(&holderName))
	require.Equal(t, "holder", holderName)
	// Negative keys map to classid/objid as the server does.
	neg := -key
	_, err = holder.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, neg)
	require.NoError(t, err)
	require.NoError(t, holder.QueryRowContext(ctx, electSQL, neg, "holder").Scan(&term))
}

// TestLeaderElectWithoutPrivileges: a role with only what PUBLIC has can
// lead (publish terms) and read the current leader, but cannot write
// lockgen's tables to forge a term.
func TestLeaderElectWithoutPrivileges(t *testing.T) {
	admin := migrated.DB(t)
	app := fencing.OpenAs(t, admin, fencing.AppRole(t, admin))
	ctx := testdb.Context(t)
	key := testdb.Key(t)
	var got pgadvisory.Leader
	err := pgadvisory.Lead(ctx, app, key, func(ctx context.Context, term int64) error {
		var err error
		got, err = pgadvisory.CurrentLeader(ctx, app, key)
		if err != nil {
			return err
		}
		_, err = app.ExecContext(ctx, `UPDATE pgadvisory.fence SET token = token + 1 WHERE lock_id = $1`, key)
		sqlstate.Require(t, err, "42501")
		_, err = app.ExecContext(ctx, `UPDATE pgadvisory.leader SET holder = 'forged' WHERE lock_id = $1`, key)
		sqlstate.Require(t, err, "42501")
		return nil
	}, pgadvisory.WithHolder("app"))
	require.NoError(t, err)
	require.Equal(t, "app", got.Holder)
	require.Equal(t, got.Term, fencing.Published(t, admin, key))
}

// TestLeaderMigrationUpDownUp: 00007 goes down to version 6's schema (no
// leader objects, 00003's view) and up again.
func TestLeaderMigrationUpDownUp(t *testing.T) {
	ctx := context.Background()
	want6 := leaderSchema(t, migrated.UpTo(t, 6))
	db := migrated.UpTo(t, 7)
	want7 := leaderSchema(t, db)
	require.NotEqual(t, want6, want7)
	require.Contains(t, want7, "leader_since")

	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithTableName(pgadvisory.MigrationTable), goose.WithDisableGlobalRegistry(true), goose.WithLogger(goose.NopLogger()))
	require.NoError(t, err)
	_, err = p.DownTo(ctx, 6)
	require.NoError(t, err)
	require.Equal(t, want6, leaderSchema(t, db), "Down restores version 6")
	_, err = p.UpTo(ctx, 7)
	require.NoError(t, err)
	require.Equal(t, want7, leaderSchema(t, db))
}

// leaderSchema describes what 00007 touches: the status view's definition
// and the leader objects that exist.
func leaderSchema(t *testing.T, db *sql.DB) string {
	t.Helper()
	var view, objs string
	require.NoError(t, db.QueryRow(`SELECT pg_get_viewdef('pgadvisory.status'::regclass) || obj_description('pgadvisory.status'::regclass)`).Scan(&view))
	require.NoError(t, db.QueryRow(`SELECT concat_ws(',', to_regclass('pgadvisory.leader'),
		to_regprocedure('pgadvisory.leader_elect(bigint,text,text)'),
		to_regprocedure('pgadvisory.current_leader(bigint)'))`).Scan(&objs))
	return view + "\n" + objs
}

// TestLeaderElectPublishRules: the term is published as a fenced holder's
// token is: it waits at most the publish timeout for a writer still in
// flight with the previous token (55P03, nothing published, the caller
// still holds the lock), and refuses a sequence that went backwards
// (LF004). Control: once the writer ends, the election publishes.
func TestLeaderElectPublishRules(t *testing.T) {
	db := migrated.DB(t)
	ctx := testdb.Context(t) // a publish that never times out fails here, not at go test's timeout
	key := testdb.Key(t)
	old := fencing.Publish(t, db, key)

	writer, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = writer.Rollback() }()
	_, err = writer.ExecContext(ctx, `SELECT pgadvisory.fence_require_current($1, $2, NULL, NULL)`, key, old)
	require.NoError(t, err)

	holder := conn(t, db)
	_, err = holder.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, key)
	require.NoError(t, err)
	var term int64
	err = holder.QueryRowContext(ctx, `SELECT term FROM pgadvisory.leader_elect($1, 'h', '100ms')`, key).Scan(&term)
	sqlstate.Require(t, err, "55P03")
	require.Equal(t, old, fencing.Published(t, db, key))
	var held bool
	require.NoError(t, holder.QueryRowContext(ctx, `SELECT count(*) = 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted`).Scan(&held))
	require.True(t, held, "a failed election leaves the caller's lock as it was")

	require.NoError(t, writer.Rollback())
	require.NoError(t, holder.QueryRowContext(ctx, `SELECT term FROM pgadvisory.leader_elect($1, 'h', '100ms')`, key).Scan(&term))
	require.Greater(t, term, old)

	ahead := fencing.PublishAhead(t, db, key)
	err = holder.QueryRowContext(ctx, `SELECT term FROM pgadvisory.leader_elect($1, 'h', '100ms')`, key).Scan(&term)
	sqlstate.Require(t, err, "LF004")
	require.Equal(t, ahead, fencing.Published(t, db, key))
}

// TestStatusViewLeader: the status view's leader columns make
// current_leader's checks on each row: they name the leader on the row of
// its backend while that backend holds the lock and its term is the
// published token, and on no row once either fails: a backend that started
// after the election (a later backend that reuses the leader's pid: here
// the election's time is moved before the backend's start, as an owner
// can) or a term that is no longer the published token (a later holder's
// publish: here a newer token written as an owner can). Each story has its
// control, the same rows before the change.
func TestStatusViewLeader(t *testing.T) {
	db := migrated.DB(t)
	ctx := testdb.Context(t)
	leader := func(key int64, pid int) (holder sql.NullString, term sql.NullInt64) {
		t.Helper()
		require.NoError(t, db.QueryRowContext(ctx, `SELECT leader_holder, leader_term FROM pgadvisory.status
			WHERE lock_id = $1 AND pid = $2 AND granted AND mode = 'ExclusiveLock'`, key, pid).Scan(&holder, &term))
		return holder, term
	}
	elect := func(key int64) (pid int, term int64) {
		t.Helper()
		c := conn(t, db)
		require.NoError(t, c.QueryRowContext(ctx, `SELECT pg_backend_pid() FROM pg_advisory_lock($1)`, key).Scan(&pid))
		require.NoError(t, c.QueryRowContext(ctx, electSQL, key, "h").Scan(&term))
		holder, got := leader(key, pid)
		require.Equal(t, "h", holder.String, "control: the leader's row names it")
		require.Equal(t, term, got.Int64)
		return pid, term
	}

	t.Run("backend started after the election", func(t *testing.T) {
		key := testdb.Key(t)
		pid, _ := elect(key)
		_, err := db.ExecContext(ctx, `UPDATE pgadvisory.leader SET elected_at = (SELECT backend_start FROM pg_stat_activity WHERE pid = $2) - interval '1 second'
			WHERE lock_id = $1`, key, pid)
		require.NoError(t, err)
		holder, term := leader(key, pid)
		require.False(t, holder.Valid, "a backend that started after the election is not the leader")
		require.False(t, term.Valid)
	})

	t.Run("term no longer published", func(t *testing.T) {
		key := testdb.Key(t)
		pid, term := elect(key)
		fencing.ForcePublished(t, db, key, term+1)
		holder, got := leader(key, pid)
		require.False(t, holder.Valid, "a leader whose term is not the published token is not the leader")
		require.False(t, got.Valid)
	})
}

// TestCurrentLeaderSQL: current_leader names the backend that holds the
// lock and was elected last, with the term of its last election: a second
// election on the same session records the new term (the control: the
// first one's), and a leader that let go of the lock is no longer named
// while another session, which never was elected, holds it.
func TestCurrentLeaderSQL(t *testing.T) {
	db := migrated.DB(t)
	ctx := testdb.Context(t)
	key := testdb.Key(t)
	leader := func() (holder string, term int64, pid int, ok bool) {
		t.Helper()
		err := db.QueryRowContext(ctx, `SELECT holder, term, pid FROM pgadvisory.current_leader($1)`, key).Scan(&holder, &term, &pid)
		if errors.Is(err, sql.ErrNoRows) {
			return "", 0, 0, false
		}
		require.NoError(t, err)
		return holder, term, pid, true
	}
	a := conn(t, db)
	var pidA int
	require.NoError(t, a.QueryRowContext(ctx, `SELECT pg_backend_pid() FROM pg_advisory_lock($1)`, key).Scan(&pidA))
	var first, second int64
	require.NoError(t, a.QueryRowContext(ctx, electSQL, key, "a").Scan(&first))
	holder, term, pid, ok := leader()
	require.True(t, ok)
	require.Equal(t, "a", holder)
	require.Equal(t, first, term, "control: the first election's term")
	require.Equal(t, pidA, pid)

	require.NoError(t, a.QueryRowContext(ctx, electSQL, key, "a again").Scan(&second))
	require.Greater(t, second, first)
	holder, term, _, ok = leader()
	require.True(t, ok, "the re-elected leader is named")
	require.Equal(t, "a again", holder)
	require.Equal(t, second, term)

	// A lets go (its backend lives on); B takes the lock without an election.
	_, err := a.ExecContext(ctx, `SELECT pg_advisory_unlock($1)`, key)
	require.NoError(t, err)
	b := conn(t, db)
	_, err = b.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, key)
	require.NoError(t, err)
	_, _, _, ok = leader()
	require.False(t, ok, "a leader that no longer holds the lock is not named, whoever holds it")
}

// TestLeaderResignCommitsWithoutAFlush: leader_resign's transaction commits
// with synchronous_commit = off when the resignation is its first write, so
// a hand-off waits for one WAL flush (the successor's election) instead of
// two in a row; its term is recorded as resigned and the lock is free.
// Control: a transaction that wrote before the resignation keeps the
// session's synchronous_commit, so none of its earlier writes loses
// durability.
func TestLeaderResignCommitsWithoutAFlush(t *testing.T) {
	db := migrated.DB(t)
	ctx := testdb.Context(t)
	key := testdb.Key(t)
	a := conn(t, db)
	var session string
	require.NoError(t, a.QueryRowContext(ctx, `SHOW synchronous_commit`).Scan(&session))
	require.NotEqual(t, "off", session, "the test needs a session that waits for flushes")
	resign := func(writeFirst bool) (setting string) {
		t.Helper()
		_, err := a.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, key)
		require.NoError(t, err)
		var term int64
		require.NoError(t, a.QueryRowContext(ctx, electSQL, key, "a").Scan(&term))
		tx, err := a.BeginTx(ctx, nil)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }()
		if writeFirst {
			_, err = tx.ExecContext(ctx, `CREATE TEMP TABLE written_before_resign (x int) ON COMMIT DROP`)
			require.NoError(t, err)
		}
		var released int
		require.NoError(t, tx.QueryRowContext(ctx, `SELECT pgadvisory.leader_resign($1, $2)`, key, term).Scan(&released))
		require.Equal(t, 1, released, "the lock was held")
		require.NoError(t, tx.QueryRowContext(ctx, `SHOW synchronous_commit`).Scan(&setting))
		require.NoError(t, tx.Commit())
		require.Equal(t, term, resignedTerm(t, db, key), "the resignation is recorded")
		var held int
		require.NoError(t, a.QueryRowContext(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`).Scan(&held))
		require.Zero(t, held, "the lock is released")
		var after string
		require.NoError(t, a.QueryRowContext(ctx, `SHOW synchronous_commit`).Scan(&after))
		require.Equal(t, session, after, "the setting was the transaction's only")
		return setting
	}
	require.Equal(t, "off", resign(false), "a resignation alone in its transaction does not wait for a flush")
	require.Equal(t, session, resign(true), "control: a transaction that wrote before keeps the session's setting")
}

// TestLeaderElectOverAListedLock: a lock whose table is listed as fenced
// has a fence row before it ever published (token NULL, the copy of its
// listing): a leader's first election publishes its term there, and the
// table then accepts writes with that term and no other token.
func TestLeaderElectOverAListedLock(t *testing.T) {
	db := migrated.DB(t)
	ctx := testdb.Context(t)
	key := testdb.Key(t)
	table := fencing.Table(t, db, testdb.Schema(t), "accounts", key, "strict")
	require.Zero(t, fencing.Published(t, db, key), "listed, never published")

	holder := conn(t, db)
	_, err := holder.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, key)
	require.NoError(t, err)
	var term int64
	require.NoError(t, holder.QueryRowContext(ctx, electSQL, key, "h").Scan(&term))
	require.Equal(t, term, fencing.Published(t, db, key))
	require.NoError(t, fencing.Write(db, term, `INSERT INTO `+table+` (id, balance) VALUES (1, 0)`))
	sqlstate.Require(t, fencing.Write(db, fencing.NextToken(t, db), `INSERT INTO `+table+` (id, balance) VALUES (2, 0)`), "LF001")
}

// resignedTerm is the newest resigned term of key in
// pgadvisory.leader_resigned, 0 when none is recorded.
func resignedTerm(t *testing.T, db *sql.DB, key int64) int64 {
	t.Helper()
	var term int64
	err := db.QueryRowContext(testdb.Context(t), `SELECT term FROM pgadvisory.leader_resigned WHERE lock_id = $1`, key).Scan(&term)
	if errors.Is(err, sql.ErrNoRows) {
		return 0
	}
	require.NoError(t, err)
	return term
}

// currentLeaderTerm is the term current_leader names for key, 0 for none.
func currentLeaderTerm(t *testing.T, db *sql.DB, key int64) int64 {
	t.Helper()
	var term int64
	err := db.QueryRowContext(testdb.Context(t), `SELECT term FROM pgadvisory.current_leader($1)`, key).Scan(&term)
	if errors.Is(err, sql.ErrNoRows) {
		return 0
	}
	require.NoError(t, err)
	return term
}

// TestLeaderResignWaitsForNoRowLock: leader_resign releases the lock and
// records the resignation without writing the leader row, so a hand-off
// waits for neither: while another transaction holds the leader row (as a
// successor's election does from its write to its commit), the
// resignation ends at once and a waiting candidate is granted the lock.
// current_leader then names nobody. Controls: the candidate is not granted
// while the leader leads, and another session's leader_resign with the
// leader's term records nothing (a caller resigns only its own leadership).
func TestLeaderResignWaitsForNoRowLock(t *testing.T) {
	db := migrated.DB(t)
	ctx := testdb.Context(t)
	key := testdb.Key(t)
	leader, candidate, other := conn(t, db), conn(t, db), conn(t, db)
	_, err := leader.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, key)
	require.NoError(t, err)
	var term int64
	require.NoError(t, leader.QueryRowContext(ctx, electSQL, key, "leader").Scan(&term))
	require.Equal(t, term, currentLeaderTerm(t, db, key), "control: the leader is named")

	var released int
	require.NoError(t, other.QueryRowContext(ctx, `SELECT pgadvisory.leader_resign($1, $2)`, key, term).Scan(&released))
	require.Zero(t, released, "another session holds no lock to release")
	require.Zero(t, resignedTerm(t, db, key), "control: another session cannot resign the leader")
	require.Equal(t, term, currentLeaderTerm(t, db, key), "control: the leader is still named")

	granted := make(chan error, 1)
	go func() {
		_, err := candidate.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, key)
		granted <- err
	}()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM pg_catalog.pg_locks WHERE locktype = 'advisory'
  AND objsubid = 1 AND NOT granted AND ((classid::bigint << 32) | objid::bigint) = $1`, key).Scan(&n))
		return n == 1
	}, 30*time.Second, 5*time.Millisecond, "the candidate waits")
	select {
	case err := <-granted:
		t.Fatalf("control: the candidate was granted while the leader leads (%v)", err)
	case <-time.After(100 * time.Millisecond):
	}

	blocker, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = blocker.Rollback() }()
	_, err = blocker.ExecContext(ctx, `SELECT 1 FROM pgadvisory.leader WHERE lock_id = $1 FOR UPDATE`, key)
	require.NoError(t, err)
	resigned := make(chan error, 1)
	go func() {
		var released int
		err := leader.QueryRowContext(ctx, `SELECT pgadvisory.leader_resign($1, $2)`, key, term).Scan(&released)
		if err == nil && released != 1 {
			err = fmt.Errorf("leader_resign released %d locks, want 1", released)
		}
		resigned <- err
	}()
	for name, ch := range map[string]chan error{"the resignation": resigned, "the candidate's lock": granted} {
		select {
		case err := <-ch:
			require.NoError(t, err, name)
		case <-time.After(20 * time.Second):
			t.Fatalf("%s waited while another transaction held the leader row", name)
		}
	}
	require.NoError(t, blocker.Rollback())
	require.Equal(t, term, resignedTerm(t, db, key), "the resignation is recorded")
	require.Zero(t, currentLeaderTerm(t, db, key), "the resigned leader is not named")
}

// TestLeaderResignKeepsTheNewestTerm: the resigned term recorded for a lock
// only grows. A resignation whose write comes after a newer leader's
// resignation was recorded (its backend held back between its unlock and
// its write) leaves the newer term, so that newer leader's row stays
// resigned. Control: a resignation of a newer term than the recorded one
// records it.
func TestLeaderResignKeepsTheNewestTerm(t *testing.T) {
	db := migrated.DB(t)
	ctx := testdb.Context(t)
	key := testdb.Key(t)
	a := conn(t, db)
	lead := func() (term int64) {
		t.Helper()
		_, err := a.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, key)
		require.NoError(t, err)
		require.NoError(t, a.QueryRowContext(ctx, electSQL, key, "a").Scan(&term))
		return term
	}
	resign := func(term int64) {
		t.Helper()
		var released int
		require.NoError(t, a.QueryRowContext(ctx, `SELECT pgadvisory.leader_resign($1, $2)`, key, term).Scan(&released))
		require.Equal(t, 1, released)
	}
	first := lead()
	resign(first)
	require.Equal(t, first, resignedTerm(t, db, key), "control: a first resignation is recorded")
	second := lead()
	resign(second)
	require.Equal(t, second, resignedTerm(t, db, key), "control: a newer term is recorded")

	older := lead()
	newer := older + 1000
	_, err := db.ExecContext(ctx, `UPDATE pgadvisory.leader_resigned SET term = $2 WHERE lock_id = $1`, key, newer)
	require.NoError(t, err)
	resign(older)
	require.Equal(t, newer, resignedTerm(t, db, key), "an older resignation does not overwrite a newer one")
}
