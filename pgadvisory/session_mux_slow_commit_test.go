package pgadvisory_test

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/faultproxy"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestSessionSharedSlowCommitKeepsNeighbours: an election whose durable
// commit waits for a stalled synchronous standby (1.5 s) on a healthy
// link, with WithCheckTimeout(400ms), on the one shared connection that
// also carries 20 other session locks checked every 50 ms. The server
// runs the election statement all along, so the connection is not taken
// for a half-open link: the election gets its term once the standby is
// back and none of the 20 locks is lost. CONTROL: the same stalled
// election on a link that goes silent (a proxy blackholes it, and the
// pool's new connections with it) is a half-open link: every lock on the
// connection ends with ErrLockLost ("did not answer within 400ms") and
// the election with an error.
func TestSessionSharedSlowCommitKeepsNeighbours(t *testing.T) {
	sc := startStallable(t)
	c, px, stall, committing := sc.c, sc.px, sc.stall, sc.committing
	ctx := testdb.Context(t)
	opts := []pgadvisory.Option{pgadvisory.WithCheckInterval(50 * time.Millisecond), pgadvisory.WithCheckTimeout(400 * time.Millisecond)}

	for _, silent := range []bool{false, true} {
		for _, drv := range frontdoor.Drivers {
			name := string(drv)
			if silent {
				name = "control: half-open/" + name
			}
			t.Run(name, func(t *testing.T) {
				door := proxiedClusterDoor(t, c, drv, "elector", px).WithLocker(pgadvisory.WithSessionConns(1))
				t.Cleanup(func() { px.Blackhole(false) }) // before the pool closes
				base := testdb.Key(t) << 8
				type held struct {
					end  func() (error, error)
					gone <-chan struct{}
				}
				var neighbours []held
				for i := range 20 {
					end, gone := holdShared(t, ctx, door, base+int64(i), opts...)
					neighbours = append(neighbours, held{end, gone})
				}
				stall(true)
				terms := make(chan int64, 1)
				led := make(chan error, 1)
				go func() {
					led <- door.Lead(ctx, pgadvisory.ID(base+100), func(_ context.Context, term int64) error { terms <- term; return nil }, opts...)
				}()
				require.Eventually(t, committing, 30*time.Second, 5*time.Millisecond, "the election's commit waits for the standby")
				if silent {
					px.Blackhole(true)
				}
				time.Sleep(1500 * time.Millisecond)
				stall(false)

				if silent {
					for i, n := range neighbours {
						frontdoor.Await(t, n.gone, fmt.Sprintf("lock %d canceled", i))
						err, cause := n.end()
						require.ErrorIs(t, cause, pgadvisory.ErrLockLost)
						require.ErrorIs(t, err, pgadvisory.ErrLockLost)
						require.ErrorContains(t, err, "did not answer within 400ms")
					}
					require.Error(t, frontdoor.Await(t, led, "the election"))
					px.Blackhole(false)
					return
				}
				require.NoError(t, frontdoor.Await(t, led, "the election"))
				require.Positive(t, <-terms)
				for i, n := range neighbours {
					select {
					case <-n.gone:
						t.Errorf("lock %d on the election's shared connection was lost", i)
					default:
					}
				}
				for _, n := range neighbours {
					err, cause := n.end()
					require.NoError(t, err)
					require.NoError(t, cause)
				}
			})
		}
	}
}

// stallable is a cluster of the test's own whose synchronous standby can
// be stalled: stall(true) names a synchronous standby that is not there,
// so every durable commit waits (elections force theirs) until
// stall(false). Role elector logs in through px; committing reports
// whether one of its elections waits for the standby.
type stallable struct {
	c          *pgcluster.Cluster
	admin      *sql.DB
	px         *faultproxy.Proxy
	stall      func(on bool)
	committing func() bool
}

// startStallable starts a stallable cluster, migrated.
func startStallable(t *testing.T) stallable {
	t.Helper()
	c := pgcluster.Start(t)
	admin := clusterDB(t, c, pgcluster.Superuser, "local")
	ctx := testdb.Context(t)
	require.NoError(t, pgadvisory.Migrate(ctx, admin))
	_, err := admin.ExecContext(ctx, `CREATE ROLE elector LOGIN; CREATE TABLE public.stall_probe (x int)`)
	require.NoError(t, err)
	px := faultproxy.New(t, net.JoinHostPort(c.Host(), fmt.Sprint(c.Port())))
	t.Cleanup(func() { px.Blackhole(false) })
	probe := clusterDB(t, c, "elector", "")
	stall := func(on bool) {
		names := ""
		if on {
			names = "nobody"
		}
		_, err := admin.ExecContext(ctx, `ALTER SYSTEM SET synchronous_standby_names = '`+names+`'`)
		require.NoError(t, err)
		_, err = admin.ExecContext(ctx, `SELECT pg_reload_conf()`)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			var got string
			require.NoError(t, probe.QueryRowContext(ctx, `SHOW synchronous_standby_names`).Scan(&got))
			return got == names
		}, 30*time.Second, 10*time.Millisecond)
		if on {
			// The server waits for standbys once its checkpointer has
			// reloaded the setting too: until a durable commit waits.
			require.Eventually(t, func() bool { return commitWaits(t, c) }, 30*time.Second, 10*time.Millisecond,
				"a durable commit waits for the standby")
		}
	}
	t.Cleanup(func() { stall(false) })
	committing := func() bool {
		var n int
		require.NoError(t, admin.QueryRowContext(ctx, `SELECT count(*) FROM pg_catalog.pg_stat_activity
			WHERE usename = 'elector' AND wait_event = 'SyncRep' AND query LIKE '%leader_elect%'`).Scan(&n))
		return n == 1
	}
	return stallable{c: c, admin: admin, px: px, stall: stall, committing: committing}
}

// commitWaits reports whether a durable commit on c (a row written to
// public.stall_probe) waits (200 ms) for a synchronous standby.
func commitWaits(t *testing.T, c *pgcluster.Cluster) bool {
	t.Helper()
	cfg, err := pgx.ParseConfig(c.URL())
	require.NoError(t, err)
	cfg.RuntimeParams["synchronous_commit"] = "on"
	conn, err := pgx.ConnectConfig(testdb.Context(t), cfg)
	require.NoError(t, err)
	defer func() { _ = conn.Close(context.Background()) }()
	ctx, cancel := context.WithTimeout(testdb.Context(t), 200*time.Millisecond)
	defer cancel()
	_, err = conn.Exec(ctx, `INSERT INTO public.stall_probe VALUES (1)`)
	return err != nil && ctx.Err() != nil
}

// proxiedClusterDoor is a door of drv on c's postgres database as user, through
// px.
func proxiedClusterDoor(t *testing.T, c *pgcluster.Cluster, drv frontdoor.Driver, user string, px *faultproxy.Proxy) frontdoor.Door {
	t.Helper()
	if drv == frontdoor.Pgx {
		cfg, err := pgxpool.ParseConfig(c.URL())
		require.NoError(t, err)
		cfg.ConnConfig.User = user
		px.Route(cfg.ConnConfig)
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		return frontdoor.OnPool(pool)
	}
	cfg, err := pgx.ParseConfig(c.URL())
	require.NoError(t, err)
	cfg.User = user
	px.Route(cfg)
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { _ = db.Close() })
	return frontdoor.OnDB(db)
}
