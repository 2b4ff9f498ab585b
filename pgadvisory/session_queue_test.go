package pgadvisory_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Session-lock waiters (Campaign, Lead, RunSession WithWait) wait in
// lockgen's queue without a connection and take their lock on a shared
// connection when their turn comes, so leaderships live on the shared
// connections whatever happened before.

// leadAll runs Lead on every key of keys on door (fn blocks until ctx
// ends) and returns once every one of them leads; the returned channel
// gets each call's error.
func leadAll(t *testing.T, ctx context.Context, door frontdoor.Door, keys []int64, opts ...pgadvisory.Option) <-chan error {
	t.Helper()
	var inside sync.WaitGroup
	inside.Add(len(keys))
	errs := make(chan error, len(keys))
	for _, key := range keys {
		go func() {
			errs <- door.Lead(ctx, pgadvisory.ID(key), func(lctx context.Context, _ int64) error {
				inside.Done()
				<-lctx.Done()
				return context.Cause(lctx)
			}, opts...)
		}()
	}
	done := make(chan struct{})
	go func() { inside.Wait(); close(done) }()
	frontdoor.Await(t, done, "every key has its first leader")
	return errs
}

// waitingFor counts the calls waiting for keys: rows of lockgen's queue
// that have not expired, and backends in the server's lock queue.
func waitingFor(t testing.TB, w *witness.Witness, keys []int64) int {
	t.Helper()
	var n int
	require.NoError(t, w.DB.QueryRow(`SELECT
  (SELECT count(*) FROM pgadvisory.waiter WHERE lock_id = ANY($1) AND expires > clock_timestamp())
+ (SELECT count(*) FROM pg_catalog.pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND NOT granted
     AND ((classid::bigint << 32) | objid::bigint) = ANY($1))`, keys).Scan(&n))
	return n
}

// killApp terminates every backend whose application_name is app.
func killApp(t *testing.T, w *witness.Witness, app string) {
	t.Helper()
	_, err := w.DB.Exec("SELECT pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity WHERE application_name = $1", app)
	require.NoError(t, err)
}

// TestLeadershipsAfterFailoverShareConns: one Locker leads 20 keys, another
// campaigns for all of them; the leader's backends are killed. Every key
// gets the campaigner as its new leader, and its 20 leaderships are held
// on its shared connections (2), not on a backend each (before candidates
// waited in lockgen's queue, a process that took over 100 leaderships held
// them on 100 backends; scaled to 20 keys here, for a server of 100
// connections shared with other suites).
func TestLeadershipsAfterFailoverShareConns(t *testing.T) {
	const n = 20
	w := witness.Of(migrated.DB(t))
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		leader, leaderApp := muxDoor(t, drv, 2)
		campaigner, _ := muxDoor(t, drv, 2, frontdoor.MaxConns(n+4))
		keys := make([]int64, n)
		base := testdb.Key(t) << 8
		for i := range keys {
			keys[i] = base + int64(i)
		}
		opts := []pgadvisory.Option{pgadvisory.WithCheckInterval(100 * time.Millisecond)}
		leaderErrs := leadAll(t, ctx, leader, keys, opts...)

		cctx, cancel := context.WithCancel(ctx)
		var elected sync.WaitGroup
		elected.Add(n)
		campaigns := make(chan error, n)
		for _, key := range keys {
			go func() {
				once := sync.OnceFunc(elected.Done)
				campaigns <- campaigner.Campaign(cctx, pgadvisory.ID(key), func(lctx context.Context, _ int64) error {
					once()
					<-lctx.Done()
					return nil
				}, opts...)
			}()
		}
		require.Eventually(t, func() bool { return waitingFor(t, w, keys) == n }, 30*time.Second, 10*time.Millisecond,
			"every campaign waits")
		killApp(t, w, leaderApp)
		for range keys {
			require.ErrorIs(t, frontdoor.Await(t, leaderErrs, "a deposed leader's end"), pgadvisory.ErrLockLost)
		}
		done := make(chan struct{})
		go func() { elected.Wait(); close(done) }()
		frontdoor.Await(t, done, "every key elects the campaigner")

		pids := map[int64]bool{}
		for _, pid := range holdersOf(t, w, keys) {
			pids[pid] = true
		}
		require.LessOrEqual(t, len(pids), 2, "the new leaderships are held on the campaigner's shared connections")
		cancel()
		for range keys {
			require.NoError(t, frontdoor.Await(t, campaigns, "a campaign's end"))
		}
		// A release that ctx's end left to the background ends soon after.
		require.Eventually(t, func() bool { return len(w.Holds(t, keys...)) == 0 }, 10*time.Second, 10*time.Millisecond)
	})
}

// TestLeadershipsFilledWithSmallPool: 60 keys led by one Locker, two more
// Lockers campaigning for every key on pools of 4 connections (2 of them
// shared session connections); the leader's backends are killed. Every
// key gets a new leader within a bound, and no campaign fails. (The issue:
// 1,000 keys x 3 processes with MaxConns 100, 189 of 1,000 keys led after
// 60 s; scaled to 60 keys and pools of 4 here.)
func TestLeadershipsFilledWithSmallPool(t *testing.T) {
	const n = 60
	w := witness.Of(migrated.DB(t))
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		leader, leaderApp := muxDoor(t, drv, 2)
		keys := make([]int64, n)
		base := testdb.Key(t) << 8
		for i := range keys {
			keys[i] = base + int64(i)
		}
		opts := []pgadvisory.Option{pgadvisory.WithCheckInterval(250 * time.Millisecond)}
		leaderErrs := leadAll(t, ctx, leader, keys, opts...)

		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var mu sync.Mutex
		led := map[int64]string{}
		allLed := make(chan struct{})
		campaigns := make(chan error, 2*n)
		for c := range 2 {
			door, _ := muxDoor(t, drv, 2, frontdoor.MaxConns(4))
			name := fmt.Sprintf("candidate %d", c)
			for _, key := range keys {
				go func() {
					campaigns <- door.Campaign(cctx, pgadvisory.ID(key), func(lctx context.Context, _ int64) error {
						mu.Lock()
						if _, ok := led[key]; !ok {
							led[key] = name
							if len(led) == n {
								close(allLed)
							}
						}
						mu.Unlock()
						<-lctx.Done()
						return nil
					}, opts...)
				}()
			}
		}
		// As many candidates as keys are queued before the kill (before
		// this change, at most 2 per Locker waited, in the server's queue,
		// and the others for a pool connection, so this never held).
		require.Eventually(t, func() bool { return waitingFor(t, w, keys) >= n }, 30*time.Second, 10*time.Millisecond)
		time.Sleep(500 * time.Millisecond)
		killApp(t, w, leaderApp)
		for range keys {
			require.ErrorIs(t, frontdoor.Await(t, leaderErrs, "a deposed leader's end"), pgadvisory.ErrLockLost)
		}
		select {
		case <-allLed:
		case <-time.After(60 * time.Second):
			mu.Lock()
			got := len(led)
			mu.Unlock()
			t.Fatalf("%d of %d keys got a new leader within 60s", got, n)
		}
		require.Len(t, holdersOf(t, w, keys), n)
		cancel()
		for range 2 * n {
			require.NoError(t, frontdoor.Await(t, campaigns, "a campaign's end"))
		}
		// A release that ctx's end left to the background ends soon after.
		require.Eventually(t, func() bool { return len(w.Holds(t, keys...)) == 0 }, 10*time.Second, 10*time.Millisecond)
	})
}

// TestSessionWaitNewcomerQueuesBehind: while a live waiter is queued (a
// row joined by wait_try on a session of the test, which then lets the
// lock go), a waiting RunSession and a Lead find the lock free but do not
// take it: they queue behind, their WithWait timeout passes, and they
// leave the queue as they return. RunSession without WithWait takes the
// free lock. The control: once the queued waiter leaves, both take it.
func TestSessionWaitNewcomerQueuesBehind(t *testing.T) {
	admin := migrated.DB(t)
	frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
		ctx := testdb.Context(t)
		lockID := testdb.Key(t)
		seq := queueLiveWaiter(t, admin, lockID)

		ran := false
		fn := func(context.Context) error { ran = true; return nil }
		lead := func(context.Context, int64) error { ran = true; return nil }
		err := door.RunSession(ctx, pgadvisory.ID(lockID), fn, pgadvisory.WithWait(300*time.Millisecond))
		require.ErrorIs(t, err, pgadvisory.ErrLockTimeout, "a waiting session lock queues behind the live waiter")
		err = door.Lead(ctx, pgadvisory.ID(lockID), lead, pgadvisory.WithWait(300*time.Millisecond))
		require.ErrorIs(t, err, pgadvisory.ErrLockTimeout, "a candidate queues behind the live waiter")
		require.False(t, ran)
		require.Equal(t, 1, queueRows(t, admin, lockID), "only the test's row is left")
		require.NoError(t, door.RunSession(ctx, pgadvisory.ID(lockID), fn), "a call without WithWait takes the free lock")
		require.True(t, ran)

		leaveWaiter(t, admin, lockID, seq)
		ran = false
		require.NoError(t, door.RunSession(ctx, pgadvisory.ID(lockID), fn, pgadvisory.WithWait(10*time.Second)), "control: the queue is empty")
		require.True(t, ran)
		ran = false
		require.NoError(t, door.Lead(ctx, pgadvisory.ID(lockID), lead, pgadvisory.WithWait(10*time.Second)), "control: the queue is empty")
		require.True(t, ran)
		require.Zero(t, queueRows(t, admin, lockID))
		require.Empty(t, witness.Of(admin).Holds(t, lockID))
	})
}

// TestSessionQueuedHandoffWakes: a leader that was elected through the
// queue wakes the next candidate, of another Locker, as it resigns: with
// polling pushed out of reach (a check interval of an hour: the waiters'
// heartbeat is 12 minutes), the next candidate is elected, with a higher
// term, as soon as the leader resigns, and so is a RunSession waiter after
// a queued RunSession. The waiters held no connection meanwhile.
func TestSessionQueuedHandoffWakes(t *testing.T) {
	admin := migrated.DB(t)
	w := witness.Of(admin)
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		slow := pgadvisory.WithDefaultCheckInterval(time.Hour)
		a, _ := muxDoor(t, drv, 1)
		b, _ := muxDoor(t, drv, 1)
		a, b = a.WithLocker(slow), b.WithLocker(slow)
		key := testdb.Key(t)
		for _, kind := range []string{"lead", "session"} {
			t.Run(kind, func(t *testing.T) {
				hold := func(door frontdoor.Door, fn func(term int64) error) error {
					if kind == "lead" {
						return door.Lead(ctx, pgadvisory.ID(key), func(_ context.Context, term int64) error { return fn(term) })
					}
					return door.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error { return fn(0) }, pgadvisory.WithWait(0))
				}
				in, out := make(chan int64, 1), make(chan struct{})
				first := make(chan error, 1)
				go func() { first <- hold(a, func(term int64) error { in <- term; <-out; return nil }) }()
				firstTerm := frontdoor.Await(t, in, "the first holder")
				second := make(chan error, 1)
				secondTerm := make(chan int64, 1)
				go func() { second <- hold(b, func(term int64) error { secondTerm <- term; return nil }) }()
				require.Eventually(t, func() bool { return queueRows(t, admin, key) == 1 }, 10*time.Second, 5*time.Millisecond)
				require.Equal(t, 1, waitingFor(t, w, []int64{key}), "the waiter is queued, not in the server's lock queue")
				close(out)
				require.NoError(t, frontdoor.Await(t, first, "the first holder's end"))
				select {
				case term := <-secondTerm:
					if kind == "lead" {
						require.Greater(t, term, firstTerm)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("the waiter was not woken by the release")
				}
				require.NoError(t, frontdoor.Await(t, second, "the second holder's end"))
				require.Zero(t, queueRows(t, admin, key))
				require.Empty(t, w.Holds(t, key))
			})
		}
	})
}

// TestSessionQueuedSameLockerKeepsPlace: a candidate waiting for a key
// that another call of its own Locker leads keeps its place in the queue
// (its row is refreshed on a pool connection, since the shared connection
// may be the leader's own backend) although that leadership outlasts
// many row expiries; when the leader resigns it is elected before a
// candidate of another Locker that queued after it.
func TestSessionQueuedSameLockerKeepsPlace(t *testing.T) {
	admin := migrated.DB(t)
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		// Rows expire after 300ms unless refreshed; a loaded machine may delay
		// a refresh by tens of ms, so the interval is not shorter.
		fast := pgadvisory.WithDefaultCheckInterval(400 * time.Millisecond)
		a, _ := muxDoor(t, drv, 1)
		b, _ := muxDoor(t, drv, 1)
		a, b = a.WithLocker(fast), b.WithLocker(fast)
		key := testdb.Key(t)
		in, out := make(chan struct{}), make(chan struct{})
		first := make(chan error, 1)
		go func() {
			first <- a.Lead(ctx, pgadvisory.ID(key), func(context.Context, int64) error { close(in); <-out; return nil })
		}()
		frontdoor.Await(t, in, "the first leader")
		var mu sync.Mutex
		var order []string
		elected := func(name string) func(context.Context, int64) error {
			return func(context.Context, int64) error {
				mu.Lock()
				order = append(order, name)
				mu.Unlock()
				return nil
			}
		}
		ends := make(chan error, 2)
		go func() { ends <- a.Lead(ctx, pgadvisory.ID(key), elected("same Locker")) }()
		require.Eventually(t, func() bool { return queueRows(t, admin, key) == 1 }, 10*time.Second, 5*time.Millisecond)
		go func() { ends <- b.Lead(ctx, pgadvisory.ID(key), elected("other Locker")) }()
		require.Eventually(t, func() bool { return queueRows(t, admin, key) == 2 }, 10*time.Second, 5*time.Millisecond)
		time.Sleep(2500 * time.Millisecond) // 8 expiries of a row that is not refreshed
		close(out)
		require.NoError(t, frontdoor.Await(t, first, "the first leader's end"))
		require.NoError(t, frontdoor.Await(t, ends, "a candidate's end"))
		require.NoError(t, frontdoor.Await(t, ends, "a candidate's end"))
		require.Equal(t, []string{"same Locker", "other Locker"}, order)
		require.Zero(t, queueRows(t, admin, key))
	})
}

// TestSessionQueuedGrantWakesNobody: a queued session lock's grant sends
// no wake-up. H holds a key; W1 and W2, each on a Locker of its own,
// queue for it in that order. H's release wakes W1 (the NOTIFY names W1's
// place). W1's try commits at once while its session lock stays held, so
// a NOTIFY of that try would only send W2 to a try that finds the lock
// held: none is sent. A raw connection listening on the channel shows
// what was sent before W1's fn started; W2 runs after W1 returns.
func TestSessionQueuedGrantWakesNobody(t *testing.T) {
	admin := migrated.DB(t)
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		slow := pgadvisory.WithDefaultCheckInterval(time.Hour) // no polls
		var doors [3]frontdoor.Door
		for i := range doors {
			doors[i], _ = muxDoor(t, drv, 1)
			doors[i] = doors[i].WithLocker(slow)
		}
		key := testdb.Key(t)
		listener, err := pgx.Connect(ctx, testdb.URL(t))
		require.NoError(t, err)
		t.Cleanup(func() { _ = listener.Close(context.Background()) })
		_, err = listener.Exec(ctx, "LISTEN pgadvisory_wait")
		require.NoError(t, err)

		hIn, hOut := make(chan struct{}), make(chan struct{})
		w1In, w1Out := make(chan struct{}), make(chan struct{})
		releaseH, releaseW1 := sync.OnceFunc(func() { close(hOut) }), sync.OnceFunc(func() { close(w1Out) })
		t.Cleanup(releaseH)
		t.Cleanup(releaseW1)
		ends := make(chan error, 3)
		go func() {
			ends <- doors[0].RunSession(ctx, pgadvisory.ID(key), func(context.Context) error { close(hIn); <-hOut; return nil }, pgadvisory.WithWait(0))
		}()
		frontdoor.Await(t, hIn, "H holds the key")
		go func() {
			ends <- doors[1].RunSession(ctx, pgadvisory.ID(key), func(context.Context) error { close(w1In); <-w1Out; return nil }, pgadvisory.WithWait(0))
		}()
		require.Eventually(t, func() bool { return queueRows(t, admin, key) == 1 }, 10*time.Second, 5*time.Millisecond)
		w2In := make(chan struct{})
		go func() {
			ends <- doors[2].RunSession(ctx, pgadvisory.ID(key), func(context.Context) error { close(w2In); return nil }, pgadvisory.WithWait(0))
		}()
		require.Eventually(t, func() bool { return queueRows(t, admin, key) == 2 }, 10*time.Second, 5*time.Millisecond)
		var seqs []int64
		rows, err := admin.QueryContext(ctx, "SELECT seq FROM pgadvisory.waiter WHERE lock_id = $1 ORDER BY seq", key)
		require.NoError(t, err)
		for rows.Next() {
			var s int64
			require.NoError(t, rows.Scan(&s))
			seqs = append(seqs, s)
		}
		require.NoError(t, rows.Err())
		require.Len(t, seqs, 2)

		releaseH()
		frontdoor.Await(t, w1In, "W1, woken by H's release")
		// The listening backend sends what it was signaled for before the
		// ready-for-query of a statement that follows.
		_, err = listener.Exec(ctx, "SELECT 1")
		require.NoError(t, err)
		var named []string
		for {
			wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			n, err := listener.WaitForNotification(wctx)
			cancel()
			if err != nil {
				break
			}
			if strings.HasPrefix(n.Payload, fmt.Sprint(key, ":")) {
				named = append(named, n.Payload)
			}
		}
		require.Equal(t, []string{fmt.Sprint(key, ":", seqs[0])}, named,
			"H's release named W1 (the head); W1's grant named nobody")
		select {
		case <-w2In:
			t.Fatal("W2 ran while W1 held the key")
		default:
		}
		releaseW1()
		frontdoor.Await(t, w2In, "W2, woken by W1's release")
		for range 3 {
			require.NoError(t, frontdoor.Await(t, ends, "a call's end"))
		}
		require.Zero(t, queueRows(t, admin, key))
	})
}

// TestSessionQueuedTryAbandoned: a queued session lock whose ctx ends
// while its try's statement runs on a shared connection that carries
// another call's lock returns at once and leaves the statement to the
// background, which ends it after the call has returned (here the code
// once read the call's result there, nil by then, and crashed). The try
// is held up by the test's row lock on the call's queue row (wait_try
// refreshes it); the call's ctx is canceled meanwhile; the row lock is let
// go. The call returned context.Canceled; once the statement ended its
// place is given back, the neighbour kept its lock, nothing else is held,
// and the key is free for the next call.
func TestSessionQueuedTryAbandoned(t *testing.T) {
	admin := migrated.DB(t)
	w := witness.Of(admin)
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		door, _ := muxDoor(t, drv, -1)
		// One shared connection, for the waiter and its neighbour; a try
		// every 20ms.
		door = door.WithLocker(pgadvisory.WithSessionConns(1), pgadvisory.WithDefaultCheckInterval(100*time.Millisecond))
		key, other := testdb.Key(t), testdb.Key(t)
		release := holdSession(t, admin, key)
		endOther, lostOther := holdShared(t, ctx, door, other)

		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		waited := make(chan error, 1)
		go func() {
			waited <- door.RunSession(wctx, pgadvisory.ID(key), func(context.Context) error { return errors.New("fn ran") }, pgadvisory.WithWait(0))
		}()
		require.Eventually(t, func() bool { return queueRows(t, admin, key) == 1 }, 10*time.Second, 5*time.Millisecond)

		tx, err := admin.BeginTx(ctx, nil)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }()
		_, err = tx.ExecContext(ctx, "SELECT 1 FROM pgadvisory.waiter WHERE lock_id = $1 FOR UPDATE", key)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			var n int
			require.NoError(t, admin.QueryRowContext(ctx, `SELECT count(*) FROM pg_catalog.pg_stat_activity
				WHERE wait_event_type = 'Lock' AND query LIKE '%pgadvisory.wait_try(%'`).Scan(&n))
			return n == 1
		}, 10*time.Second, 5*time.Millisecond, "the next try waits for the row")

		cancel()
		require.ErrorIs(t, frontdoor.Await(t, waited, "the canceled call"), context.Canceled)
		require.NoError(t, tx.Rollback())
		require.Eventually(t, func() bool { return queueRows(t, admin, key) == 0 }, 10*time.Second, 5*time.Millisecond,
			"the abandoned try's place is given back")
		release()
		require.Eventually(t, func() bool { return len(w.Holds(t, key)) == 0 }, 10*time.Second, 5*time.Millisecond)
		requireKeptThenEnd(t, endOther, lostOther, "the neighbour's lock")
		frontdoor.RequireIdle(t, door)
		ran := false
		require.NoError(t, door.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error { ran = true; return nil }, pgadvisory.WithWait(0)))
		require.True(t, ran)
	})
}
