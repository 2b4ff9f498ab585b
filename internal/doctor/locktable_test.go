package doctor_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/doctor"
	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
	"github.com/lockgen/lockgen/keyspace"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestLockTable: a cluster with a small lock table: max_locks_per_transaction
// = 10, max_connections = 20, and the defaults autovacuum_max_workers = 3,
// max_worker_processes = 8, max_wal_senders = 10, max_prepared_transactions
// = 0: 10 × (20 + 3 + 1 + 8 + 10 + 0) = 420 slots. Counting
// max_connections alone gives 200, and failed at 185 held while the server
// had room for far more. Another session holds more and more advisory
// locks.
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

	requireStatus(t, run(t, c.URL(), doctor.LockTable), doctor.Pass, "= 10 × (20 + 3 + 1 + 8 + 10 + 0) = 420 lock slots")
	hold(185) // 92% of the 200 slots max_connections alone gives
	requireStatus(t, run(t, c.URL(), doctor.LockTable), doctor.Pass, "185 of them advisory")
	hold(230)
	requireStatus(t, run(t, c.URL(), doctor.LockTable), doctor.Warn, "230 of them advisory", "the session holding most is pid")
	hold(385)
	requireStatus(t, run(t, c.URL(), doctor.LockTable), doctor.Fail, "385 of them advisory", "SQLSTATE 53200 (ErrLockTableFull)")

	// The capacity doctor reports is a floor: one session gets at least that
	// many locks before the server refuses with 53200.
	_, err = holder.Exec(ctx, `SELECT pg_advisory_unlock_all()`)
	require.NoError(t, err)
	most := 0
	for ; most < 100_000; most++ {
		if _, err = holder.Exec(ctx, `SELECT pg_advisory_lock($1::bigint)`, int64(most)); err != nil {
			break
		}
	}
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "53200", pgErr.Code)
	t.Logf("one session took %d advisory locks before 53200; doctor's capacity is 420", most)
	require.GreaterOrEqual(t, most, 420)
	_, err = holder.Exec(ctx, `SELECT pg_advisory_unlock_all()`)
	require.NoError(t, err)

	// Declarations: one slot per call; more plain locks than free slots warns.
	var many []pgadvisory.Declared
	for i := range 421 {
		name := fmt.Sprintf("bulk.lock_%d", i)
		many = append(many, pgadvisory.Declared{Name: name, ID: keyspace.ID(name)})
	}
	requireStatus(t, run(t, c.URL(), doctor.LockTable, doctor.Config{Declared: many, Source: "locks.yaml"}), doctor.Warn,
		"locks.yaml declares 421 lock(s) (421 plain, 0 parameterized)", "the widest declared set is 1 lock")
	requireStatus(t, run(t, c.URL(), doctor.LockTable, doctor.Config{Declared: many[:3], Source: "locks.yaml"}), doctor.Pass,
		"3 slots if every plain lock were held at once")
}
