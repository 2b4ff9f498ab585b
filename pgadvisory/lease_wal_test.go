package pgadvisory_test

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/wirecount"
	"github.com/lockgen/lockgen/pgadvisory"
)

// walStats is the cluster's pg_stat_wal: WAL records, and the WAL syncs
// (flushes to disk) and writes done so far.
type walStats struct{ records, syncs, writes int64 }

func readWAL(t *testing.T, admin *sql.DB) walStats {
	t.Helper()
	var w walStats
	require.NoError(t, admin.QueryRow(`SELECT wal_records, wal_sync, wal_write FROM pg_catalog.pg_stat_wal`).Scan(&w.records, &w.syncs, &w.writes))
	return w
}

func (w walStats) minus(v walStats) walStats {
	return walStats{w.records - v.records, w.syncs - v.syncs, w.writes - v.writes}
}

// leaseWALCluster is a private cluster with durable commits (fsync on,
// synchronous_commit on) and lockgen's schema, for counting WAL flushes:
// nothing else connects to it.
func leaseWALCluster(t *testing.T) (*pgcluster.Cluster, *sql.DB) {
	t.Helper()
	c := pgcluster.Start(t, pgcluster.WithSetting("fsync", "on"), pgcluster.WithSetting("synchronous_commit", "on"))
	migrator := openCluster(t, c)
	require.NoError(t, pgadvisory.Migrate(context.Background(), migrator))
	require.NoError(t, migrator.Close())
	admin := openCluster(t, c)
	admin.SetMaxOpenConns(1)
	// A backend reports its WAL statistics at most once a second, and when
	// it exits: the migration's are all in once its backends are gone.
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, admin.QueryRow(`SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE backend_type = 'client backend'`).Scan(&n))
		return n == 1
	}, 30*time.Second, 10*time.Millisecond, "the migration's backends exited")
	time.Sleep(100 * time.Millisecond)
	return c, admin
}

// leaseWALApp names the connections of leaseWALPool's pools.
const leaseWALApp = "lease_wal"

// poolsGone waits until the backends of closed leaseWALPool pools have
// exited, reporting their statistics (a Locker's listening connection,
// which writes nothing, may stay a while).
func poolsGone(t *testing.T, admin *sql.DB) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, admin.QueryRow(`SELECT count(*) FROM pg_catalog.pg_stat_activity
			WHERE application_name = $1 AND query <> 'LISTEN pgadvisory_wait'`, leaseWALApp).Scan(&n))
		return n == 0
	}, 30*time.Second, 10*time.Millisecond, "the pools' backends exited")
	time.Sleep(100 * time.Millisecond)
}

// leaseWALPool is a pgx pool of one connection on c whose round trips go
// to counter; it pings no idle connection (pgxpool's liveness check, one
// more round trip per renewal of a pool that does nothing else, is not the
// lease's cost).
func leaseWALPool(t *testing.T, c *pgcluster.Cluster, counter *wirecount.Counter) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(c.URL())
	require.NoError(t, err)
	cfg.MaxConns = 1
	cfg.ConnConfig.RuntimeParams["application_name"] = leaseWALApp
	if counter != nil {
		cfg.ConnConfig.DialFunc = counter.Dial(nil)
	}
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// TestLeaseSteadyCost: a Locker's lease leaderships cost at most 1 round
// trip and 1 WAL flush per renewal interval, whatever their number. On a private cluster with durable commits, one Locker
// (a pool of one connection) holds 200 leases (ttl 4.5s: renewed every
// 1.5s). Over four renewal intervals, counted from just after one renewal
// to just after another, its round trips on the wire are its renewals (at
// most one per interval, plus one for a boundary) and the cluster's WAL
// flushes (pg_stat_wal.wal_sync) one per renewal, give or take one of the
// WAL writer's: one statement renews all 200. The backend reports its WAL statistics at the end of a
// transaction at least 1s after its previous report, so at the end of every
// renewal here.
func TestLeaseSteadyCost(t *testing.T) {
	c, admin := leaseWALCluster(t)
	counter := wirecount.New()
	l, err := pgadvisory.New(pgadvisory.Pgx(leaseWALPool(t, c, counter)))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(testdb.Context(t))
	defer cancel()
	const n = 200
	const ttl = 4500 * time.Millisecond
	interval := ttl / 3
	var leading atomic.Int32
	done := make(chan error, n)
	stop := make(chan struct{})
	key := testdb.Key(t)
	for i := range n {
		go func() {
			done <- l.Lead(ctx, pgadvisory.ID(key+int64(i)), func(fctx context.Context, _ int64) error {
				leading.Add(1)
				select {
				case <-stop:
					return nil
				case <-fctx.Done():
					return context.Cause(fctx)
				}
			}, pgadvisory.WithLease(ttl))
		}()
	}
	require.Eventually(t, func() bool { return leading.Load() == n }, time.Minute, 10*time.Millisecond, "every lease taken")
	// afterRenewal returns just after the Locker's next round trip (a
	// renewal) was answered, with the round trips so far.
	afterRenewal := func() int64 {
		t.Helper()
		trips := counter.RoundTrips()
		require.Eventually(t, func() bool { return counter.RoundTrips() > trips }, 2*interval, time.Millisecond, "a renewal")
		time.Sleep(interval / 5)
		return counter.RoundTrips()
	}
	afterRenewal()
	trips0 := afterRenewal()
	wal0 := readWAL(t, admin)
	start := time.Now()
	time.Sleep(4*interval - interval/2)
	trips1 := afterRenewal()
	wal := readWAL(t, admin).minus(wal0)
	window := time.Since(start)
	renewals := trips1 - trips0
	// From just after one renewal to just after another: whole intervals,
	// give or take the scheduling of the two reads.
	intervals := int64((window + interval/2) / interval)
	t.Logf("%d leases, %v (%d renewal intervals of %v): %d round trips, WAL flushes %d, writes %d, records %d",
		n, window.Round(time.Millisecond), intervals, interval, renewals, wal.syncs, wal.writes, wal.records)
	require.Equal(t, int32(n), leading.Load(), "every lease still held")
	require.LessOrEqual(t, renewals, intervals+1, "at most one round trip per renewal interval for all %d leases", n)
	require.Positive(t, renewals, "renewed")
	// One flush per renewal, its commit's; the WAL writer, waking every
	// 200ms, may also flush the full pages of a renewal in progress (200
	// rows' worth of WAL): one more is allowed. One statement per lease
	// would flush about 200 times as often.
	require.LessOrEqual(t, wal.syncs, renewals+1, "one WAL flush per renewal")
	close(stop)
	for range n {
		require.NoError(t, <-done)
	}
}

// TestLeaseHandoffFlushes: a lease leadership changing hands costs one WAL
// flush, the successor's durable term, as a session-lock leader's
// hand-off does: the release commits without waiting for its own flush
// (lost in a crash, it leaves the lease to expire, and the successor's
// flush makes it durable anyway). Two Lockers on a private cluster with
// durable commits campaign with a lease, each leadership lasting 250ms (no
// renewal), until 20 leaderships ran; the cluster's WAL flushes over the
// run, up to both pools closed, are at most one per leadership plus a
// quarter (the WAL writer may flush an unflushed release before the
// successor does) and 3. A release that waited for its own flush made
// about two per leadership.
func TestLeaseHandoffFlushes(t *testing.T) {
	c, admin := leaseWALCluster(t)
	key := testdb.Key(t)
	wal0 := readWAL(t, admin)
	ctx, cancel := context.WithCancel(testdb.Context(t))
	defer cancel()
	const ttl = time.Second
	const leaderships = 20
	var ran, leading atomic.Int32
	done := make(chan error, 2)
	var pools []*pgxpool.Pool
	for range 2 {
		pool := leaseWALPool(t, c, nil)
		pools = append(pools, pool)
		l, err := pgadvisory.New(pgadvisory.Pgx(pool))
		require.NoError(t, err)
		go func() {
			done <- l.Campaign(ctx, pgadvisory.ID(key), func(fctx context.Context, _ int64) error {
				if n := leading.Add(1); n != 1 {
					t.Errorf("%d leaders at once", n)
				}
				defer leading.Add(-1)
				if ran.Add(1) >= leaderships {
					cancel()
					return nil
				}
				select {
				case <-time.After(250 * time.Millisecond):
					return nil
				case <-fctx.Done():
					return nil
				}
			}, pgadvisory.WithLease(ttl))
		}()
	}
	for range 2 {
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(2 * time.Minute):
			t.Fatal("the campaigns did not end")
		}
	}
	// The pools' backends report their statistics when they exit.
	for _, p := range pools {
		p.Close()
	}
	poolsGone(t, admin)
	wal := readWAL(t, admin).minus(wal0)
	n := int64(ran.Load())
	t.Logf("%d leaderships of two campaigning Lockers: WAL flushes %d, writes %d, records %d (%.2f flushes per leadership)",
		n, wal.syncs, wal.writes, wal.records, float64(wal.syncs)/float64(n))
	require.LessOrEqual(t, wal.syncs, n+n/4+3, "one WAL flush per leadership: the release waits for none")
}
