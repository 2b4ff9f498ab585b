//go:build linux

package pgadvisory_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/faultproxy"
	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// The lease leader processes: the design source's pause, played with
// separate processes. TestLeasePausedLeaderProcess and its control start
// this test binary as TestLeaseLeaderChildProcess, a lease leader that
// writes to a table with its term every 50ms, and stop it with SIGSTOP
// for longer than the ttl while the test's own Locker takes over;
// TestLeaseUnrenewedLeaderProcess blackholes the child's renewals instead.
// Linux only: the tests stop processes and read their state in /proc.

// Environment of a lease leader child process.
const (
	leaseChildURL  = "LOCKGEN_LEASE_CHILD_URL"
	leaseChildSpec = "LOCKGEN_LEASE_CHILD_SPEC" // driver,lockID,ttl,table,application_name,proxy
)

// leaseProcessTTL is the ttl of the child's lease. Its holder stops a
// tenth of it (200ms) before its deadline: the margin of the deadline
// bound measured by TestLeaseUnrenewedLeaderProcess.
const leaseProcessTTL = 2 * time.Second

// leaseAnswerDelay is how long the fault proxy of a lease leader child
// holds each answer of the server once the child leads: a slow link, on
// which a deadline counted from a renewal's answer instead of from its
// sending would come 300ms later, past the holder's margin of ttl/10
// (200ms), and so past the lease's expiry on the database. (A renewal,
// with a connection's ping or its first preparation, takes two round
// trips: 600ms, well within the ttl/3 between renewals.)
const leaseAnswerDelay = 300 * time.Millisecond

// leaseChildSpecOf is what a lease leader child does: lead lockID with
// a lease of ttl on driver, its connections named app, writing to table;
// with proxy, its Locker's pool (taking and renewing the lease) goes
// through a fault proxy of its own, which delays the server's answers by
// leaseAnswerDelay once it leads, its writes through a direct pool.
type leaseChildSpecOf struct {
	driver frontdoor.Driver
	lockID int64
	ttl    time.Duration
	table  string
	app    string
	proxy  bool
}

func (s leaseChildSpecOf) String() string {
	return fmt.Sprintf("%s,%d,%v,%s,%s,%t", s.driver, s.lockID, s.ttl, s.table, s.app, s.proxy)
}

func parseLeaseChildSpec(t *testing.T, text string) leaseChildSpecOf {
	f := strings.Split(text, ",")
	require.Len(t, f, 6, text)
	s := leaseChildSpecOf{driver: frontdoor.Driver(f[0]), table: f[3], app: f[4]}
	var err error
	s.lockID, err = strconv.ParseInt(f[1], 10, 64)
	require.NoError(t, err)
	s.ttl, err = time.ParseDuration(f[2])
	require.NoError(t, err)
	s.proxy, err = strconv.ParseBool(f[5])
	require.NoError(t, err)
	return s
}

// TestLeaseLeaderChildProcess is the lease leader of the lease process
// tests. It leads with WithLease and prints "term T"; then fn inserts a row
// (balance i, fencing_token T) into the table every 50ms with RunFenced and
// term T, on and on, also once its context is canceled (a leader that acts
// on after it lost its lease, as a paused one does), printing "write i ok",
// "write i stale" (ErrStaleToken) or "write i error: ...". When fn's
// context ends it prints "lost L LEFT AFTER": L whether the cause is
// ErrLockLost; with a proxy, LEFT is how long before the bound of its own
// deadline (ttl after the last bytes its Locker's pool sent through the
// proxy) and AFTER how long after the blackhole began, on this process's
// monotonic clock, in nanoseconds. On the stdin line "blackhole" the proxy
// blackholes as the answer of the next renewal (not the first) passes,
// and the child prints "blackholed". When stdin ends, fn returns, and the
// process prints "returned L" (Lead's error is of kind ErrLockLost) and
// exits. Run by itself it does nothing.
func TestLeaseLeaderChildProcess(t *testing.T) {
	url := os.Getenv(leaseChildURL)
	if url == "" {
		t.Skip("the leader process of the lease process tests")
	}
	spec := parseLeaseChildSpec(t, os.Getenv(leaseChildSpec))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	named := frontdoor.Settings(map[string]string{"application_name": spec.app})
	writes := frontdoor.Open(t, spec.driver, frontdoor.URL(url), frontdoor.MaxConns(2), named)
	leader := writes
	var px *faultproxy.Proxy
	var sentMu sync.Mutex
	var lastSent, blackholed time.Time // through the proxy; when the blackhole began
	var slow atomic.Bool               // the proxy delays the server's answers
	var armed atomic.Bool              // the proxy blackholes after the next answer
	if spec.proxy {
		cfg, err := pgx.ParseConfig(url)
		require.NoError(t, err)
		px = faultproxy.New(t, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
		// The hook sees what the proxy forwards (nothing while it blackholes).
		px.OnClientWrite(func([]byte) faultproxy.Action {
			sentMu.Lock()
			lastSent = time.Now()
			sentMu.Unlock()
			return faultproxy.Forward
		})
		var answerMu sync.Mutex
		var answerFirst byte // the first message type of the answer being passed
		var executed int     // answers of an execution passed while slow (renewals)
		px.OnServerWrite(func(p []byte) faultproxy.Action {
			if !slow.Load() {
				return faultproxy.Forward
			}
			time.Sleep(leaseAnswerDelay)
			// Blackhole, when asked to, as the answer of a renewal passes:
			// it still reaches the client, so the last bytes forwarded are
			// the request of a renewal that succeeded. Not at the first
			// renewal's: a connection's first renewal prepares its statement
			// first, one more round trip since the renewal was sent.
			answerMu.Lock()
			defer answerMu.Unlock()
			if answerFirst == 0 {
				answerFirst = p[0]
			}
			n := len(p)
			if n < 6 || string(p[n-6:n-1]) != "Z\x00\x00\x00\x05" { // the answer goes on: no ReadyForQuery yet
				return faultproxy.Forward
			}
			first := answerFirst
			answerFirst = 0
			if first != '2' { // not BindComplete: not an execution's answer
				return faultproxy.Forward
			}
			executed++
			if executed > 1 && armed.CompareAndSwap(true, false) {
				px.Blackhole(true)
				sentMu.Lock()
				blackholed = time.Now()
				sentMu.Unlock()
				say("blackholed")
			}
			return faultproxy.Forward
		})
		leader = frontdoor.Open(t, spec.driver, frontdoor.URL(url), frontdoor.Configure(px.Route), frontdoor.MaxConns(2), named).
			WithWrites(writes)
		defer px.Blackhole(false) // let the pool's connections end
	}

	stop := make(chan struct{})
	go func() {
		defer close(stop)
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if sc.Text() == "blackhole" {
				armed.Store(true)
			}
		}
	}()

	err := leader.Lead(ctx, pgadvisory.ID(spec.lockID), func(fctx context.Context, term int64) error {
		say("term %d", term)
		slow.Store(true)
		lostReported := make(chan struct{})
		go func() {
			defer close(lostReported)
			<-fctx.Done()
			at := time.Now()
			lost := errors.Is(context.Cause(fctx), pgadvisory.ErrLockLost)
			sentMu.Lock()
			defer sentMu.Unlock()
			var left, after time.Duration
			if px != nil {
				left = lastSent.Add(spec.ttl).Sub(at)
				after = at.Sub(blackholed)
				if blackholed.IsZero() {
					after = -1
				}
			}
			say("lost %t %d %d", lost, left, after)
		}()
		defer func() { <-lostReported }()
		for i := 1; ; i++ {
			wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
			err := leader.RunFenced(wctx, term, func(tx frontdoor.Tx) error {
				return tx.Exec(wctx, `INSERT INTO `+spec.table+` (balance, fencing_token) VALUES ($1, $2)`, i, term)
			})
			wcancel()
			switch {
			case err == nil:
				say("write %d ok", i)
			case errors.Is(err, pgadvisory.ErrStaleToken):
				say("write %d stale", i)
			default:
				say("write %d error: %v", i, err)
			}
			select {
			case <-stop:
				return nil
			case <-time.After(50 * time.Millisecond):
			}
		}
	}, pgadvisory.WithLease(spec.ttl))
	say("returned %t", errors.Is(err, pgadvisory.ErrLockLost))
}

// leaseChild is a running lease leader child process and what it printed.
type leaseChild struct {
	*childProcess
	spec leaseChildSpecOf
	seen []string
}

// startLeaseChild starts a lease leader child process with spec.
func startLeaseChild(t *testing.T, spec leaseChildSpecOf) *leaseChild {
	t.Helper()
	return &leaseChild{spec: spec, childProcess: startChild(t, "TestLeaseLeaderChildProcess",
		leaseChildURL+"="+testdb.URL(t), leaseChildSpec+"="+spec.String())}
}

// find returns the first line the child printed, so far or within 60s,
// for which match is true.
func (c *leaseChild) find(t *testing.T, what string, match func(string) bool) string {
	t.Helper()
	for i := 0; ; i++ {
		if i == len(c.seen) {
			select {
			case l, ok := <-c.lines:
				if !ok {
					t.Fatalf("the leader process ended before %s; it printed %q", what, c.seen)
				}
				c.seen = append(c.seen, l)
			case <-time.After(60 * time.Second):
				t.Fatalf("the leader process did not print %s; it printed %q", what, c.seen)
			}
		}
		if match(c.seen[i]) {
			return c.seen[i]
		}
	}
}

// term is the term the child printed when it began leading.
func (c *leaseChild) term(t *testing.T) int64 {
	t.Helper()
	var term int64
	_, err := fmt.Sscanf(c.find(t, "its term", func(l string) bool { return strings.HasPrefix(l, "term ") }), "term %d", &term)
	require.NoError(t, err)
	return term
}

// write is the outcome the child printed for its write i: "ok", "stale"
// or "error: ...".
func (c *leaseChild) write(t *testing.T, i int) string {
	t.Helper()
	prefix := fmt.Sprintf("write %d ", i)
	return strings.TrimPrefix(c.find(t, "the outcome of its write "+strconv.Itoa(i), func(l string) bool {
		return strings.HasPrefix(l, prefix)
	}), prefix)
}

// writes is every write outcome the child printed, by write number.
func (c *leaseChild) writes() map[int]string {
	got := map[int]string{}
	for _, l := range c.seen {
		var i int
		if _, err := fmt.Sscanf(l, "write %d ", &i); err == nil {
			got[i] = strings.TrimPrefix(l, fmt.Sprintf("write %d ", i))
		}
	}
	return got
}

// lost is what the child printed when fn's context ended: whether the
// cause was ErrLockLost, and (with a proxy) how long before the bound of
// its deadline and after the blackhole began.
func (c *leaseChild) lost(t *testing.T) (lockLost bool, left, after time.Duration) {
	t.Helper()
	_, err := fmt.Sscanf(c.find(t, "the end of its leadership", func(l string) bool { return strings.HasPrefix(l, "lost ") }),
		"lost %t %d %d", &lockLost, &left, &after)
	require.NoError(t, err)
	return lockLost, left, after
}

// finish ends the child's fn (its stdin ends) and returns whether its Lead
// returned an error of kind ErrLockLost.
func (c *leaseChild) finish(t *testing.T) bool {
	t.Helper()
	require.NoError(t, c.in.Close())
	var lost bool
	_, err := fmt.Sscanf(c.find(t, "its Lead's return", func(l string) bool { return strings.HasPrefix(l, "returned ") }), "returned %t", &lost)
	require.NoError(t, err)
	require.NoError(t, c.cmd.Wait(), "the leader process exits cleanly")
	return lost
}

// stopOutsideTx stops the child with SIGSTOP at a moment when none of its
// backends is inside a transaction (a write of its stopped in its
// transaction would hold the fence row, and so the next election, for as
// long as it is stopped): it stops it, waits until the kernel has stopped
// it and its backends are idle, or resumes it and tries again after its
// next write.
func (c *leaseChild) stopOutsideTx(t *testing.T, admin *sql.DB) {
	t.Helper()
	for try := 1; ; try++ {
		require.LessOrEqual(t, try, 20, "the leader process was inside a transaction at every stop")
		written := len(c.writes())
		require.NoError(t, c.cmd.Process.Signal(syscall.SIGSTOP))
		require.Eventually(t, func() bool {
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.cmd.Process.Pid))
			if err != nil {
				return false
			}
			s := string(stat) // pid (comm) state ...
			return strings.HasPrefix(s[strings.LastIndex(s, ")")+1:], " T")
		}, 10*time.Second, time.Millisecond, "the kernel stops the leader process")
		deadline := time.Now().Add(time.Second)
		for time.Now().Before(deadline) {
			var busy, conns int
			require.NoError(t, admin.QueryRow(`SELECT count(*) FILTER (WHERE state <> 'idle'), count(*)
				FROM pg_catalog.pg_stat_activity WHERE application_name = $1`, c.spec.app).Scan(&busy, &conns))
			require.NotZero(t, conns, "the leader process's backends are named %s", c.spec.app)
			if busy == 0 {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("stop %d: the leader process was inside a transaction; resumed", try)
		require.NoError(t, c.cmd.Process.Signal(syscall.SIGCONT))
		c.write(t, written+1)
	}
}

// leaseWritesTable creates schema.writes, fenced by lockID with policy
// ("" for the unfenced control), whose id counts the inserts in the order
// they were made.
func leaseWritesTable(t *testing.T, admin *sql.DB, lockID int64, policy string) string {
	t.Helper()
	schema := testdb.Schema(t)
	tbl := fencing.Table(t, admin, schema, "writes", lockID, policy)
	_, err := admin.Exec(`CREATE SEQUENCE ` + schema + `.writes_n;
		ALTER TABLE ` + tbl + ` ALTER COLUMN id SET DEFAULT nextval('` + schema + `.writes_n')`)
	require.NoError(t, err)
	return tbl
}

// lateOldTermWrites counts the rows of tbl written with term old after the
// first row of term new: the overlapping writes of a deposed leader.
func lateOldTermWrites(t *testing.T, admin *sql.DB, tbl string, old, new int64) int {
	t.Helper()
	var n int
	require.NoError(t, admin.QueryRow(`SELECT count(*) FROM `+tbl+` WHERE fencing_token = $1
		AND id > (SELECT min(id) FROM `+tbl+` WHERE fencing_token = $2)`, old, new).Scan(&n))
	return n
}

// lastWrite is the number of the child's last write of term that landed
// in tbl.
func lastWrite(t *testing.T, admin *sql.DB, tbl string, term int64) int {
	t.Helper()
	var i int
	require.NoError(t, admin.QueryRow(`SELECT COALESCE(max(balance), 0) FROM `+tbl+` WHERE fencing_token = $1`, term).Scan(&i))
	return i
}

// otherDriver is the driver that is not drv.
func otherDriver(drv frontdoor.Driver) frontdoor.Driver {
	if drv == frontdoor.Pgx {
		return frontdoor.SQL
	}
	return frontdoor.Pgx
}

// errResigned ends the new leader's campaign.
var errResigned = errors.New("the new leader resigned")

// takeOver campaigns for lockID's lease on a door of drv until it leads,
// writes one row to tbl with its term, and returns the term and a
// function that makes it resign and returns its campaign's error.
func takeOver(t *testing.T, drv frontdoor.Driver, lockID int64, tbl string) (term int64, resign func() error) {
	t.Helper()
	ctx := testdb.Context(t)
	b := frontdoor.Open(t, drv, frontdoor.MaxConns(4))
	leads := make(chan int64, 1)
	wrote := make(chan error, 1)
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- b.Campaign(ctx, pgadvisory.ID(lockID), func(fctx context.Context, term int64) error {
			leads <- term
			wrote <- b.RunFenced(fctx, term, func(tx frontdoor.Tx) error {
				return tx.Exec(fctx, `INSERT INTO `+tbl+` (balance, fencing_token) VALUES (0, $1)`, term)
			})
			select {
			case <-release:
				return errResigned
			case <-fctx.Done():
				return context.Cause(fctx)
			}
		}, pgadvisory.WithLease(leaseProcessTTL))
	}()
	term = frontdoor.Await(t, leads, "the new leader")
	require.NoError(t, frontdoor.Await(t, wrote, "the new leader's write"))
	var once sync.Once
	var err error
	resign = func() error {
		once.Do(func() {
			close(release)
			err = frontdoor.Await(t, done, "the new leader's campaign")
		})
		return err
	}
	t.Cleanup(func() { _ = resign() })
	return term, resign
}

// leasePauseStory plays the design source's pause with a lease leader
// process of drv writing to a table fenced by its lock with policy ("" for
// the unfenced control): the leader, stopped outside a transaction for
// longer than its ttl, is replaced by a Locker of the other driver, which
// writes once with its new term; then the old leader resumes and writes on
// with its old term. It returns the old leader's first write after it
// resumed ("ok", "stale"...), the old leader, both terms and the table.
func leasePauseStory(t *testing.T, admin *sql.DB, drv frontdoor.Driver, policy string) (first string, a *leaseChild, term1, term2 int64, tbl string) {
	key := testdb.Key(t)
	tbl = leaseWritesTable(t, admin, key, policy)
	a = startLeaseChild(t, leaseChildSpecOf{driver: drv, lockID: key, ttl: leaseProcessTTL, table: tbl,
		app: fmt.Sprintf("lease-leader-%d", key)})
	term1 = a.term(t)
	require.Equal(t, "ok", a.write(t, 3), "the leader's writes land")

	a.stopOutsideTx(t, admin)
	stopped := time.Now()
	t.Cleanup(func() { _ = a.cmd.Process.Signal(syscall.SIGCONT) })
	term2, resign := takeOver(t, otherDriver(drv), key, tbl)
	t.Logf("%s: the new leader (term %d, after term %d) took over %v after the stop", drv, term2, term1, time.Since(stopped))
	require.Greater(t, term2, term1)
	// Every write of the old leader that landed did before it was stopped.
	last := lastWrite(t, admin, tbl, term1)
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGCONT))
	first = a.write(t, last+1)

	lockLost, _, _ := a.lost(t)
	require.True(t, lockLost, "the resumed leader's context is canceled with ErrLockLost")
	require.True(t, a.finish(t), "the resumed leader's Lead returns ErrLockLost")
	require.ErrorIs(t, resign(), errResigned, "the new leader kept its lease")
	return first, a, term1, term2, tbl
}

// TestLeasePausedLeaderProcess: the design source's pause. A lease leader
// process (ttl 2s) writes with its term to a fenced table every 50ms; it
// is stopped with SIGSTOP outside a transaction for longer than its ttl,
// a Locker of the other driver takes the lease with a new term and
// writes, and the old leader is resumed (SIGCONT): its next fenced write
// fails with ErrStaleToken, so do all its writes after it, its context is
// canceled with ErrLockLost, and no write of its term lands after the new
// leader's first one. TestLeasePausedLeaderProcessControl is the same
// story on an unfenced table.
func TestLeasePausedLeaderProcess(t *testing.T) {
	admin := migrated.DB(t)
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		first, a, term1, term2, tbl := leasePauseStory(t, admin, drv, "strict")
		require.Equal(t, "stale", first, "the resumed leader's next fenced write fails with ErrStaleToken")
		last := lastWrite(t, admin, tbl, term1)
		for i, w := range a.writes() {
			if i > last {
				require.Equal(t, "stale", w, "the resumed leader's write %d", i)
			} else {
				require.Equal(t, "ok", w, "the leader's write %d before the stop", i)
			}
		}
		require.Zero(t, lateOldTermWrites(t, admin, tbl, term1, term2), "no write of the old term after the new leader's")
	})
}

// TestLeasePausedLeaderProcessControl: the pause of
// TestLeasePausedLeaderProcess on a table that is not fenced. The resumed
// leader's next write lands after the new leader's, and the check that
// finds no such write on the fenced table finds it here.
func TestLeasePausedLeaderProcessControl(t *testing.T) {
	admin := migrated.DB(t)
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		first, _, term1, term2, tbl := leasePauseStory(t, admin, drv, "")
		require.Equal(t, "ok", first, "control: the resumed leader's overlapping write lands")
		require.NotZero(t, lateOldTermWrites(t, admin, tbl, term1, term2), "control: the check sees the old term's write after the new leader's")
	})
}

// TestLeaseUnrenewedLeaderProcess: a lease leader process that is not
// paused but whose renewals stop getting through (its Locker's pool goes
// through a fault proxy that answers 300ms late and then blackholes; its
// writes go through a direct pool) has fn's context canceled with
// ErrLockLost before its own deadline, ttl after the last bytes its
// Locker's pool sent (a bound of ttl after its last successful renewal was
// sent; counted from that renewal's answer, it would come 100ms after it), and
// after the blackhole began, both on its own monotonic clock. It writes on
// with its old term: once a Locker of the other driver took the lease,
// after its expiry on the database, and wrote with its new term, every
// later write of the old leader fails with ErrStaleToken and none of its
// term lands after the new leader's first one.
func TestLeaseUnrenewedLeaderProcess(t *testing.T) {
	admin := migrated.DB(t)
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		key := testdb.Key(t)
		tbl := leaseWritesTable(t, admin, key, "strict")
		a := startLeaseChild(t, leaseChildSpecOf{driver: drv, lockID: key, ttl: leaseProcessTTL, table: tbl,
			app: fmt.Sprintf("lease-leader-%d", key), proxy: true})
		term1 := a.term(t)
		require.Equal(t, "ok", a.write(t, 3), "the leader's writes land")
		// A renewal or two went through: the deadline comes from a renewal,
		// not from the acquisition.
		time.Sleep(leaseProcessTTL / 2)
		_, err := fmt.Fprintln(a.in, "blackhole")
		require.NoError(t, err)
		a.find(t, "the blackhole", func(l string) bool { return l == "blackholed" })

		lockLost, left, after := a.lost(t)
		t.Logf("%s: canceled %v after the blackhole began, %v before the bound of its deadline", drv, after, left)
		require.True(t, lockLost, "fn's context is canceled with ErrLockLost")
		require.Positive(t, left, "canceled before its own deadline")
		require.Positive(t, after, "canceled after the blackhole began, not before")

		term2, resign := takeOver(t, otherDriver(drv), key, tbl)
		require.Greater(t, term2, term1)
		// No write of the old term lands once the new term is published.
		last := lastWrite(t, admin, tbl, term1)
		require.Equal(t, "stale", a.write(t, last+1), "the old leader's next fenced write fails with ErrStaleToken")
		require.True(t, a.finish(t), "the old leader's Lead returns ErrLockLost")
		for i, w := range a.writes() {
			if i > last {
				require.Equal(t, "stale", w, "the old leader's write %d", i)
			}
		}
		require.Zero(t, lateOldTermWrites(t, admin, tbl, term1, term2), "no write of the old term after the new leader's")
		require.ErrorIs(t, resign(), errResigned, "the new leader kept its lease")
	})
}
