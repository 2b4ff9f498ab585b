package migrations_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

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
	_, err = p.Up(ctx)
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
