package pgadvisory_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// A holder that never connected: an unreachable port, or a database that
// does not exist. There was never a connection or a lock, so the call
// reports the step "connect" with ErrConnect, never ErrConnLost (which
// says a lock was released), and a missing database says so plainly. Every
// entry family, both front doors; fn is not called.

func TestFailConnect(t *testing.T) {
	closedPort := func(t *testing.T) func(*pgx.ConnConfig) {
		// A port that was just free: nothing listens there.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := l.Addr().(*net.TCPAddr).Port
		require.NoError(t, l.Close())
		return func(c *pgx.ConnConfig) {
			c.Host, c.Port, c.Fallbacks, c.TLSConfig = "127.0.0.1", uint16(port), nil, nil
			c.ConnectTimeout = 0
		}
	}
	noDatabase := func(*testing.T) func(*pgx.ConnConfig) {
		return func(c *pgx.ConnConfig) { c.Database = "lockgen_no_such_database" }
	}
	for _, tc := range []struct {
		name      string
		configure func(*testing.T) func(*pgx.ConnConfig)
		sqlState  string
		says      string
	}{
		{"unreachable", closedPort, "", "connect"},
		{"missing_database", noDatabase, "3D000", "the database does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
				ctx := testdb.Context(t)
				door := openUnconnected(t, drv, tc.configure(t))
				key := testdb.Key(t)
				called := false
				calls := map[string]func() error{
					"RunExclusive": func() error {
						return door.RunExclusive(ctx, key, func(frontdoor.Tx) error { called = true; return nil })
					},
					"RunOnce": func() error {
						return door.RunOnce(ctx, key, "w", func(frontdoor.Tx) error { called = true; return nil })
					},
					"RunSession": func() error {
						return door.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error { called = true; return nil })
					},
				}
				for name, call := range calls {
					err := call()
					var pe *pgadvisory.Error
					require.ErrorAs(t, err, &pe, name)
					require.Equal(t, pgadvisory.OpConnect, pe.Op, "%s: %v", name, err)
					require.ErrorIs(t, err, pgadvisory.ErrConnect, name)
					require.NotErrorIs(t, err, pgadvisory.ErrConnLost, "%s: there was never a connection or a lock", name)
					require.Equal(t, tc.sqlState, pe.SQLState, name)
					require.Contains(t, err.Error(), "connecting: could not connect; no connection and no lock was ever there", name)
					require.Contains(t, err.Error(), tc.says, name)
					require.NotContains(t, err.Error(), "releases the lock", name)
					require.False(t, called, "%s: fn is not called", name)
					require.Equal(t, 1, strings.Count(err.Error(), "pgadvisory: "), "%s: one prefix: %v", name, err)
				}
			})
		})
	}
}

// TestFailConnectControl: the same door on a reachable database works, and
// a connection that breaks after it was made is still ErrConnLost
// (TestFailConnectionCut): the step tells the two apart.
func TestFailConnectControl(t *testing.T) {
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		door := openUnconnected(t, drv, func(*pgx.ConnConfig) {})
		err := door.RunExclusive(ctx, testdb.Key(t), func(frontdoor.Tx) error { return nil })
		require.NoError(t, err)
		var pe *pgadvisory.Error
		require.False(t, errors.As(err, &pe))
	})
}

// openUnconnected is a door whose pool connects lazily with configure
// applied: frontdoor.Open pings, which a test of connect failures cannot.
func openUnconnected(t *testing.T, drv frontdoor.Driver, configure func(*pgx.ConnConfig)) frontdoor.Door {
	t.Helper()
	switch drv {
	case frontdoor.SQL:
		cfg, err := pgx.ParseConfig(testdb.URL(t))
		require.NoError(t, err)
		configure(cfg)
		db := stdlib.OpenDB(*cfg)
		t.Cleanup(func() { _ = db.Close() })
		return frontdoor.OnDB(db)
	default:
		cfg, err := pgxpool.ParseConfig(testdb.URL(t))
		require.NoError(t, err)
		configure(cfg.ConnConfig)
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		return frontdoor.OnPool(pool)
	}
}
