package pgadvisory_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/wirecount"
	"github.com/lockgen/lockgen/pgadvisory"
)

// The lease candidate processes: TestLeaseManyKeysProcesses starts this
// test binary as TestLeaseScaleChildProcess, which campaigns with a lease
// for each of its keys on one Locker over a pgx pool of leaseScaleConns
// connections whose round trips it counts (wirecount). It answers each
// line "stats" on its stdin with "stats <round trips> <leaderships held>",
// and prints "error <key> <err>" when a Campaign returns an error and
// "lost <key> <cause>" when a leadership is lost while the process runs.
// It ends when its stdin closes.

// Environment of a lease candidate process.
const (
	leaseScaleURL  = "LOCKGEN_LEASE_SCALE_URL"
	leaseScaleSpec = "LOCKGEN_LEASE_SCALE_SPEC" // first key,keys,ttl,application name
)

// leaseScaleConns is each candidate process's pool size.
const leaseScaleConns = 2

// TestLeaseScaleChildProcess is a child of TestLeaseManyKeysProcesses. Run
// by itself it does nothing.
func TestLeaseScaleChildProcess(t *testing.T) {
	url := os.Getenv(leaseScaleURL)
	if url == "" {
		t.Skip("a child process of TestLeaseManyKeysProcesses")
	}
	spec := strings.Split(os.Getenv(leaseScaleSpec), ",")
	require.Len(t, spec, 4)
	first, err := strconv.ParseInt(spec[0], 10, 64)
	require.NoError(t, err)
	keys, err := strconv.Atoi(spec[1])
	require.NoError(t, err)
	ttl, err := time.ParseDuration(spec[2])
	require.NoError(t, err)
	app := spec[3]

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	counter := wirecount.New()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = leaseScaleConns
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.ConnConfig.DialFunc = counter.Dial(nil)
	// pgxpool pings a connection that was idle for more than a second
	// before handing it out: one more round trip per renewal of a pool that
	// does nothing else. It is the pool's liveness check, not the lease's
	// cost; the renewals are counted without it.
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	locker, err := pgadvisory.New(pgadvisory.Pgx(pool), pgadvisory.WithDefaultHolder(app))
	require.NoError(t, err)

	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	var leading atomic.Int64
	cctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range keys {
		key := first + int64(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := locker.Campaign(cctx, pgadvisory.ID(key), func(lctx context.Context, _ int64) error {
				leading.Add(1)
				defer leading.Add(-1)
				<-lctx.Done()
				if cctx.Err() == nil {
					say("lost %d %v", key, context.Cause(lctx))
				}
				return context.Cause(lctx)
			}, pgadvisory.WithLease(ttl))
			if err != nil {
				say("error %d %v", key, err)
			}
		}()
	}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if sc.Text() == "stats" {
			say("stats %d %d", counter.RoundTrips(), leading.Load())
		}
	}
	stop()
	wg.Wait()
}

// leaseScaleChild is a running candidate process.
type leaseScaleChild struct {
	*childProcess
	app   string
	stats chan [2]int64
	mu    sync.Mutex
	bad   []string      // its "error" and "lost" lines
	done  chan struct{} // closed when its stdout ends
}

// startLeaseScaleChild starts a candidate process for keys first..first+n-1.
func startLeaseScaleChild(t *testing.T, app string, first int64, n int, ttl time.Duration) *leaseScaleChild {
	t.Helper()
	c := &leaseScaleChild{
		childProcess: startChild(t, "TestLeaseScaleChildProcess", leaseScaleURL+"="+testdb.URL(t),
			fmt.Sprintf("%s=%d,%d,%v,%s", leaseScaleSpec, first, n, ttl, app)),
		app: app, stats: make(chan [2]int64, 4), done: make(chan struct{}),
	}
	go func() {
		defer close(c.done)
		for l := range c.lines {
			var s [2]int64
			if _, err := fmt.Sscanf(l, "stats %d %d", &s[0], &s[1]); err == nil {
				c.stats <- s
				continue
			}
			if strings.HasPrefix(l, "error ") || strings.HasPrefix(l, "lost ") {
				c.mu.Lock()
				c.bad = append(c.bad, l)
				c.mu.Unlock()
			}
		}
	}()
	return c
}

// roundTrips asks the child for its round trips so far and the
// leaderships it holds.
func (c *leaseScaleChild) roundTrips(t *testing.T) (trips, leading int64) {
	t.Helper()
	_, err := io.WriteString(c.in, "stats\n")
	require.NoError(t, err)
	select {
	case s := <-c.stats:
		return s[0], s[1]
	case <-c.done:
		t.Fatalf("%s ended", c.app)
	case <-time.After(30 * time.Second):
		t.Fatalf("%s does not answer", c.app)
	}
	return 0, 0
}

// badLines are the child's "error" and "lost" lines so far.
func (c *leaseScaleChild) badLines() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.bad...)
}

// leaseLeaders counts, per holder, the keys first..first+n-1 whose lease
// is held, unexpired and whose term is the lock's published token.
func leaseLeaders(t *testing.T, admin *sql.DB, first int64, n int) map[string]int {
	t.Helper()
	rows, err := admin.Query(`SELECT l.holder, count(*) FROM pgadvisory.lease AS l
		JOIN pgadvisory.fence AS f ON f.lock_id = l.lock_id AND f.token = l.term
		WHERE l.lock_id BETWEEN $1 AND $2 AND l.owner_secret IS NOT NULL AND l.expires_at > clock_timestamp()
		GROUP BY l.holder`, first, first+int64(n)-1)
	require.NoError(t, err)
	defer rows.Close()
	got := map[string]int{}
	for rows.Next() {
		var h string
		var k int
		require.NoError(t, rows.Scan(&h, &k))
		got[h] = k
	}
	require.NoError(t, rows.Err())
	return got
}

// backendsOf counts the server connections of each application name now.
func backendsOf(t *testing.T, admin *sql.DB, apps []string) map[string]int {
	t.Helper()
	rows, err := admin.Query(`SELECT application_name, count(*) FROM pg_catalog.pg_stat_activity
		WHERE application_name = ANY($1) GROUP BY 1`, "{"+strings.Join(apps, ",")+"}")
	require.NoError(t, err)
	defer rows.Close()
	got := map[string]int{}
	for rows.Next() {
		var a string
		var k int
		require.NoError(t, rows.Scan(&a, &k))
		got[a] = k
	}
	require.NoError(t, rows.Err())
	return got
}

// TestLeaseManyKeysProcesses: 1,000 keys, each with a candidate in every
// one of 3 processes (a deployment of 1,000 keys x 3 replicas), with a
// ttl of 20s (1,000 keys x 2 polling processes send about 1,000 polls a
// second, on 2 cores shared with other test runs). Process A campaigns
// with WithLease(20s) for every key and leads them all; then B and C
// campaign for the same keys and poll. While all three campaign, each has at most 3 connections on
// the server (pg_stat_activity by application_name; its pool has 2, and
// a waiting process has its Locker's listening connection). A's
// round trips over three renewal intervals are its renewals, one statement
// per interval for its 1,000 leases: at most one per interval (plus one for
// a boundary). A is killed (SIGKILL): every key gets a new leader in B or
// C, its term the published token, within ttl plus 20s (the leases expire
// ttl after A's last renewal, then one poll and an election per key); no
// Campaign returns an error and no leadership is lost.
func TestLeaseManyKeysProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("three processes over about a minute")
	}
	admin := migrated.DB(t)
	const keys = 1000
	const ttl = 20 * time.Second
	interval := ttl / 3
	first := testdb.Key(t)
	for i := 1; i < keys; i++ {
		require.Equal(t, first+int64(i), testdb.Key(t), "consecutive keys")
	}
	apps := []string{fmt.Sprintf("lscale_a_%d", first), fmt.Sprintf("lscale_b_%d", first), fmt.Sprintf("lscale_c_%d", first)}

	a := startLeaseScaleChild(t, apps[0], first, keys, ttl)
	require.Eventually(t, func() bool { return leaseLeaders(t, admin, first, keys)[apps[0]] == keys },
		2*time.Minute, 100*time.Millisecond, "A leads every key")
	b := startLeaseScaleChild(t, apps[1], first, keys, ttl)
	c := startLeaseScaleChild(t, apps[2], first, keys, ttl)
	// B and C try every key once, then poll each every ttl/10.
	require.Eventually(t, func() bool {
		tb, _ := b.roundTrips(t)
		tc, _ := c.roundTrips(t)
		return tb >= keys && tc >= keys
	}, 2*time.Minute, 200*time.Millisecond, "B and C tried every key")

	most := map[string]int{}
	sample := func() {
		for app, n := range backendsOf(t, admin, apps) {
			most[app] = max(most[app], n)
		}
	}
	// A's listening connection, which its campaigns opened while they
	// waited for their first try, closes a while after the last one: its
	// goodbye is not a renewal.
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, admin.QueryRow(`SELECT count(*) FROM pg_catalog.pg_stat_activity
			WHERE application_name = $1 AND query = 'LISTEN pgadvisory_wait'`, apps[0]).Scan(&n))
		return n == 0
	}, time.Minute, 100*time.Millisecond, "A's listening connection closed")
	time.Sleep(time.Second)
	trips0, leading0 := a.roundTrips(t)
	start := time.Now()
	for time.Since(start) < 3*interval {
		sample()
		time.Sleep(100 * time.Millisecond)
	}
	trips1, leading1 := a.roundTrips(t)
	window := time.Since(start)
	require.Equal(t, int64(keys), leading0)
	require.Equal(t, int64(keys), leading1)
	renewals := trips1 - trips0
	intervals := int64(window / interval)
	t.Logf("A: %d round trips in %v (%d renewal intervals of %v) for %d leases", renewals, window.Round(time.Millisecond), intervals, interval, keys)
	require.LessOrEqual(t, renewals, intervals+1, "A's round trips while it leads: its renewals, one statement per interval for all its leases")
	require.GreaterOrEqual(t, renewals, intervals-1, "A renews its leases every interval")
	require.Equal(t, map[string]int{apps[0]: keys}, leaseLeaders(t, admin, first, keys), "A still leads every key")
	for _, app := range apps {
		require.LessOrEqual(t, most[app], 3, "%s's server connections while all three campaign", app)
	}
	t.Logf("server connections while all campaign, most seen: %v", most)

	require.NoError(t, a.cmd.Process.Kill())
	<-a.done
	killed := time.Now()
	var took time.Duration
	for {
		sample()
		got := leaseLeaders(t, admin, first, keys)
		if got[apps[1]]+got[apps[2]] == keys {
			took = time.Since(killed)
			t.Logf("every key has a new leader %v after A was killed: B %d, C %d", took.Round(time.Millisecond), got[apps[1]], got[apps[2]])
			break
		}
		if time.Since(killed) > ttl+20*time.Second {
			t.Fatalf("%v after A was killed, only %d of %d keys have a new leader (%v)", time.Since(killed).Round(time.Millisecond),
				got[apps[1]]+got[apps[2]], keys, got)
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, lb := b.roundTrips(t)
	_, lc := c.roundTrips(t)
	require.Equal(t, int64(keys), lb+lc, "B and C run fn for every key")
	for _, app := range apps[1:] {
		require.LessOrEqual(t, most[app], 3, "%s's server connections", app)
	}
	for _, ch := range []*leaseScaleChild{b, c} {
		_ = ch.in.Close()
		select {
		case <-ch.done:
		case <-time.After(time.Minute):
			t.Fatalf("%s did not end", ch.app)
		}
	}
	for _, ch := range []*leaseScaleChild{a, b, c} {
		require.Empty(t, ch.badLines(), "%s: no Campaign error and no leadership lost", ch.app)
	}
}
