package pgadvisory_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// orderInterval is the check interval of the Lockers of the order tests:
// a waiter's row lives 3/4 of it after each try, and a waiter whose tries
// a loaded machine delays longer than that counts as gone. 3s keeps the
// tests about order from depending on the machine's load.
var orderInterval = pgadvisory.WithDefaultCheckInterval(3 * time.Second)

// queueDoor is a front door of driver on a pool of at most conns
// connections that name themselves app in pg_stat_activity.
func queueDoor(t *testing.T, driver frontdoor.Driver, app string, conns int32, opts ...pgadvisory.LockerOption) frontdoor.Door {
	t.Helper()
	pool := testdb.PoolConfig(t, func(c *pgxpool.Config) {
		c.MaxConns = conns
		c.ConnConfig.RuntimeParams["application_name"] = app
	})
	if driver == frontdoor.Pgx {
		return frontdoor.OnPool(pool, opts...)
	}
	db := testdb.OpenDB(t, pool)
	db.SetMaxOpenConns(int(conns))
	return frontdoor.OnDB(db, opts...)
}

// serverQueue makes door's waiting calls wait in the server's lock queue,
// as on a database without migration 00011, and returns it.
func serverQueue(door frontdoor.Door) frontdoor.Door {
	if l := door.PgxLocker(); l != nil {
		pgadvisory.ServerQueueForTest(l)
	} else {
		pgadvisory.ServerQueueForTest(door.SQLLocker())
	}
	return door
}

// arrivalOrder is the order 0, 1, …, n-1 of n waiters started one after
// the other.
func arrivalOrder(n int) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	return order
}

// queueRows counts the rows of lockID's queue.
func queueRows(t *testing.T, admin *sql.DB, lockID int64) int {
	t.Helper()
	var n int
	require.NoError(t, admin.QueryRow(`SELECT count(*) FROM pgadvisory.waiter WHERE lock_id = $1`, lockID).Scan(&n))
	return n
}

// holdSession holds lockID at session level on a connection of admin's
// until the returned release is called.
func holdSession(t *testing.T, admin *sql.DB, lockID int64) (release func()) {
	t.Helper()
	ctx := testdb.Context(t)
	conn, err := admin.Conn(ctx)
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, lockID)
	require.NoError(t, err)
	var once sync.Once
	release = func() {
		once.Do(func() {
			if _, err := conn.ExecContext(context.Background(), `SELECT pg_advisory_unlock($1)`, lockID); err != nil {
				t.Errorf("unlock %d: %v", lockID, err) // release may run on another goroutine
			}
			_ = conn.Close()
		})
	}
	t.Cleanup(release)
	return release
}

// queueWaiters starts n waiting RunExclusive calls (WithWait(0) and opts)
// for lockID on door, one at a time, each once the previous one is queued
// in pgadvisory.waiter. order is the order in which their fns ran so far
// (by the index they were started with); done gets each call's error.
func queueWaiters(t *testing.T, ctx context.Context, door frontdoor.Door, admin *sql.DB, lockID int64, n int, opts ...pgadvisory.Option) (order func() []int, done <-chan error) {
	order, _, done = queueFencedWaiters(t, ctx, door, admin, lockID, n, opts...)
	return order, done
}

// queueFencedWaiters is queueWaiters that also returns the fencing
// tokens the fns received, in the order they ran (0 for an unfenced call),
// each checked against the token published when its fn ran.
func queueFencedWaiters(t *testing.T, ctx context.Context, door frontdoor.Door, admin *sql.DB, lockID int64, n int, opts ...pgadvisory.Option) (order func() []int, tokens func() []int64, done <-chan error) {
	t.Helper()
	var mu sync.Mutex
	var ran []int
	var toks []int64
	errs := make(chan error, n)
	opts = append([]pgadvisory.Option{pgadvisory.WithWait(0)}, opts...)
	for i := range n {
		go func() {
			errs <- door.RunExclusive(ctx, lockID, func(tx frontdoor.Tx) error {
				tok, fenced := tx.FencingToken()
				if fenced {
					var published int64
					if err := admin.QueryRowContext(ctx, `SELECT token FROM pgadvisory.fence WHERE lock_id = $1`, lockID).Scan(&published); err != nil {
						return err
					}
					if published != tok {
						return fmt.Errorf("waiter %d: fn runs with token %d, %d is published", i, tok, published)
					}
				}
				mu.Lock()
				ran = append(ran, i)
				toks = append(toks, tok)
				mu.Unlock()
				return nil
			}, opts...)
		}()
		require.Eventually(t, func() bool { return queueRows(t, admin, lockID) == i+1 }, 30*time.Second, 2*time.Millisecond, "waiter %d queued", i)
	}
	return func() []int { mu.Lock(); defer mu.Unlock(); return slices.Clone(ran) },
		func() []int64 { mu.Lock(); defer mu.Unlock(); return slices.Clone(toks) }, errs
}

// TestWaitHoldsNoConnection: 20 calls wait (WithWait(0)) for a lock held
// elsewhere on a Locker whose pool has 4 connections. All 20 are queued in
// pgadvisory.waiter while the server shows at most 5 connections of the
// Locker (the pool's 4 and the listening one, which is there) and at most
// one backend waiting for the lock, the head's (the holder, a session
// lock, sends no NOTIFY, so the head waits for it on the server); in the
// server's queue at most 4 could wait. They were started
// one at a time, each once the previous one was queued: released, they
// run in that order, and the queue is empty afterwards. Fenced calls
// (WithFencing) too: each fn runs with the token published for the lock,
// and the tokens grow in the order the fns ran.
func TestWaitHoldsNoConnection(t *testing.T) {
	admin := migrated.DB(t)
	for _, driver := range frontdoor.Drivers {
		for _, fenced := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/fenced=%v", driver, fenced), func(t *testing.T) {
				testWaitHoldsNoConnection(t, admin, driver, fenced)
			})
		}
	}
}

func testWaitHoldsNoConnection(t *testing.T, admin *sql.DB, driver frontdoor.Driver, fenced bool) {
	ctx := testdb.Context(t)
	lockID := testdb.Key(t)
	app := fmt.Sprintf("waitq_%d", lockID)
	door := queueDoor(t, driver, app, 4, orderInterval)
	release := holdSession(t, admin, lockID)
	var opts []pgadvisory.Option
	if fenced {
		opts = append(opts, pgadvisory.WithFencing())
	}

	const waiters = 20
	order, tokens, done := queueFencedWaiters(t, ctx, door, admin, lockID, waiters, opts...)
	// Every waiter queued. The holder is a session lock, which
	// sends no NOTIFY: the head of the queue waits for it on the
	// server.
	most := requireQueuedConns(t, admin, app, 5)
	var listening int
	require.NoError(t, admin.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE application_name = $1 AND query = 'LISTEN pgadvisory_wait'`, app).Scan(&listening))
	require.Equal(t, 1, listening, "one connection of the Locker listens")
	require.Equal(t, waiters, queueRows(t, admin, lockID))
	t.Logf("%d calls queued; the Locker had at most %d connections on the server", waiters, most)

	release()
	for range waiters {
		require.NoError(t, frontdoor.Await(t, done, "a waiter"))
	}
	want := arrivalOrder(waiters)
	require.Equal(t, want, order(), "granted in arrival order")
	if fenced {
		toks := tokens()
		require.True(t, slices.IsSorted(toks) && len(slices.Compact(slices.Clone(toks))) == waiters && toks[0] > 0,
			"tokens grow in the order the fns ran: %v", toks)
	}
	require.Zero(t, queueRows(t, admin, lockID), "the queue is empty")
}

// TestWaitReadOnlyQueued: read-only waiting calls (WithReadOnly) wait in
// lockgen's queue too, holding no connection, in arrival order with
// read-write ones: 6 calls, every other one read-only, wait for a lock held
// elsewhere on a Locker whose pool has 4 connections; all 6 are queued
// while the server shows at most 5 connections of the Locker and at most one
// backend waiting for the lock (the head's). Released, they run in the
// order they joined; each read-only one runs in a read-only transaction
// (transaction_read_only is on, a write is refused with 25006), each
// read-write one (the control) in a read-write one.
func TestWaitReadOnlyQueued(t *testing.T) {
	admin := migrated.DB(t)
	errChecked := errors.New("read-only transaction checked")
	for _, driver := range frontdoor.Drivers {
		t.Run(string(driver), func(t *testing.T) {
			ctx := testdb.Context(t)
			lockID := testdb.Key(t)
			app := fmt.Sprintf("waitro_%d", lockID)
			door := queueDoor(t, driver, app, 4, orderInterval)
			release := holdSession(t, admin, lockID)

			const waiters = 6
			var mu sync.Mutex
			var ran []int
			done := make(chan error, waiters)
			for i := range waiters {
				readOnly := i%2 == 0
				opts := []pgadvisory.Option{pgadvisory.WithWait(0)}
				if readOnly {
					opts = append(opts, pgadvisory.WithReadOnly())
				}
				go func() {
					done <- door.RunExclusive(ctx, lockID, func(tx frontdoor.Tx) error {
						mu.Lock()
						ran = append(ran, i)
						mu.Unlock()
						var mode string
						if err := tx.QueryRow(ctx, `SHOW transaction_read_only`).Scan(&mode); err != nil {
							return err
						}
						if !readOnly {
							if mode != "off" {
								return fmt.Errorf("waiter %d (control): transaction_read_only is %q", i, mode)
							}
							return nil
						}
						if mode != "on" {
							return fmt.Errorf("waiter %d: transaction_read_only is %q in fn", i, mode)
						}
						err := tx.Exec(ctx, `CREATE TEMP TABLE ro_probe (a int)`)
						if pgadvisory.SQLState(err) != "25006" {
							return fmt.Errorf("waiter %d: a write in fn returned %v, not 25006", i, err)
						}
						return errChecked // the write aborted the transaction
					}, opts...)
				}()
				require.Eventually(t, func() bool { return queueRows(t, admin, lockID) == i+1 }, 30*time.Second, 2*time.Millisecond, "waiter %d queued", i)
			}
			requireQueuedConns(t, admin, app, 5)

			release()
			for i := range waiters {
				err := frontdoor.Await(t, done, "a waiter")
				if err != nil {
					require.ErrorIs(t, err, errChecked, "call %d to end", i)
				}
			}
			mu.Lock()
			require.Equal(t, []int{0, 1, 2, 3, 4, 5}, ran, "granted in arrival order")
			mu.Unlock()
			require.Zero(t, queueRows(t, admin, lockID), "the queue is empty")
		})
	}
}

// TestWaitDefaultReadOnlySession: on connections whose transactions are
// read-only by default (default_transaction_read_only = on, as a reporting
// role may have), lockgen's queue cannot be written and lockgen does not
// override the setting: a waiting call, read-only or not, waits in the
// server's queue instead, as before the queue existed, and is granted when
// the holder releases. Its fn's transaction stays read-only.
func TestWaitDefaultReadOnlySession(t *testing.T) {
	admin := migrated.DB(t)
	for _, driver := range frontdoor.Drivers {
		for _, readOnly := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/WithReadOnly=%v", driver, readOnly), func(t *testing.T) {
				ctx := testdb.Context(t)
				lockID := testdb.Key(t)
				app := fmt.Sprintf("waitdro_%d", lockID)
				pool := testdb.PoolConfig(t, func(c *pgxpool.Config) {
					c.MaxConns = 4
					c.ConnConfig.RuntimeParams["application_name"] = app
					c.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
				})
				door := frontdoor.OnPool(pool)
				if driver == frontdoor.SQL {
					door = frontdoor.OnDB(testdb.OpenDB(t, pool))
				}
				release := holdSession(t, admin, lockID)
				opts := []pgadvisory.Option{pgadvisory.WithWait(0)}
				if readOnly {
					opts = append(opts, pgadvisory.WithReadOnly())
				}
				done := make(chan error, 1)
				go func() {
					done <- door.RunExclusive(ctx, lockID, func(tx frontdoor.Tx) error {
						var mode string
						if err := tx.QueryRow(ctx, `SHOW transaction_read_only`).Scan(&mode); err != nil {
							return err
						}
						if mode != "on" {
							return fmt.Errorf("transaction_read_only is %q in fn", mode)
						}
						return nil
					}, opts...)
				}()
				require.Eventually(t, func() bool {
					var waiting int
					require.NoError(t, admin.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
						WHERE application_name = $1 AND wait_event = 'advisory'`, app).Scan(&waiting))
					return waiting == 1
				}, 30*time.Second, 2*time.Millisecond, "the call waits in the server's queue")
				require.Zero(t, queueRows(t, admin, lockID), "nothing in lockgen's queue")
				release()
				require.NoError(t, frontdoor.Await(t, done, "the waiting call"))
			})
		}
	}
}

// requireQueuedConns samples, 10 times 20ms apart, the connections of the
// Locker whose connections name themselves app while its calls wait: at
// most one waits for an advisory lock on the server (the head of a queue)
// and at most most are open. It returns the most seen open.
func requireQueuedConns(t *testing.T, admin *sql.DB, app string, most int) int {
	t.Helper()
	seen := 0
	for range 10 {
		var conns, waiting int
		require.NoError(t, admin.QueryRow(`SELECT count(*), count(*) FILTER (WHERE wait_event = 'advisory')
			FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&conns, &waiting))
		require.LessOrEqual(t, waiting, 1, "only the head of the queue waits in the server's queue")
		seen = max(seen, conns)
		time.Sleep(20 * time.Millisecond)
	}
	require.LessOrEqual(t, seen, most, "the Locker's connections while its calls wait")
	return seen
}

// queueModes are the kinds of waiting calls the queue tests run: plain
// (exclusive), fenced (WithFencing) and shared (WithShared).
var queueModes = []string{"plain", "fenced", "shared"}

// inMode is opts with the option of mode (see queueModes).
func inMode(mode string, opts ...pgadvisory.Option) []pgadvisory.Option {
	switch mode {
	case "fenced":
		return append(opts, pgadvisory.WithFencing())
	case "shared":
		return append(opts, pgadvisory.WithShared())
	}
	return opts
}

// TestWaitCanceledLeavesNothing: a queued call whose ctx ends returns
// ctx's error and removes its row; one whose WithWait timeout passes
// returns ErrLockTimeout and removes its row; one granted whose fn fails
// (its lock transaction, which removed the row, rolls back) removes it
// too. The lock's queue is empty after each. Fenced calls (WithFencing)
// and shared ones (WithShared) too, and a fenced waiter that never got the
// lock published nothing.
func TestWaitCanceledLeavesNothing(t *testing.T) {
	admin := migrated.DB(t)
	for _, mode := range queueModes {
		t.Run(mode, func(t *testing.T) {
			frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
				testWaitCanceledLeavesNothing(t, admin, door, mode)
			})
		})
	}
}

func testWaitCanceledLeavesNothing(t *testing.T, admin *sql.DB, door frontdoor.Door, mode string) {
	fenced := mode == "fenced"
	ctx := testdb.Context(t)
	lockID := testdb.Key(t)
	release := holdSession(t, admin, lockID)
	fn := func(frontdoor.Tx) error { return errors.New("fn ran") }
	with := func(opts ...pgadvisory.Option) []pgadvisory.Option { return inMode(mode, opts...) }

	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- door.RunExclusive(cctx, lockID, fn, with(pgadvisory.WithWait(0))...) }()
	require.Eventually(t, func() bool { return queueRows(t, admin, lockID) == 1 }, 30*time.Second, 2*time.Millisecond, "queued")
	cancel()
	err := frontdoor.Await(t, done, "the canceled waiter")
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, queueRows(t, admin, lockID), "a canceled waiter leaves no row")

	err = door.RunExclusive(ctx, lockID, fn, with(pgadvisory.WithWait(300*time.Millisecond))...)
	require.ErrorIs(t, err, pgadvisory.ErrLockTimeout)
	var pe *pgadvisory.Error
	require.True(t, errors.As(err, &pe))
	require.Equal(t, pgadvisory.OpLock, pe.Op)
	require.Zero(t, queueRows(t, admin, lockID), "a timed-out waiter leaves no row")
	if fenced {
		require.Zero(t, fencing.Published(t, admin, lockID), "a waiter that never got the lock publishes nothing")
	}

	boom := errors.New("boom")
	go func() {
		done <- door.RunExclusive(ctx, lockID, func(frontdoor.Tx) error { return boom }, with(pgadvisory.WithWait(0))...)
	}()
	require.Eventually(t, func() bool { return queueRows(t, admin, lockID) == 1 }, 30*time.Second, 2*time.Millisecond, "queued")
	release()
	require.ErrorIs(t, frontdoor.Await(t, done, "the failing waiter"), boom)
	require.Zero(t, queueRows(t, admin, lockID), "a granted waiter whose fn failed leaves no row")
	if fenced {
		require.NotZero(t, fencing.Published(t, admin, lockID), "the granted waiter published its token before fn")
	}
}

// The waiting processes: TestWaitOrderProcesses and TestWaitKilledWaiter
// start this test binary as TestWaitChildProcess, which starts a waiting
// RunExclusive for each line "go J" on its stdin, each writing J to
// wait_order in its lock transaction, and prints "ran J" or
// "failed J: error" as each returns.

// Environment of a waiting child process.
const (
	waitChildURL  = "LOCKGEN_WAIT_CHILD_URL"
	waitChildSpec = "LOCKGEN_WAIT_CHILD_SPEC" // driver,lockID,check interval,fenced
)

// TestWaitChildProcess is a child of the waiting process tests. Run by
// itself it does nothing.
func TestWaitChildProcess(t *testing.T) {
	url := os.Getenv(waitChildURL)
	if url == "" {
		t.Skip("a child process of TestWaitOrderProcesses and TestWaitKilledWaiter")
	}
	spec := strings.Split(os.Getenv(waitChildSpec), ",")
	require.Len(t, spec, 4)
	opts := []pgadvisory.Option{pgadvisory.WithWait(0)}
	if spec[3] == "fenced" {
		opts = append(opts, pgadvisory.WithFencing())
	}
	driver := spec[0]
	lockID, err := strconv.ParseInt(spec[1], 10, 64)
	require.NoError(t, err)
	interval, err := time.ParseDuration(spec[2])
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	var door frontdoor.Door
	if driver == "pgx" {
		door = frontdoor.OnPool(pool, pgadvisory.WithDefaultCheckInterval(interval))
	} else {
		db := stdlib.OpenDBFromPool(pool)
		defer db.Close()
		door = frontdoor.OnDB(db, pgadvisory.WithDefaultCheckInterval(interval))
	}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	var wg sync.WaitGroup
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var j int
		if _, err := fmt.Sscanf(sc.Text(), "go %d", &j); err != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := door.RunExclusive(ctx, lockID, func(tx frontdoor.Tx) error {
				tok, _ := tx.FencingToken()
				return tx.Exec(ctx, `INSERT INTO wait_order (lock_id, j, token) VALUES ($1, $2, $3)`, lockID, j, tok)
			}, opts...)
			if err != nil {
				say("failed %d: %v", j, err)
				return
			}
			say("ran %d", j)
		}()
	}
	wg.Wait()
}

// waitChild is a running child process: its stdin and its stdout lines
// (its "ran" and "failed" lines among them).
type waitChild struct{ *childProcess }

// startWaitChild starts a waiting child process on driver and lockID,
// whose Locker has the check interval given, and whose calls are fenced
// (WithFencing) when fenced is true.
func startWaitChild(t *testing.T, driver string, lockID int64, interval time.Duration, fenced bool) *waitChild {
	t.Helper()
	mode := "plain"
	if fenced {
		mode = "fenced"
	}
	return &waitChild{startChild(t, "TestWaitChildProcess",
		waitChildURL+"="+testdb.URL(t), fmt.Sprintf("%s=%s,%d,%v,%s", waitChildSpec, driver, lockID, interval, mode))}
}

// start makes the child start waiter j.
func (c *waitChild) start(t *testing.T, j int) {
	t.Helper()
	_, err := fmt.Fprintf(c.in, "go %d\n", j)
	require.NoError(t, err)
}

// waitOrderTable creates the table the children's fns write to.
func waitOrderTable(t *testing.T, admin *sql.DB) {
	_, err := admin.Exec(`CREATE TABLE IF NOT EXISTS wait_order (n bigserial PRIMARY KEY, lock_id bigint NOT NULL, j int NOT NULL, token bigint NOT NULL DEFAULT 0)`)
	require.NoError(t, err)
}

// grantTokens is the fencing tokens lockID's waiters ran with, in the
// order they ran (0 for unfenced calls).
func grantTokens(t *testing.T, admin *sql.DB, lockID int64) []int64 {
	rows, err := admin.Query(`SELECT token FROM wait_order WHERE lock_id = $1 ORDER BY n`, lockID)
	require.NoError(t, err)
	defer rows.Close()
	var toks []int64
	for rows.Next() {
		var tok int64
		require.NoError(t, rows.Scan(&tok))
		toks = append(toks, tok)
	}
	require.NoError(t, rows.Err())
	return toks
}

// grantOrder is the order in which lockID's waiters ran.
func grantOrder(t *testing.T, admin *sql.DB, lockID int64) []int {
	rows, err := admin.Query(`SELECT j FROM wait_order WHERE lock_id = $1 ORDER BY n`, lockID)
	require.NoError(t, err)
	defer rows.Close()
	var order []int
	for rows.Next() {
		var j int
		require.NoError(t, rows.Scan(&j))
		order = append(order, j)
	}
	require.NoError(t, rows.Err())
	return order
}

// TestWaitOrderProcesses: 10 waiters in 3 processes (pgx, database/sql,
// pgx), started one at a time across the processes (each once the previous
// one is queued) while a session of the test holds the lock: released,
// they run in the order they started waiting, each once, and the queue is
// empty afterwards. Fenced waiters too, whose tokens grow in that order.
func TestWaitOrderProcesses(t *testing.T) {
	admin := migrated.DB(t)
	waitOrderTable(t, admin)
	for _, fenced := range []bool{false, true} {
		t.Run(fmt.Sprintf("fenced=%v", fenced), func(t *testing.T) { testWaitOrderProcesses(t, admin, fenced) })
	}
}

func testWaitOrderProcesses(t *testing.T, admin *sql.DB, fenced bool) {
	lockID := testdb.Key(t)
	release := holdSession(t, admin, lockID)
	children := []*waitChild{startWaitChild(t, "pgx", lockID, 3*time.Second, fenced), startWaitChild(t, "sql", lockID, 3*time.Second, fenced),
		startWaitChild(t, "pgx", lockID, 3*time.Second, fenced)}
	const waiters = 10
	for j := range waiters {
		children[(j*7+j/3)%3].start(t, j) // an irregular spread over the processes
		require.Eventually(t, func() bool { return queueRows(t, admin, lockID) == j+1 }, 60*time.Second, 2*time.Millisecond, "waiter %d queued", j)
	}
	release()
	for _, c := range children {
		require.NoError(t, c.in.Close())
	}
	for _, c := range children {
		for l := range c.lines {
			if strings.HasPrefix(l, "failed ") {
				t.Error(l)
			}
		}
	}
	want := arrivalOrder(waiters)
	require.Equal(t, want, grantOrder(t, admin, lockID), "granted in arrival order across processes")
	if toks := grantTokens(t, admin, lockID); fenced {
		require.True(t, toks[0] > 0 && slices.IsSorted(toks) && len(slices.Compact(slices.Clone(toks))) == waiters,
			"tokens grow in the order the fns ran: %v", toks)
	}
	require.Zero(t, queueRows(t, admin, lockID))
}

// TestWaitKilledWaiter: the first of two waiters (a child process) is
// SIGKILLed while queued. Once the lock is released, the second waiter
// (this process) takes it within one check interval of the kill (the
// dead waiter's Locker's, 1s): its row expired and no longer blocks.
// The control: a live first waiter is granted first. Fenced waiters too.
func TestWaitKilledWaiter(t *testing.T) {
	admin := migrated.DB(t)
	waitOrderTable(t, admin)
	for _, fenced := range []bool{false, true} {
		for _, kill := range []bool{false, true} {
			t.Run(fmt.Sprintf("fenced=%v/kill=%v", fenced, kill), func(t *testing.T) {
				testWaitKilledWaiter(t, admin, fenced, kill)
			})
		}
	}
}

func testWaitKilledWaiter(t *testing.T, admin *sql.DB, fenced, kill bool) {
	ctx := testdb.Context(t)
	lockID := testdb.Key(t)
	release := holdSession(t, admin, lockID)
	child := startWaitChild(t, "pgx", lockID, time.Second, fenced)
	opts := []pgadvisory.Option{pgadvisory.WithWait(10 * time.Second)}
	if fenced {
		opts = append(opts, pgadvisory.WithFencing())
	}
	child.start(t, 0)
	require.Eventually(t, func() bool { return queueRows(t, admin, lockID) == 1 }, 60*time.Second, 2*time.Millisecond, "the child is queued")
	door := queueDoor(t, frontdoor.SQL, "waitkill", 4, pgadvisory.WithDefaultCheckInterval(time.Second))
	done := make(chan error, 1)
	go func() {
		// 10s: a dead waiter that blocked the queue for good
		// fails the test quickly.
		done <- door.RunExclusive(ctx, lockID, func(tx frontdoor.Tx) error {
			return tx.Exec(ctx, `INSERT INTO wait_order (lock_id, j) VALUES ($1, $2)`, lockID, 1)
		}, opts...)
	}()
	require.Eventually(t, func() bool { return queueRows(t, admin, lockID) == 2 }, 60*time.Second, 2*time.Millisecond, "the second waiter is queued")
	var killed time.Time
	if kill {
		require.NoError(t, child.cmd.Process.Signal(syscall.SIGKILL))
		killed = time.Now()
		_ = child.cmd.Wait()
	}
	release()
	require.NoError(t, frontdoor.Await(t, done, "the second waiter"))
	if !kill {
		require.Equal(t, []int{0, 1}, grantOrder(t, admin, lockID), "control: the live first waiter runs first")
		require.NoError(t, child.in.Close())
		return
	}
	took := time.Since(killed)
	t.Logf("the second waiter ran %v after the first was killed", took.Round(time.Millisecond))
	require.Equal(t, []int{1}, grantOrder(t, admin, lockID))
	require.Less(t, took, time.Second+300*time.Millisecond, "a gone waiter blocks the queue for at most one check interval (and scheduling)")
}

// queueLiveWaiter queues a live waiter for lockID, as a waiting call does
// when the lock is held: a row joined by wait_try (its expiry a minute
// ahead) on a session of admin that held the lock, then let it go. It
// returns the row's seq.
func queueLiveWaiter(t *testing.T, admin *sql.DB, lockID int64) int64 {
	t.Helper()
	release := holdSession(t, admin, lockID)
	var seq int64
	var granted bool
	require.NoError(t, admin.QueryRow(`SELECT granted, seq FROM pgadvisory.wait_try(ARRAY[$1::bigint], NULL, 60000)`, lockID).Scan(&granted, &seq))
	require.False(t, granted)
	release()
	return seq
}

// leaveWaiter removes the waiter of queueLiveWaiter from lockID's queue.
func leaveWaiter(t *testing.T, admin *sql.DB, lockID, seq int64) {
	t.Helper()
	_, err := admin.Exec(`SELECT pgadvisory.wait_leave(ARRAY[$1::bigint], $2)`, lockID, seq)
	require.NoError(t, err)
}

// TestWaitNewcomerQueuesBehind: while a live waiter is queued (a row
// joined by wait_try on a session of the test, which then lets the lock
// go), a new waiting call finds the lock free but does not take it: it
// queues behind and its WithWait timeout passes. A call without WithWait
// takes the free lock (only waiting calls keep the order). The control:
// once the queued waiter leaves, the waiting call takes the lock at once.
// The waiting call fenced (WithFencing) too: queued behind, it publishes
// nothing; and shared (WithShared): the live waiter ahead is exclusive.
func TestWaitNewcomerQueuesBehind(t *testing.T) {
	admin := migrated.DB(t)
	for _, mode := range queueModes {
		t.Run(mode, func(t *testing.T) {
			frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
				testWaitNewcomerQueuesBehind(t, admin, door, mode)
			})
		})
	}
}

func testWaitNewcomerQueuesBehind(t *testing.T, admin *sql.DB, door frontdoor.Door, mode string) {
	fenced := mode == "fenced"
	ctx := testdb.Context(t)
	lockID := testdb.Key(t)
	seq := queueLiveWaiter(t, admin, lockID)
	wait := func(d time.Duration) []pgadvisory.Option { return inMode(mode, pgadvisory.WithWait(d)) }

	ran := false
	fn := func(frontdoor.Tx) error { ran = true; return nil }
	err := door.RunExclusive(ctx, lockID, fn, wait(300*time.Millisecond)...)
	require.ErrorIs(t, err, pgadvisory.ErrLockTimeout, "a waiting call queues behind the live waiter")
	require.False(t, ran)
	require.Zero(t, fencing.Published(t, admin, lockID), "queued behind, nothing published")
	require.NoError(t, door.RunExclusive(ctx, lockID, fn), "a call without WithWait takes the free lock")
	require.True(t, ran)

	leaveWaiter(t, admin, lockID, seq)
	ran = false
	start := time.Now()
	require.NoError(t, door.RunExclusive(ctx, lockID, fn, wait(10*time.Second)...), "control: the queue is empty")
	require.True(t, ran)
	require.Less(t, time.Since(start), 5*time.Second)
	require.Zero(t, queueRows(t, admin, lockID))
	if fenced {
		require.NotZero(t, fencing.Published(t, admin, lockID), "control: granted, it published")
	}
}

// TestWaitThroughPgBouncer: through PgBouncer in transaction mode (both
// drivers, both pgx query modes), 6 waiting calls are queued in arrival
// order while a direct session holds the lock, and run in that order once
// it is released, woken by polling: no server connection listens (the
// Locker saw the pooler and did not LISTEN). The queue is empty afterwards.
// Fenced calls too, with growing tokens.
func TestWaitThroughPgBouncer(t *testing.T) {
	admin := migrated.DB(t)
	for _, mode := range pgbouncerExecModes {
		t.Run(mode, func(t *testing.T) {
			e := newPgBouncerPools(t, mode)
			for _, door := range e.doors() {
				for _, fenced := range []bool{false, true} {
					t.Run(fmt.Sprintf("%s/fenced=%v", door.Label(), fenced), func(t *testing.T) {
						ctx := testdb.Context(t)
						lockID := testdb.Key(t)
						release := holdSession(t, admin, lockID)
						var before int
						require.NoError(t, admin.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN pgadvisory_wait'`).Scan(&before))
						const waiters = 6
						var opts []pgadvisory.Option
						if fenced {
							opts = append(opts, pgadvisory.WithFencing())
						}
						order, tokens, done := queueFencedWaiters(t, ctx, door, admin, lockID, waiters, opts...)
						listening := func() int {
							var n int
							require.NoError(t, admin.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN pgadvisory_wait'`).Scan(&n))
							return n
						}
						require.LessOrEqual(t, listening(), before, "nobody listens through the pooler (other tests' Lockers may still)")
						release()
						for range waiters {
							require.NoError(t, frontdoor.Await(t, done, "a waiter"))
						}
						require.Equal(t, []int{0, 1, 2, 3, 4, 5}, order(), "granted in arrival order")
						if fenced {
							require.True(t, slices.IsSorted(tokens()) && tokens()[0] > 0, "tokens %v", tokens())
						}
						require.Zero(t, queueRows(t, admin, lockID))
					})
				}
			}
		})
	}
}

// TestWaitQueueOutlastsServerTimeouts: on a database with lockgen's schema
// whose lock_timeout is 100ms and statement_timeout 400ms for every
// session, a waiting RunExclusive (WithWait(0), both drivers, database/sql
// included) waits in lockgen's queue for a holder that keeps the lock
// 1.5s, and is granted: no server timeout ends a queued wait, each try
// being a short statement. fn runs under the database's settings. The
// server-queue controls are TestWaitOutlastsServerTimeouts and
// TestWaitServerTimeoutsControl (a database without the queue).
func TestWaitQueueOutlastsServerTimeouts(t *testing.T) {
	name, url := testdb.EmptyDatabase(t)
	db := openOn(t, url)
	ctx := testdb.Context(t)
	require.NoError(t, pgadvisory.Migrate(ctx, db))
	admin := testdb.DB(t)
	for _, set := range []string{"lock_timeout = '100ms'", "statement_timeout = '400ms'"} {
		_, err := admin.Exec("ALTER DATABASE " + pgx.Identifier{name}.Sanitize() + " SET " + set)
		require.NoError(t, err)
	}
	for _, door := range frontdoor.OpenAll(t, frontdoor.URL(url), frontdoor.MaxConns(2)) {
		t.Run(door.Label(), func(t *testing.T) {
			key := testdb.Key(t)
			release := holdSession(t, openOn(t, url), key)
			go func() { time.Sleep(1500 * time.Millisecond); release() }()
			start := time.Now()
			var inFn string
			require.NoError(t, door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
				return tx.QueryRow(ctx, "SHOW statement_timeout").Scan(&inFn)
			}, pgadvisory.WithWait(0)))
			require.GreaterOrEqual(t, time.Since(start), 1400*time.Millisecond, "the call waited for the holder")
			require.Equal(t, "400ms", inFn, "fn runs under the database's statement_timeout")
		})
	}
}
