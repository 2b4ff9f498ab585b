package pgadvisory_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// setRun is the record of calls on sets of locks: for each call, when its
// fn started and ended (a counter shared by all calls), so that a test can
// check which ran together.
type setRun struct {
	mu       sync.Mutex
	clock    int
	sets     [][]int64
	shared   []bool // shared[i]: call i is a shared one (nil: none is)
	starts   []int
	ends     []int
	busy     map[int64][]int // lock ID -> indexes of the calls whose fns hold it
	errs     []string
	together int // how many times a call's fn started while another held one of its locks (shared calls)
}

func newSetRun(sets [][]int64) *setRun {
	n := len(sets)
	r := &setRun{sets: sets, starts: make([]int, n), ends: make([]int, n), busy: map[int64][]int{}}
	for i := range n {
		r.starts[i], r.ends[i] = -1, -1
	}
	return r
}

// isShared reports whether call i is a shared one.
func (r *setRun) isShared(i int) bool { return r.shared != nil && r.shared[i] }

// fn is call i's fn: it marks its locks busy for hold, and records any
// lock that another call's fn held at the same time (an error unless both
// calls are shared ones).
func (r *setRun) fn(i int, hold time.Duration) func(frontdoor.Tx) error {
	return func(frontdoor.Tx) error {
		r.mu.Lock()
		r.clock++
		r.starts[i] = r.clock
		shared := false
		for _, id := range r.sets[i] {
			for _, j := range r.busy[id] {
				if !r.isShared(i) || !r.isShared(j) {
					r.errs = append(r.errs, fmt.Sprintf("calls %d and %d hold lock %d at once", j, i, id))
				}
				shared = true
			}
			r.busy[id] = append(r.busy[id], i)
		}
		if shared {
			r.together++
		}
		r.mu.Unlock()
		time.Sleep(hold)
		r.mu.Lock()
		for _, id := range r.sets[i] {
			r.busy[id] = slices.DeleteFunc(r.busy[id], func(j int) bool { return j == i })
		}
		r.clock++
		r.ends[i] = r.clock
		r.mu.Unlock()
		return nil
	}
}

// sessionFn is fn for a session lock's call.
func (r *setRun) sessionFn(i int, hold time.Duration) func(context.Context) error {
	fn := r.fn(i, hold)
	return func(context.Context) error { return fn(nil) }
}

// requireArrivalOrder checks that every call ran, none while another
// held one of its locks (unless both are shared ones), and each after
// every earlier call (by index) that shares a lock with it had ended,
// unless both are shared ones.
func (r *setRun) requireArrivalOrder(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Empty(t, r.errs)
	for j := range r.sets {
		require.NotEqual(t, -1, r.ends[j], "call %d ran", j)
		for i := range j {
			if r.isShared(i) && r.isShared(j) {
				continue
			}
			if slices.ContainsFunc(r.sets[i], func(id int64) bool { return slices.Contains(r.sets[j], id) }) {
				require.Less(t, r.ends[i], r.starts[j], "call %d %v ran after call %d %v, which came first and shares a lock", j, r.sets[j], i, r.sets[i])
			}
		}
	}
}

// setRows counts the rows of the queues of ids.
func setRows(t *testing.T, admin *sql.DB, ids ...int64) int {
	t.Helper()
	var n int
	require.NoError(t, admin.QueryRow(`SELECT count(*) FROM pgadvisory.waiter WHERE lock_id = ANY($1)`, idsArray(ids)).Scan(&n))
	return n
}

// setCall is RunExclusive on set[0] with WithLocks(set[1:]...).
func setCall(ctx context.Context, door frontdoor.Door, set []int64, fn func(frontdoor.Tx) error, opts ...pgadvisory.Option) error {
	return door.RunExclusive(ctx, set[0], fn, append(opts, pgadvisory.WithLocks(set[1:]...))...)
}

// TestWaitSetsQueued: calls on sets of locks (WithLocks) with WithWait wait
// in lockgen's queue, holding no connection, and are granted in arrival
// order: locks A, B and C are held elsewhere (session locks, which send no
// NOTIFY); 10 calls on overlapping sets, in both orders of their IDs, join
// one at a time on a Locker whose pool has 4 connections. While all wait,
// the queues hold one row per lock of each call, the server shows at most
// 5 connections of the Locker (its pool's and the listening one) and at
// most one backend waiting for a lock (a head's). Released, every call
// runs, none while another holds one of its locks, and each after every
// earlier call that shares a lock with it ended. Plain, fenced and shared
// (shared calls share: the check is then that all ran, and that some held
// a lock together). The queues are empty afterwards.
func TestWaitSetsQueued(t *testing.T) {
	admin := migrated.DB(t)
	for _, mode := range queueModes {
		for _, driver := range frontdoor.Drivers {
			t.Run(fmt.Sprintf("%s/%s", mode, driver), func(t *testing.T) {
				testWaitSetsQueued(t, admin, driver, mode)
			})
		}
	}
}

func testWaitSetsQueued(t *testing.T, admin *sql.DB, driver frontdoor.Driver, mode string) {
	ctx := testdb.Context(t)
	a, b, c := testdb.Key(t), testdb.Key(t), testdb.Key(t)
	app := fmt.Sprintf("waitsets_%d", a)
	door := queueDoor(t, driver, app, 4, orderInterval)
	releases := []func(){holdSession(t, admin, a), holdSession(t, admin, b), holdSession(t, admin, c)}

	sets := [][]int64{{a, b}, {b, a}, {a}, {c, b}, {b}, {a, b, c}, {c}, {a, c}, {b, c}, {a}}
	run := newSetRun(sets)
	hold := 5 * time.Millisecond
	if mode == "shared" {
		run.shared = slices.Repeat([]bool{true}, len(sets))
		hold = 30 * time.Millisecond // long enough for the shared ones to meet
	}
	queuedSets(t, admin, app, []int64{a, b, c}, run, releases, nil, func(i int) error {
		return setCall(ctx, door, sets[i], run.fn(i, hold), inMode(mode, pgadvisory.WithWait(0))...)
	})
	if mode == "fenced" {
		for _, id := range []int64{a, b, c} {
			require.NotZero(t, fencing.Published(t, admin, id), "lock %d's token published", id)
		}
	}
}

// queuedSets starts the calls on run's sets (call i runs start(i)), one at
// a time, each once the previous one has joined the queues of keys (held
// elsewhere until releases are called), checks that the server shows at
// most 5 connections named app while all wait (whileQueued checks more),
// calls releases and waits for every call: none fails, and run shows
// arrival order and, when all are shared, shared calls holding a lock
// together.
func queuedSets(t *testing.T, admin *sql.DB, app string, keys []int64, run *setRun, releases []func(), whileQueued func(), start func(i int) error) {
	t.Helper()
	done := make(chan error, len(run.sets))
	rows := 0
	for i, set := range run.sets {
		go func() { done <- start(i) }()
		rows += len(set)
		require.Eventually(t, func() bool { return setRows(t, admin, keys...) == rows }, 30*time.Second, 2*time.Millisecond, "call %d %v queued", i, set)
	}
	most := requireQueuedConns(t, admin, app, 5)
	if whileQueued != nil {
		whileQueued()
	}
	t.Logf("%d calls on sets queued (%d rows); the Locker had at most %d connections on the server", len(run.sets), rows, most)
	for _, release := range releases {
		release()
	}
	for range run.sets {
		require.NoError(t, frontdoor.Await(t, done, "a call on a set"))
	}
	run.requireArrivalOrder(t)
	if run.shared != nil && !slices.Contains(run.shared, false) {
		run.mu.Lock()
		require.NotZero(t, run.together, "shared calls held a lock together")
		run.mu.Unlock()
	}
	require.Zero(t, setRows(t, admin, keys...), "the queues are empty")
}

// TestWaitSetsNoDeadlock: 8 goroutines on two Lockers (pools of 3) make
// 240 waiting calls on random sets of 1 to 3 of 4 locks, their IDs in
// random order, each fn holding its locks 1ms. Every call returns without
// error (none waits for another that waits for it: a call's place is the
// same in each of its locks' queues), no two fns held a lock at once, and
// the queues are empty afterwards. Fenced too.
func TestWaitSetsNoDeadlock(t *testing.T) {
	admin := migrated.DB(t)
	for _, fenced := range []bool{false, true} {
		for _, driver := range frontdoor.Drivers {
			t.Run(fmt.Sprintf("%s/fenced=%v", driver, fenced), func(t *testing.T) {
				testWaitSetsNoDeadlock(t, admin, driver, fenced)
			})
		}
	}
}

func testWaitSetsNoDeadlock(t *testing.T, admin *sql.DB, driver frontdoor.Driver, fenced bool) {
	ctx := testdb.Context(t)
	keys := []int64{testdb.Key(t), testdb.Key(t), testdb.Key(t), testdb.Key(t)}
	doors := []frontdoor.Door{
		queueDoor(t, driver, fmt.Sprintf("setsdl1_%d", keys[0]), 3),
		queueDoor(t, driver, fmt.Sprintf("setsdl2_%d", keys[0]), 3),
	}
	const goroutines, each = 8, 30
	var sets [][]int64
	for range goroutines * each {
		set := slices.Clone(keys)
		rand.Shuffle(len(set), func(i, j int) { set[i], set[j] = set[j], set[i] })
		sets = append(sets, set[:1+rand.IntN(3)])
	}
	run := newSetRun(sets)
	var opts []pgadvisory.Option
	if fenced {
		opts = append(opts, pgadvisory.WithFencing())
	}
	concurrentSetCalls(t, admin, run, goroutines, each, keys, func(g, i int) error {
		return setCall(ctx, doors[g%2], sets[i], run.fn(i, time.Millisecond), append(opts, pgadvisory.WithWait(0))...)
	})
}

// concurrentSetCalls runs run's calls on goroutines goroutines, each
// making each calls in turn (call i = g*each + k runs call(g, i)): none
// fails, no two fns held a lock at once unless both shared, and the
// queues of keys are empty afterwards.
func concurrentSetCalls(t *testing.T, admin *sql.DB, run *setRun, goroutines, each int, keys []int64, call func(g, i int) error) {
	t.Helper()
	errs := make(chan error, goroutines)
	for g := range goroutines {
		go func() {
			for k := range each {
				i := g*each + k
				if err := call(g, i); err != nil {
					errs <- fmt.Errorf("call %d %v: %w", i, run.sets[i], err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range goroutines {
		require.NoError(t, frontdoor.Await(t, errs, "a goroutine's calls"))
	}
	run.mu.Lock()
	require.Empty(t, run.errs)
	run.mu.Unlock()
	require.Zero(t, setRows(t, admin, keys...), "the queues are empty")
}

// TestWaitSetsCanceledLeavesNothing: a queued call on a set whose ctx ends
// removes its rows from every queue it joined; one whose WithWait timeout
// passes too. A set's try that is not granted keeps none of the set's
// locks: while the call waits for B (held elsewhere), A is free for a
// call that does not wait.
func TestWaitSetsCanceledLeavesNothing(t *testing.T) {
	admin := migrated.DB(t)
	for _, mode := range queueModes {
		t.Run(mode, func(t *testing.T) {
			frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
				ctx := testdb.Context(t)
				a, b := testdb.Key(t), testdb.Key(t)
				release := holdSession(t, admin, b)
				fn := func(frontdoor.Tx) error { return nil }

				cctx, cancel := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() { done <- setCall(cctx, door, []int64{a, b}, fn, inMode(mode, pgadvisory.WithWait(0))...) }()
				require.Eventually(t, func() bool { return setRows(t, admin, a, b) == 2 }, 30*time.Second, 2*time.Millisecond, "queued")
				require.NoError(t, door.RunExclusive(ctx, a, fn), "the waiting set keeps none of its locks")
				cancel()
				require.ErrorIs(t, frontdoor.Await(t, done, "the canceled waiter"), context.Canceled)
				require.Zero(t, setRows(t, admin, a, b), "a canceled waiter leaves no row")

				err := setCall(ctx, door, []int64{a, b}, fn, inMode(mode, pgadvisory.WithWait(300*time.Millisecond))...)
				require.ErrorIs(t, err, pgadvisory.ErrLockTimeout)
				require.Zero(t, setRows(t, admin, a, b), "a timed-out waiter leaves no row")
				release()
				require.NoError(t, setCall(ctx, door, []int64{a, b}, fn, inMode(mode, pgadvisory.WithWait(0))...))
			})
		})
	}
}

// TestWaitTrySetTakesAllOrNone: wait_try on a set takes all of its locks
// or none. B is held elsewhere. A first try on {A, B} is not granted and,
// its transaction still open, holds no lock (not A, which was free). As
// the head of the queue, with time to wait on the server (block_ms), the
// try waits for B alone: while it waits it holds no lock, and A can be
// taken by anyone; once B's holder releases it, the try is granted both,
// holds both, and its commit empties the queues.
func TestWaitTrySetTakesAllOrNone(t *testing.T) {
	admin := migrated.DB(t)
	ctx := testdb.Context(t)
	a, b := testdb.Key(t), testdb.Key(t)
	release := holdSession(t, admin, b)
	set := idsArray([]int64{a, b})
	heldBy := func(pid int) []int64 {
		t.Helper()
		var ids []int64
		rows, err := admin.QueryContext(ctx, `SELECT ((classid::bigint << 32) | objid::bigint) FROM pg_locks
			WHERE locktype = 'advisory' AND granted AND pid = $1 ORDER BY 1`, pid)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var id int64
			require.NoError(t, rows.Scan(&id))
			ids = append(ids, id)
		}
		require.NoError(t, rows.Err())
		return ids
	}

	tx, err := admin.BeginTx(ctx, nil)
	require.NoError(t, err)
	var granted bool
	var seq sql.NullInt64
	var pid int
	require.NoError(t, tx.QueryRowContext(ctx, `SELECT g.granted, g.seq, pg_backend_pid() FROM pgadvisory.wait_try($1::bigint[], NULL, 60000) AS g`, set).Scan(&granted, &seq, &pid))
	require.False(t, granted, "B is held")
	require.True(t, seq.Valid, "the call joined the queues")
	require.Empty(t, heldBy(pid), "a set that is not granted holds none of its locks, A neither")
	require.NoError(t, tx.Commit())
	require.Equal(t, 2, setRows(t, admin, a, b))

	tx, err = admin.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	require.NoError(t, tx.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	done := make(chan error, 1)
	go func() {
		done <- tx.QueryRowContext(ctx, `SELECT g.granted FROM pgadvisory.wait_try($1::bigint[], $2, 60000, 20000) AS g`, set, seq.Int64).Scan(&granted)
	}()
	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, admin.QueryRowContext(ctx, `SELECT EXISTS (SELECT FROM pg_locks WHERE pid = $1 AND locktype = 'advisory' AND NOT granted)`, pid).Scan(&waiting))
		return waiting
	}, 10*time.Second, 2*time.Millisecond, "the head waits on the server for B")
	require.Empty(t, heldBy(pid), "the head waits for B holding no lock")
	var took bool
	require.NoError(t, admin.QueryRowContext(ctx, `SELECT pg_try_advisory_xact_lock($1)`, a).Scan(&took))
	require.True(t, took, "A is free for others while the set waits for B")

	release()
	require.NoError(t, frontdoor.Await(t, done, "the head's try"))
	require.True(t, granted, "granted once B's holder released it")
	require.Equal(t, []int64{a, b}, heldBy(pid), "the head holds both")
	require.NoError(t, tx.Commit())
	require.Zero(t, setRows(t, admin, a, b), "the queues are empty")
}
