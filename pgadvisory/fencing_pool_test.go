package pgadvisory_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// fpDoor is a front door on a pool of a given size, with a way to check a
// connection out of that pool (and put it back) from the test.
type fpDoor struct {
	name     string
	run      func(ctx context.Context, key int64, ran *bool, opts ...pgadvisory.Option) error
	checkout func(t *testing.T) (release func())
	inUse    func() int
}

func fpDoors(t *testing.T, conns int) []fpDoor {
	t.Helper()
	db := fenOpenDB(t, nil, conns)
	pool := fenOpenPool(t, nil, int32(conns))
	return []fpDoor{
		{
			name: "stdlib",
			run: func(ctx context.Context, key int64, ran *bool, opts ...pgadvisory.Option) error {
				return pgadvisory.RunExclusive(ctx, db, key, func(*sql.Tx) error { *ran = true; return nil }, opts...)
			},
			checkout: func(t *testing.T) func() {
				c, err := db.Conn(context.Background())
				require.NoError(t, err)
				return func() { _ = c.Close() }
			},
			inUse: func() int { return db.Stats().InUse },
		},
		{
			name: "pgx",
			run: func(ctx context.Context, key int64, ran *bool, opts ...pgadvisory.Option) error {
				return pgadvisory.RunExclusivePgx(ctx, pool, key, func(pgx.Tx) error { *ran = true; return nil }, opts...)
			},
			checkout: func(t *testing.T) func() {
				c, err := pool.Acquire(context.Background())
				require.NoError(t, err)
				return c.Release
			},
			inUse: func() int { return int(pool.Stat().AcquiredConns()) },
		},
	}
}

// TestFencingPoolOfOne: a fenced call publishes on a second connection, so
// on a pool that allows one connection it is refused at once with
// ErrInvalidArgument, before any lock or token; the same pool runs unfenced
// calls (control: the pool itself is fine).
func TestFencingPoolOfOne(t *testing.T) {
	admin := fenMigrate(t)
	for _, door := range fpDoors(t, 1) {
		t.Run(door.name, func(t *testing.T) {
			ctx := fenCtx(t)
			key := testdb.Key(t)
			seq := fenSeqLast(t, admin)
			var ran bool
			err := door.run(ctx, key, &ran, pgadvisory.WithFencing())
			require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument)
			require.ErrorContains(t, err, "allow at least 2")
			require.False(t, ran, "fn must not run")
			require.Equal(t, seq, fenSeqLast(t, admin), "no token was drawn")
			require.Zero(t, fenPublished(t, admin, key), "nothing was published")

			require.NoError(t, door.run(ctx, key, &ran), "control: an unfenced call on the same pool")
			require.True(t, ran)
		})
	}
}

// TestFencingPoolExhausted: a fenced holder whose publish finds no free
// connection fails when its context ends instead of hanging: the error
// wraps context.DeadlineExceeded and says "publish", fn did not run, the
// lock is released and no connection leaks. Once a connection is free again
// the same call succeeds (control: exhaustion was the only cause).
func TestFencingPoolExhausted(t *testing.T) {
	admin := fenMigrate(t)
	for _, door := range fpDoors(t, 2) {
		t.Run(door.name, func(t *testing.T) {
			key := testdb.Key(t)
			release := door.checkout(t)
			ctx, cancel := context.WithTimeout(fenCtx(t), 500*time.Millisecond)
			defer cancel()
			var ran bool
			err := door.run(ctx, key, &ran, pgadvisory.WithFencing())
			release()
			require.ErrorIs(t, err, context.DeadlineExceeded)
			var pe *pgadvisory.Error
			require.ErrorAs(t, err, &pe)
			require.Equal(t, "publish", pe.Op)
			require.False(t, ran, "fn must not run")
			require.Zero(t, fenPublished(t, admin, key), "nothing was published")
			require.Eventually(t, func() bool { return door.inUse() == 0 }, 30*time.Second, 10*time.Millisecond, "no connection leaks")

			require.NoError(t, door.run(fenCtx(t), key, &ran, pgadvisory.WithFencing()), "control: with a free connection the same call succeeds")
			require.True(t, ran)
			require.NotZero(t, fenPublished(t, admin, key))
		})
	}
}
