package pgadvisory_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// A fenced call publishes its token on the lock's own connection: it needs
// one pool connection, like an unfenced call, so a pool of one works and a
// pool whose other connections are all taken does not stall it.

// TestFencingPoolOfOne: on a pool that allows one connection, fenced calls
// run (fn sees the one connection in use), publish, and write a fenced
// table through the lock transaction, one after the other.
func TestFencingPoolOfOne(t *testing.T) {
	admin := migrated.DB(t)
	for _, door := range frontdoor.OpenAll(t, frontdoor.MaxConns(1)) {
		t.Run(door.Label(), func(t *testing.T) {
			ctx := testdb.Context(t)
			key := testdb.Key(t)
			tbl := fencing.Table(t, admin, testdb.Schema(t), "accounts", key, "strict")
			var tokens []int64
			for i := range 3 {
				require.NoError(t, door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
					require.Equal(t, 1, door.InUse(), "the pool's only connection")
					tok, _ := tx.FencingToken()
					tokens = append(tokens, tok)
					return tx.Exec(ctx, `INSERT INTO `+tbl+` (id, balance) VALUES ($1, 0)`, i)
				}, pgadvisory.WithFencing()))
				require.Equal(t, tokens[i], fencing.Published(t, admin, key))
			}
			require.Less(t, tokens[0], tokens[1])
			require.Less(t, tokens[1], tokens[2])
			require.Len(t, fencing.Rows(t, admin, tbl), 3)
			frontdoor.RequireIdle(t, door)
		})
	}
}

// TestFencingHoldsOneConnection: with every other connection of its pool
// checked out, a fenced call still runs (before, its publish needed a
// second connection and failed when ctx ended). The control checks that
// the pool really was full: one more checkout waits until ctx ends.
func TestFencingHoldsOneConnection(t *testing.T) {
	admin := migrated.DB(t)
	for _, door := range frontdoor.OpenAll(t, frontdoor.MaxConns(2)) {
		t.Run(door.Label(), func(t *testing.T) {
			ctx := testdb.Context(t)
			key := testdb.Key(t)
			release := door.Checkout(t)
			defer release()
			var ran bool
			require.NoError(t, door.RunExclusive(ctx, key, func(frontdoor.Tx) error {
				ran = true
				// CONTROL: the pool is full while fn runs.
				short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				defer cancel()
				if door.Driver == frontdoor.Pgx {
					_, err := door.Pool().Acquire(short)
					require.ErrorIs(t, err, context.DeadlineExceeded)
				} else {
					_, err := door.DB().Conn(short)
					require.ErrorIs(t, err, context.DeadlineExceeded)
				}
				return nil
			}, pgadvisory.WithFencing()))
			require.True(t, ran)
			require.NotZero(t, fencing.Published(t, admin, key))
		})
	}
}
