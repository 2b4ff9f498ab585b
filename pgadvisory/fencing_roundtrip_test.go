package pgadvisory_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/wirecount"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Round trips of a fenced call, counted on the wire as in roundtrip_test.go
// (whose handles and helpers these tests use): the same as an unfenced
// call's, two for RunExclusivePgx and three for RunExclusive, on a handle of
// one connection; a contended fenced call returns ErrLocked after one (pgx)
// or two (database/sql), like an unfenced one. Each measured call really
// published a token (the sequence advanced and the fence row changed).

func TestFencingRoundTripsPgx(t *testing.T) {
	admin := migrated.DB(t)
	ctx := context.Background()
	c := wirecount.New()
	pool := countedPool(t, c)
	noop := func(pgx.Tx) error { return nil }
	for name, opts := range fencedRoundTripOptions() {
		t.Run("uncontended/"+name, func(t *testing.T) {
			key := testdb.Key(t)
			testdb.Key(t) // reserve key+1 for WithLocks
			var published []int64
			requireSteadyRoundTrips(t, c, 2, func() error {
				err := pgadvisory.RunExclusivePgx(ctx, pool, key, noop, opts(key)...)
				published = append(published, fencing.Published(t, admin, key))
				return err
			})
			requireAdvancing(t, published)
		})
	}
	t.Run("loser", func(t *testing.T) {
		key := testdb.Key(t)
		holdElsewhere(t, key)
		op := func() error { return pgadvisory.RunExclusivePgx(ctx, pool, key, noop, pgadvisory.WithFencing()) }
		require.ErrorIs(t, op(), pgadvisory.ErrLocked, "warm-up")
		require.Eventually(t, frontdoor.OnPool(pool).Idle, 30*time.Second, time.Millisecond)
		requireLoserRoundTrips(t, c, 1, frontdoor.OnPool(pool).Idle, op)
	})
}

func TestFencingRoundTripsStdlib(t *testing.T) {
	admin := migrated.DB(t)
	ctx := context.Background()
	c := wirecount.New()
	db := countedDB(t, c)
	noop := func(*sql.Tx) error { return nil }
	for name, opts := range fencedRoundTripOptions() {
		t.Run("uncontended/"+name, func(t *testing.T) {
			key := testdb.Key(t)
			testdb.Key(t)
			var published []int64
			requireSteadyRoundTrips(t, c, 3, func() error {
				err := pgadvisory.RunExclusive(ctx, db, key, noop, opts(key)...)
				published = append(published, fencing.Published(t, admin, key))
				return err
			})
			requireAdvancing(t, published)
		})
	}
	t.Run("loser", func(t *testing.T) {
		key := testdb.Key(t)
		holdElsewhere(t, key)
		op := func() error { return pgadvisory.RunExclusive(ctx, db, key, noop, pgadvisory.WithFencing()) }
		require.ErrorIs(t, op(), pgadvisory.ErrLocked, "warm-up")
		require.Eventually(t, frontdoor.OnDB(db).Idle, 30*time.Second, time.Millisecond)
		requireLoserRoundTrips(t, c, 2, frontdoor.OnDB(db).Idle, op) // BEGIN, the message; the ROLLBACK in the background
	})
}

// fencedRoundTripOptions are the fenced calls measured, by name.
func fencedRoundTripOptions() map[string]func(key int64) []pgadvisory.Option {
	return map[string]func(key int64) []pgadvisory.Option{
		"fenced": func(int64) []pgadvisory.Option { return []pgadvisory.Option{pgadvisory.WithFencing()} },
		"fenced_WithWait": func(int64) []pgadvisory.Option {
			return []pgadvisory.Option{pgadvisory.WithFencing(), pgadvisory.WithWait(5 * time.Second)}
		},
		"fenced_WithLocks": func(k int64) []pgadvisory.Option {
			return []pgadvisory.Option{pgadvisory.WithFencing(), pgadvisory.WithLocks(k + 1)}
		},
	}
}

// requireAdvancing checks that every call published a newer token.
func requireAdvancing(t *testing.T, published []int64) {
	t.Helper()
	require.Len(t, published, 4, "warm-up and three measured calls")
	for i := 1; i < len(published); i++ {
		require.Greater(t, published[i], published[i-1], "call %d published a new token", i)
	}
}
