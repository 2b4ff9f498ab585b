package migrations_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// Publishing a token against writes in flight (00005_fencing_acquire.sql,
// pgadvisory.fence_acquire): writers of the current token do not block each
// other, the next publish waits for them and is ordered after them (or
// gives up after its publish timeout, leaving no lock behind), and the
// sequence never re-issues a token. The helpers are in fence_trigger_test.go.

// TestFenceSameTokenWritersDoNotBlock: two transactions with the same token
// write at once. The second runs and commits while the first is still open;
// had it waited for the first, its lock_timeout would have failed it.
func TestFenceSameTokenWritersDoNotBlock(t *testing.T) {
	db := migrated.DB(t)
	lock := testdb.Key(t)
	table := fencing.Table(t, db, testdb.Schema(t), "account", lock, "strict")
	tok := fencing.Publish(t, db, lock)

	first := openWriter(t, db, tok, `INSERT INTO `+table+` (id, balance) VALUES (1, 100)`)
	require.NoError(t, fencing.Write(db, tok, `SET LOCAL lock_timeout = '10s'`,
		`INSERT INTO `+table+` (id, balance) VALUES (2, 200)`,
		`UPDATE `+table+` SET balance = 201 WHERE id = 2`))
	require.NoError(t, first.tx.Commit())
	require.Equal(t, []int64{1, 2}, queryInts(t, db, `SELECT id FROM `+table+` ORDER BY id`))
}

// TestFencePublishTimesOutForInFlightWrites: while a write with the current
// token is open, the next holder's publish (fence_acquire with a publish
// timeout of 200ms) fails with 55P03 and says why, and leaves no advisory
// lock on its session; once the writer ends, the publish succeeds, and from
// then on the old token is refused.
func TestFencePublishTimesOutForInFlightWrites(t *testing.T) {
	// A publish that waits without its timeout fails here, well before go
	// test's own timeout would end the whole package without naming it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := migrated.DB(t)
	lock := testdb.Key(t)
	table := fencing.Table(t, db, testdb.Schema(t), "account", lock, "strict")
	t2 := fencing.Publish(t, db, lock)
	writer := openWriter(t, db, t2, `INSERT INTO `+table+` (id, balance) VALUES (1, 100)`)

	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, nil)
	require.NoError(t, err)
	var granted bool
	err = tx.QueryRowContext(ctx, `SELECT granted FROM pgadvisory.fence_acquire(ARRAY[$1]::bigint[], false, NULL, '200ms')`, lock).Scan(&granted)
	e := sqlstate.Require(t, err, codeLockTimeout)
	require.Contains(t, e.Message, "pgadvisory: publishing fencing token")
	require.Contains(t, e.Message, "waited 200ms for writes still in flight with the previous token")
	require.NoError(t, tx.Rollback())
	var held int
	require.NoError(t, conn.QueryRowContext(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`).Scan(&held))
	require.Zero(t, held, "the failed acquisition released its session lock")
	require.Equal(t, t2, fencing.Published(t, db, lock))

	// The writer commits with T2, still current.
	_, err = writer.tx.Exec(`UPDATE ` + table + ` SET balance = 101 WHERE id = 1`)
	require.NoError(t, err)
	require.NoError(t, writer.tx.Commit())

	t3 := fencing.Publish(t, db, lock)
	require.Greater(t, t3, t2)
	sqlstate.Require(t, fencing.Write(db, t2, `UPDATE `+table+` SET balance = 0 WHERE id = 1`), codeStale)
	require.NoError(t, fencing.Write(db, t3, `UPDATE `+table+` SET balance = 102 WHERE id = 1`))
}

// TestFencePublishOrderedAfterWriter: a holder's publish blocks on the open
// writer and completes once it commits.
func TestFencePublishOrderedAfterWriter(t *testing.T) {
	db := migrated.DB(t)
	lock := testdb.Key(t)
	table := fencing.Table(t, db, testdb.Schema(t), "account", lock, "strict")
	t2 := fencing.Publish(t, db, lock)
	writer := openWriter(t, db, t2, `INSERT INTO `+table+` (id, balance) VALUES (1, 100)`)

	done := make(chan int64, 1)
	go func() { done <- fencing.Publish(t, db, lock) }()
	// The publish waits on a lock held by the writer.
	require.Eventually(t, func() bool {
		var n int
		err := db.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid)) AND query LIKE '%fence_acquire%'`, writer.pid).Scan(&n)
		return err == nil && n == 1
	}, 30*time.Second, 20*time.Millisecond)
	select {
	case tok := <-done:
		t.Fatalf("publish of %d finished while the writer was open", tok)
	default:
	}
	require.NoError(t, writer.tx.Commit())
	t3 := frontdoor.Await(t, done, "the publish after the writer's commit")
	require.Greater(t, t3, t2)
	require.Equal(t, t3, fencing.Published(t, db, lock))
}

func TestFenceSequenceNeverReissues(t *testing.T) {
	ctx := context.Background()
	db := migrated.DB(t)
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	var aborted int64
	require.NoError(t, tx.QueryRow(`SELECT nextval('pgadvisory.fencing_token_seq')`).Scan(&aborted))
	require.NoError(t, tx.Rollback())
	require.Greater(t, fencing.NextToken(t, db), aborted)
}

// writer is an open transaction that carries a token and has written.
type writer struct {
	tx  *sql.Tx
	pid int64
}

// openWriter begins a transaction carrying token, runs stmt in it and
// leaves it open (rolled back when t ends unless committed).
func openWriter(t *testing.T, db *sql.DB, token int64, stmt string) writer {
	t.Helper()
	tx, err := db.BeginTx(context.Background(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() })
	var w writer
	require.NoError(t, tx.QueryRow(`SELECT pg_backend_pid(), set_config('pgadvisory.fencing_token', $1, true) IS NOT NULL`, fmt.Sprint(token)).Scan(&w.pid, new(bool)))
	_, err = tx.Exec(stmt)
	require.NoError(t, err)
	w.tx = tx
	return w
}

// TestFenceAcquireSetNotGrantedTakesNothing: fence_acquire over a set whose
// higher key another session holds (try, not wait) returns granted = false
// and leaves this session holding none of the set: the lower key, which it
// took first at session level (a lock that outlives the transaction), is
// released. The control: with the higher key free, both are granted and
// held by the session.
func TestFenceAcquireSetNotGrantedTakesNothing(t *testing.T) {
	ctx := testdb.Context(t)
	db := migrated.DB(t)
	low, high := testdb.Key(t), testdb.Key(t)
	if low > high {
		low, high = high, low
	}
	other := conn(t, db)
	_, err := other.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, high)
	require.NoError(t, err)

	c := conn(t, db)
	acquire := func() (granted bool, held int) {
		t.Helper()
		tx, err := c.BeginTx(ctx, nil)
		require.NoError(t, err)
		require.NoError(t, tx.QueryRowContext(ctx, `SELECT granted FROM pgadvisory.fence_acquire(ARRAY[$1, $2]::bigint[], false, NULL, '5s')`, low, high).Scan(&granted))
		require.NoError(t, tx.Rollback())
		require.NoError(t, c.QueryRowContext(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid()`).Scan(&held))
		return granted, held
	}
	granted, held := acquire()
	require.False(t, granted)
	require.Zero(t, held, "the session holds none of the set")

	// CONTROL: the higher key free, the set is granted and held.
	_, err = other.ExecContext(ctx, `SELECT pg_advisory_unlock($1)`, high)
	require.NoError(t, err)
	granted, held = acquire()
	require.True(t, granted)
	require.Equal(t, 2, held)
	_, err = c.ExecContext(ctx, `SELECT pg_advisory_unlock_all()`)
	require.NoError(t, err)
}
