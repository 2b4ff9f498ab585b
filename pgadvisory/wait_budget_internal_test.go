package pgadvisory

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// TestServerWaitBudgetSize: a quarter of the pool's connections, at least
// 1; 4 for an unlimited pool.
func TestServerWaitBudgetSize(t *testing.T) {
	for maxConns, want := range map[int]int32{0: 4, 1: 1, 3: 1, 4: 1, 8: 2, 10: 2, 100: 25} {
		require.Equal(t, want, serverWaitBudget(maxConns), "pool of %d", maxConns)
	}
}

// TestServerWaitSlots: on a pool of 4 connections of either kind, one head
// gets a server-wait slot and the next does not until it is given back;
// with 3 of the pool's 4 connections in use, none does (the try would take
// the last one), and one does again once a connection is back. A Locker
// of database/sql without a connection limit gets 4.
func TestServerWaitSlots(t *testing.T) {
	ctx := testdb.Context(t)
	pool := testdb.PoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 4 })
	db := testdb.OpenDB(t, testdb.PoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 4 }))
	db.SetMaxOpenConns(4)
	for _, p := range []struct {
		name string
		pool any
		take func() (back func())
	}{
		{"pgx", pool, func() func() {
			c, err := pool.Acquire(ctx)
			require.NoError(t, err)
			return c.Release
		}},
		{"database/sql", db, func() func() {
			c, err := db.Conn(ctx)
			require.NoError(t, err)
			return func() { _ = c.Close() }
		}},
	} {
		t.Run(p.name, func(t *testing.T) {
			w := &serverWaits{pool: p.pool}
			require.True(t, w.acquire(), "a free slot")
			require.False(t, w.acquire(), "the budget of a pool of 4 is 1")
			w.release()
			require.True(t, w.acquire(), "the slot is back")
			w.release()

			var backs []func()
			defer func() { // also when a check fails: the pool's Close waits for them
				for _, back := range backs {
					back()
				}
			}()
			for range 3 {
				backs = append(backs, p.take())
			}
			require.False(t, w.acquire(), "3 of 4 connections in use: no spare for a wait on the server")
			backs[0]()
			backs = backs[1:]
			require.True(t, w.acquire(), "2 of 4 in use: a spare")
			w.release()
		})
	}
	unlimited := testdb.OpenDB(t, testdb.Pool(t))
	w := &serverWaits{pool: unlimited}
	for range 4 {
		require.True(t, w.acquire(), "database/sql without a limit: 4 slots")
	}
	require.False(t, w.acquire())
}
