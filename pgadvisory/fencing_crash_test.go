package pgadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// The publish is durable before fn runs, whatever synchronous_commit says:
// on a throwaway cluster whose every session runs with synchronous_commit =
// off (and whose WAL writer waits 10 s, with the background writer off, so
// that nothing else flushes the WAL meanwhile), a fenced holder's server is
// stopped abruptly while fn runs and started again. The published token is
// still there, and the next token is greater: no token is handed out twice.
// The control runs the same acquisition by hand with the forced
// synchronous_commit undone: the crash loses the publish, and the sequence
// hands the same token out again.

func TestFencingPublishSurvivesCrash(t *testing.T) {
	cluster := crashCluster(t)
	ctx := context.Background()
	for _, drv := range frontdoor.Drivers {
		t.Run(string(drv), func(t *testing.T) {
			admin := openCluster(t, cluster)
			key := testdb.Key(t)
			checkpoint(t, admin) // the token's nextval is the first since a checkpoint: it writes WAL
			door := clusterDoor(t, cluster, drv)

			entered, resume := make(chan int64, 1), make(chan struct{})
			done := make(chan error, 1)
			go func() {
				done <- door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
					var setting string
					if err := tx.QueryRow(ctx, `SELECT current_setting('synchronous_commit')`).Scan(&setting); err != nil {
						return err
					}
					if setting != "off" {
						return errors.New("crash test: the session's synchronous_commit is " + setting + ", want off")
					}
					tok, _ := tx.FencingToken()
					entered <- tok
					<-resume
					return nil
				}, pgadvisory.WithFencing())
			}()
			tok := frontdoor.Await(t, entered, "fn")
			cluster.Crash(t)
			close(resume)
			err := frontdoor.Await(t, done, "the holder")
			require.True(t, errors.Is(err, pgadvisory.ErrConnLost) || errors.Is(err, pgadvisory.ErrCommitUnknown), "%v", err)

			cluster.Restart(t)
			admin = openCluster(t, cluster)
			require.Equal(t, tok, fencing.Published(t, admin, key), "the publish survived the crash")
			require.Greater(t, fencing.NextToken(t, admin), tok, "the next token is greater")
		})
	}
}

func TestFencingPublishCrashControl(t *testing.T) {
	cluster := crashCluster(t)
	ctx := context.Background()
	// The crash loses the publish every time. It loses the sequence's
	// advance too unless the WAL up to it was flushed first: the WAL
	// writer is woken when a WAL page fills, and whether one fills between
	// nextval's record and the commit's depends on where the WAL stands. So
	// the token's reuse is shown in one of a few attempts.
	const attempts = 3
	for attempt := 1; attempt <= attempts; attempt++ {
		admin := openCluster(t, cluster)
		key := testdb.Key(t)
		checkpoint(t, admin)

		conn, err := pgx.Connect(ctx, cluster.URL())
		require.NoError(t, err)
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		var tok int64
		require.NoError(t, tx.QueryRow(ctx, `SELECT token FROM pgadvisory.fence_acquire(ARRAY[$1]::bigint[], false, NULL, '5000ms')`, key).Scan(&tok))
		// Undo what fence_acquire forced: the session's own setting again.
		_, err = tx.Exec(ctx, `SELECT set_config('synchronous_commit', 'off', true)`)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `COMMIT AND CHAIN`)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `SELECT pgadvisory.fence_handover()`)
		require.NoError(t, err)
		require.Equal(t, tok, fencing.Published(t, admin, key), "published, as far as anyone can see")

		cluster.Crash(t)
		_ = conn.Close(ctx)
		cluster.Restart(t)
		admin = openCluster(t, cluster)
		require.Zero(t, fencing.Published(t, admin, key), "the crash lost the publish")
		next := fencing.NextToken(t, admin)
		if next == tok {
			return // and the sequence hands out the same token again
		}
		require.Greater(t, next, tok)
		t.Logf("attempt %d: the sequence's advance survived the crash (the WAL up to it was flushed): next token %d, published %d", attempt, next, tok)
	}
	t.Fatalf("in %d attempts the crash never lost the sequence's advance with the publish: the sequence never handed out the same token again", attempts)
}

func crashCluster(t *testing.T) *pgcluster.Cluster {
	t.Helper()
	c := pgcluster.Start(t,
		pgcluster.WithSetting("synchronous_commit", "off"),
		pgcluster.WithSetting("wal_writer_delay", "10s"),
		pgcluster.WithSetting("bgwriter_lru_maxpages", "0"))
	admin := openCluster(t, c)
	require.NoError(t, pgadvisory.Migrate(context.Background(), admin))
	return c
}

// openCluster is a database/sql handle on c's postgres database.
func openCluster(t *testing.T, c *pgcluster.Cluster) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", c.URL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// clusterDoor is a front door of driver drv on c's postgres database.
func clusterDoor(t *testing.T, c *pgcluster.Cluster, drv frontdoor.Driver) frontdoor.Door {
	t.Helper()
	if drv == frontdoor.SQL {
		return frontdoor.OnDB(openCluster(t, c))
	}
	pool, err := pgxpool.New(context.Background(), c.URL())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return frontdoor.OnPool(pool)
}

// checkpoint makes everything so far durable and starts a checkpoint
// cycle: the next change of a page writes WAL anew.
func checkpoint(t *testing.T, db *sql.DB) {
	t.Helper()
	_, err := db.Exec(`CHECKPOINT`)
	require.NoError(t, err)
}
