package migrations_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// Publishing a token against writes in flight (00002_fencing.sql): writers
// of the current token do not block each other, the next publish waits for
// them and is ordered after them, and the sequence never re-issues a token.
// The helpers are in fence_trigger_test.go.

// TestFenceSameTokenWritersDoNotBlock: two transactions with the same token
// write at once. The second runs and commits while the first is still open;
// had it waited for the first, its lock_timeout would have failed it.
func TestFenceSameTokenWritersDoNotBlock(t *testing.T) {
	ctx := context.Background()
	db := migrated.DB(t)
	lock := testdb.Key(t)
	table := fencing.GuardedTable(t, db, testdb.Schema(t), "account", lock, "strict")
	tok := fencing.NextToken(t, db)
	require.True(t, fencing.Publish(t, db, lock, tok))

	first, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer first.Rollback()
	_, err = first.Exec(`SELECT set_config('pgadvisory.fencing_token', $1, true)`, fmt.Sprint(tok))
	require.NoError(t, err)
	_, err = first.Exec(`INSERT INTO ` + table + ` (id, balance) VALUES (1, 100)`)
	require.NoError(t, err)

	require.NoError(t, fencing.Write(db, tok, `SET LOCAL lock_timeout = '10s'`,
		`INSERT INTO `+table+` (id, balance) VALUES (2, 200)`,
		`UPDATE `+table+` SET balance = 201 WHERE id = 2`))
	require.NoError(t, first.Commit())
	require.Equal(t, []int64{1, 2}, queryInts(t, db, `SELECT id FROM `+table+` ORDER BY id`))
}

// TestFencePublishWaitsForInFlightWrites: the next holder's publish waits
// while a write with the current token is open, and succeeds after it ends;
// from then on that token is refused.
func TestFencePublishWaitsForInFlightWrites(t *testing.T) {
	ctx := context.Background()
	db := migrated.DB(t)
	lock := testdb.Key(t)
	table := fencing.GuardedTable(t, db, testdb.Schema(t), "account", lock, "strict")
	t2 := fencing.NextToken(t, db)
	require.True(t, fencing.Publish(t, db, lock, t2))

	writer, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer writer.Rollback()
	_, err = writer.Exec(`SELECT set_config('pgadvisory.fencing_token', $1, true)`, fmt.Sprint(t2))
	require.NoError(t, err)
	_, err = writer.Exec(`INSERT INTO ` + table + ` (id, balance) VALUES (1, 100)`)
	require.NoError(t, err)

	t3 := fencing.NextToken(t, db)
	publishWithTimeout := func() error {
		return fencing.Write(db, 0, `SET LOCAL lock_timeout = '200ms'`,
			fmt.Sprintf(`INSERT INTO pgadvisory.fence AS f (lock_id, token) VALUES (%d, %d)
			ON CONFLICT (lock_id) DO UPDATE SET token = excluded.token WHERE f.token < excluded.token`, lock, t3))
	}
	sqlstate.Require(t, publishWithTimeout(), codeLockTimeout)

	// The writer commits with T2, still current.
	_, err = writer.Exec(`UPDATE ` + table + ` SET balance = 101 WHERE id = 1`)
	require.NoError(t, err)
	require.NoError(t, writer.Commit())

	require.NoError(t, publishWithTimeout())
	require.Equal(t, []int64{t3}, queryInts(t, db, `SELECT token FROM pgadvisory.fence WHERE lock_id = $1`, lock))
	sqlstate.Require(t, fencing.Write(db, t2, `UPDATE `+table+` SET balance = 0 WHERE id = 1`), codeStale)
	require.NoError(t, fencing.Write(db, t3, `UPDATE `+table+` SET balance = 102 WHERE id = 1`))
}

// TestFencePublishOrderedAfterWriter: a publish without a timeout blocks on
// the open writer and completes once it commits (the same as above, without
// relying on the timeout).
func TestFencePublishOrderedAfterWriter(t *testing.T) {
	ctx := context.Background()
	db := migrated.DB(t)
	lock := testdb.Key(t)
	table := fencing.GuardedTable(t, db, testdb.Schema(t), "account", lock, "strict")
	t2 := fencing.NextToken(t, db)
	require.True(t, fencing.Publish(t, db, lock, t2))

	writer, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer writer.Rollback()
	_, err = writer.Exec(`SELECT set_config('pgadvisory.fencing_token', $1, true)`, fmt.Sprint(t2))
	require.NoError(t, err)
	_, err = writer.Exec(`INSERT INTO ` + table + ` (id, balance) VALUES (1, 100)`)
	require.NoError(t, err)

	pubConn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer pubConn.Close()
	var pubPID int
	require.NoError(t, pubConn.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pubPID))
	t3 := fencing.NextToken(t, db)
	done := make(chan error, 1)
	go func() {
		_, err := pubConn.ExecContext(ctx, fencing.PublishSQL, lock, t3)
		done <- err
	}()
	// The publish waits on a lock held by the writer.
	require.Eventually(t, func() bool {
		var waiting bool
		err := db.QueryRow(`SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`, pubPID).Scan(&waiting)
		return err == nil && waiting
	}, 30*time.Second, 20*time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("publish finished while the writer was open: %v", err)
	default:
	}
	require.NoError(t, writer.Commit())
	require.NoError(t, <-done)
	require.Equal(t, []int64{t3}, queryInts(t, db, `SELECT token FROM pgadvisory.fence WHERE lock_id = $1`, lock))
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
