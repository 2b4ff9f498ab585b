package pgadvisory_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestLeadElectionIsSynchronous: an election commits synchronously whatever
// the role says. On a cluster of the test's own whose
// synchronous_standby_names names a standby that is not there, a role with
// synchronous_commit = off elects: its election's COMMIT waits for the
// standby (the witness sees the backend waiting on SyncRep), so Lead
// returns no term and fn does not run; the call ends with its context. Had
// the election committed asynchronously, a failover could lose a term a
// leader already acted on. The control: the same role and call once the
// cluster names no synchronous standby get a term.
func TestLeadElectionIsSynchronous(t *testing.T) {
	c := pgcluster.Start(t, pgcluster.WithSetting("synchronous_standby_names", "nobody"))
	// The owner's session commits locally: nothing it does waits for the
	// absent standby.
	admin := clusterDB(t, c, pgcluster.Superuser, "local")
	ctx := testdb.Context(t)
	require.NoError(t, pgadvisory.Migrate(ctx, admin))
	_, err := admin.ExecContext(ctx, `CREATE ROLE elector LOGIN; ALTER ROLE elector SET synchronous_commit = off`)
	require.NoError(t, err)

	doors := map[frontdoor.Driver]frontdoor.Door{
		frontdoor.SQL: frontdoor.OnDB(clusterDB(t, c, "elector", "")),
		frontdoor.Pgx: frontdoor.OnPool(clusterPool(t, c, "elector")),
	}
	for _, drv := range frontdoor.Drivers {
		t.Run(string(drv), func(t *testing.T) {
			door := doors[drv]
			var setting string
			require.NoError(t, admin.QueryRowContext(ctx, `SELECT setting FROM pg_catalog.pg_db_role_setting AS s
				JOIN pg_catalog.pg_roles AS r ON r.oid = s.setrole, unnest(s.setconfig) AS setting WHERE r.rolname = 'elector'`).Scan(&setting))
			require.Equal(t, "synchronous_commit=off", setting)

			key := testdb.Key(t)
			lctx, cancel := context.WithCancel(ctx)
			defer cancel()
			ran := make(chan int64, 1)
			done := make(chan error, 1)
			go func() {
				done <- door.Lead(lctx, pgadvisory.ID(key), func(_ context.Context, term int64) error { ran <- term; return nil })
			}()
			require.Eventually(t, func() bool {
				var n int
				require.NoError(t, admin.QueryRowContext(ctx, `SELECT count(*) FROM pg_catalog.pg_stat_activity
					WHERE usename = 'elector' AND wait_event = 'SyncRep' AND query LIKE '%leader_elect%'`).Scan(&n))
				return n == 1
			}, 30*time.Second, 10*time.Millisecond, "the election's COMMIT waits for the synchronous standby")
			select {
			case term := <-ran:
				t.Fatalf("Lead returned term %d before the election was durable", term)
			case err := <-done:
				t.Fatalf("Lead ended while its election waited: %v", err)
			case <-time.After(time.Second):
			}
			cancel()
			select {
			case err := <-done:
				require.Error(t, err)
			case <-ctx.Done():
				t.Fatal("Lead did not return after its context ended")
			}
			select {
			case term := <-ran:
				t.Fatalf("fn ran with term %d", term)
			default:
			}
		})
	}

	// CONTROL: no synchronous standby named, the same elections return a
	// term at once.
	_, err = admin.ExecContext(ctx, `ALTER SYSTEM SET synchronous_standby_names = ''`)
	require.NoError(t, err)
	_, err = admin.ExecContext(ctx, `SELECT pg_reload_conf()`)
	require.NoError(t, err)
	elector := clusterDB(t, c, "elector", "")
	require.Eventually(t, func() bool {
		var names string
		require.NoError(t, elector.QueryRowContext(ctx, `SHOW synchronous_standby_names`).Scan(&names))
		return names == ""
	}, 30*time.Second, 10*time.Millisecond)
	for _, drv := range frontdoor.Drivers {
		var term int64
		require.NoError(t, doors[drv].Lead(ctx, pgadvisory.ID(testdb.Key(t)), func(_ context.Context, tm int64) error { term = tm; return nil }), drv)
		require.Positive(t, term, drv)
	}
}

// clusterDB is a database/sql handle on c's postgres database as user,
// with synchronous_commit set to sync unless empty.
func clusterDB(t *testing.T, c *pgcluster.Cluster, user, sync string) *sql.DB {
	t.Helper()
	cfg, err := pgx.ParseConfig(c.URL())
	require.NoError(t, err)
	cfg.User = user
	if sync != "" {
		cfg.RuntimeParams["synchronous_commit"] = sync
	}
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// clusterPool is a pgx pool on c's postgres database as user.
func clusterPool(t *testing.T, c *pgcluster.Cluster, user string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(c.URL())
	require.NoError(t, err)
	cfg.ConnConfig.User = user
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}
