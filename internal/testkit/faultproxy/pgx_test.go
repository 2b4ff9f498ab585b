package faultproxy_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/faultproxy"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// proxiedConfig returns a pgx configuration for the test database that
// connects through a new proxy, in clear text so that the hook can read it.
func proxiedConfig(t *testing.T) (*pgx.ConnConfig, *faultproxy.Proxy) {
	t.Helper()
	cfg, err := pgx.ParseConfig(testdb.URL(t))
	require.NoError(t, err)
	px := faultproxy.ToTestDB(t)
	px.Route(cfg)
	return cfg, px
}

// TestPgxSendsCommitAsSimpleQuery pins down what the hook of the pgadvisory
// failure tests relies on: pgx (directly and through database/sql) sends
// COMMIT as one simple-protocol Query message "commit", which HasQuery finds.
func TestPgxSendsCommitAsSimpleQuery(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, px := proxiedConfig(t)
	var mu sync.Mutex
	seen := map[string]int{}
	px.OnClientWrite(func(p []byte) faultproxy.Action {
		mu.Lock()
		defer mu.Unlock()
		for _, q := range []string{"commit", "rollback"} {
			if faultproxy.HasQuery(p, q) {
				seen[q]++
			}
		}
		return faultproxy.Forward
	})
	count := func(q string) int {
		mu.Lock()
		defer mu.Unlock()
		return seen[q]
	}

	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "SELECT 1")
	require.NoError(t, err)
	require.Zero(t, count("commit"), "control: other statements do not match")
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT $1::int", 1)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, 1, count("commit"), "pgx.Tx.Commit")

	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	stx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = stx.ExecContext(ctx, "SELECT $1::int", 1)
	require.NoError(t, err)
	require.NoError(t, stx.Commit())
	require.Equal(t, 2, count("commit"), "database/sql Tx.Commit")
	stx, err = db.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, stx.Rollback())
	require.Equal(t, 1, count("rollback"))
}
