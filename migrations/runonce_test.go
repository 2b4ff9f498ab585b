package migrations_test

import (
	"testing"

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
