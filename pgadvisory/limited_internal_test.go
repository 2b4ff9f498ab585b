package pgadvisory

import (
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/keyspace"
)

// TestSlotStatementRereadsAChangedLimit: the slot statement reads the
// lock's limit with its own snapshot, which may predate a change of the
// limit committed before the slot was granted; then the row version it
// sees has a nonzero xmax, and it must ask pgadvisory.slot_registered for
// the limit as it is now. A REPEATABLE READ transaction whose snapshot
// predates a change (3 to 2) stands for that statement: the slot statement
// calls slot_registered once (pg_stat_xact_user_functions). Control: a
// transaction that began after the change sees the newest version (xmax 0)
// and calls no function.
func TestSlotStatementRereadsAChangedLimit(t *testing.T) {
	ctx := testdb.Context(t)
	db := stdlib.OpenDBFromPool(testdb.Pool(t))
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, Migrate(ctx, db))
	var super bool
	require.NoError(t, db.QueryRowContext(ctx, `SELECT current_setting('is_superuser') = 'on'`).Scan(&super))
	if !super {
		t.Skip("track_functions needs a superuser")
	}
	id := testdb.Key(t)
	var reg int32
	require.NoError(t, db.QueryRowContext(ctx, `SELECT pgadvisory.slot_register($1, 3)`, id).Scan(&reg))
	require.EqualValues(t, 3, reg)

	// slot runs the slot statement with n in tx, then reports its slot,
	// the limit it read and how often it called slot_registered.
	slot := func(tx *sql.Tx, n int32) (int32, int32, int64) {
		t.Helper()
		// The counts may include calls of earlier transactions of the
		// backend not yet reported: the difference is this statement's.
		calls := func() int64 {
			var c int64
			require.NoError(t, tx.QueryRowContext(ctx, `SELECT COALESCE(sum(calls), 0)::int8 FROM pg_stat_xact_user_functions
				WHERE schemaname = 'pgadvisory' AND funcname = 'slot_registered'`).Scan(&c))
			return c
		}
		before := calls()
		var granted, standby bool
		var s, r sql.NullInt32
		require.NoError(t, tx.QueryRowContext(ctx, slotSQL, id, n, int32(0), keyspace.SlotID(id, 0)).
			Scan(&granted, &standby, &s, &r))
		require.True(t, s.Valid, "slot 0 is free")
		return s.Int32, r.Int32, calls() - before
	}
	begin := func() *sql.Tx {
		t.Helper()
		tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback() })
		_, err = tx.ExecContext(ctx, `SET LOCAL track_functions = 'pl'`)
		require.NoError(t, err)
		var n int
		require.NoError(t, tx.QueryRowContext(ctx, `SELECT count(*) FROM pgadvisory.slot_limit`).Scan(&n)) // the snapshot
		return tx
	}

	stale := begin()
	require.NoError(t, db.QueryRowContext(ctx, `SELECT pgadvisory.slot_register($1, 2)`, id).Scan(&reg))
	require.EqualValues(t, 2, reg, "no slot held: the limit changes")
	s, _, calls := slot(stale, 3)
	require.EqualValues(t, 0, s)
	require.EqualValues(t, 1, calls, "a version with xmax set: the limit is read again")
	require.NoError(t, stale.Rollback())

	fresh := begin()
	_, r, calls := slot(fresh, 2)
	require.EqualValues(t, 2, r)
	require.Zero(t, calls, "the newest version: no function called")
}
