package migrations_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// The run-once ledger's table (00002_fencing.sql): one row per lock and
// window, enforced by its primary key.

func TestRunOnceLedgerPrimaryKey(t *testing.T) {
	db := migrated.DB(t)
	lock := testdb.Key(t)
	ins := `INSERT INTO pgadvisory.run_once (lock_id, window_key, token, holder, started_at, finished_at)
		VALUES ($1, $2, NULL, 'host-a', now(), clock_timestamp())`
	_, err := db.Exec(ins, lock, "2026-01-02")
	require.NoError(t, err)
	_, err = db.Exec(ins, lock, "2026-01-03")
	require.NoError(t, err)
	sqlstate.Require(t, func() error { _, err := db.Exec(ins, lock, "2026-01-02"); return err }(), "23505")
}

// TestRunOnceFinishedAtCommit: the deferred trigger run_once_finish sets
// finished_at when the row's transaction commits, for any writer. Inside
// the transaction the row still has the value it was inserted with (the
// control: the trigger runs at COMMIT, not at INSERT).
func TestRunOnceFinishedAtCommit(t *testing.T) {
	db := migrated.DB(t)
	lock := testdb.Key(t)
	tx, err := db.Begin()
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = tx.Exec(`INSERT INTO pgadvisory.run_once (lock_id, window_key, token, holder, started_at, finished_at)
		VALUES ($1, 'w', NULL, 'by hand', '2000-01-01', '2000-01-01')`, lock)
	require.NoError(t, err)
	var before time.Time
	require.NoError(t, tx.QueryRow(`SELECT finished_at FROM pgadvisory.run_once WHERE lock_id = $1`, lock).Scan(&before))
	require.Equal(t, 2000, before.Year(), "unchanged until COMMIT")
	var commitAfter time.Time
	require.NoError(t, tx.QueryRow(`SELECT clock_timestamp()`).Scan(&commitAfter))
	require.NoError(t, tx.Commit())

	var started, finished time.Time
	require.NoError(t, db.QueryRow(`SELECT started_at, finished_at FROM pgadvisory.run_once WHERE lock_id = $1`, lock).Scan(&started, &finished))
	require.Equal(t, 2000, started.Year(), "started_at is the writer's")
	require.False(t, finished.Before(commitAfter), "finished_at is the commit's time: %v < %v", finished, commitAfter)
}
