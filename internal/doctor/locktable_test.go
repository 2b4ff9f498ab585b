package doctor_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/doctor"
	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
	"github.com/lockgen/lockgen/keyspace"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestLockTable: a cluster with a tiny lock table, 10 × (20 + 0) = 200
// slots; another session holds more and more advisory locks.
func TestLockTable(t *testing.T) {
	c := pgcluster.Start(t, pgcluster.WithSetting("max_locks_per_transaction", "10"), pgcluster.WithSetting("max_connections", "20"))
	ctx := context.Background()
	holder, err := pgx.Connect(ctx, c.URL())
	require.NoError(t, err)
	defer holder.Close(ctx)
	hold := func(n int) {
		t.Helper()
		_, err := holder.Exec(ctx, `SELECT pg_advisory_unlock_all()`)
		require.NoError(t, err)
		_, err = holder.Exec(ctx, `SELECT count(pg_advisory_lock(g)) FROM generate_series(1, $1::int) AS g`, n)
		require.NoError(t, err)
	}

	requireStatus(t, run(t, c.URL(), doctor.LockTable), doctor.Pass, "= 10 × (20 + 0) = 200 lock slots")
	hold(110)
	requireStatus(t, run(t, c.URL(), doctor.LockTable), doctor.Warn, "110 of them advisory", "the session holding most is pid")
	hold(185)
	requireStatus(t, run(t, c.URL(), doctor.LockTable), doctor.Fail, "185 of them advisory", "SQLSTATE 53200 (ErrLockTableFull)")
	hold(0)

	// Declarations: one slot per call; more plain locks than free slots warns.
	var many []pgadvisory.Declared
	for i := range 201 {
		name := fmt.Sprintf("bulk.lock_%d", i)
		many = append(many, pgadvisory.Declared{Name: name, ID: keyspace.ID(name)})
	}
	requireStatus(t, run(t, c.URL(), doctor.LockTable, doctor.Config{Declared: many, Source: "locks.yaml"}), doctor.Warn,
		"locks.yaml declares 201 lock(s) (201 plain, 0 parameterized)", "the widest declared set is 1 lock")
	requireStatus(t, run(t, c.URL(), doctor.LockTable, doctor.Config{Declared: many[:3], Source: "locks.yaml"}), doctor.Pass,
		"3 slots if every plain lock were held at once")
}
