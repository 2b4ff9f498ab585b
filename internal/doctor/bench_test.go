package doctor_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/doctor"
	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
)

// heldLocks is how many advisory locks another session holds while doctor
// runs: a full run is meant to stay under 2 s with 10,000 held.
const heldLocks = 10_000

// BenchmarkDoctor runs every check on a local throwaway cluster while
// another session holds heldLocks advisory locks, beside its baseline in
// the same run: one bare read of pg_locks, the view the lock_table check
// reads. The ratio says what doctor adds to reading the lock table once.
func BenchmarkDoctor(b *testing.B) {
	c := pgcluster.Start(b, pgcluster.WithSetting("max_locks_per_transaction", "1024")) // 20 × 1024 slots
	ctx := context.Background()
	holder, err := pgx.Connect(ctx, c.URL())
	require.NoError(b, err)
	defer holder.Close(ctx)
	_, err = holder.Exec(ctx, `SELECT count(pg_advisory_lock(g)) FROM generate_series(1, $1::int) AS g`, heldLocks)
	require.NoError(b, err)
	db := open(b, c.URL())
	var n int
	require.NoError(b, db.QueryRow(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'`).Scan(&n))
	require.GreaterOrEqual(b, n, heldLocks)

	b.Run("doctor", func(b *testing.B) {
		for b.Loop() {
			r, err := doctor.Run(ctx, doctor.Config{DB: db})
			if err != nil {
				b.Fatal(err)
			}
			if len(r.Checks) != len(doctor.Names) {
				b.Fatalf("%d checks", len(r.Checks))
			}
		}
	})
	b.Run("baseline_pg_locks_count", func(b *testing.B) {
		for b.Loop() {
			var n int
			if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_catalog.pg_locks`).Scan(&n); err != nil {
				b.Fatal(err)
			}
		}
	})
}
