package pgadvisory_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestWaitServerWaitBudget: 12 locks, each held by a holder that did not
// queue (RunExclusive without WithWait, in one Locker), and one waiting
// call per lock in another Locker whose pool has 4 connections: each
// waiter is the head of its lock's queue, which would wait for its holder
// on the server. At most a quarter of the pool's connections, 1, of that
// Locker's backends waits in the server's lock queue at any sample while
// all 12 wait (sampled on one observer connection); a call of the same
// pool on another lock, without WithWait, gets a connection and completes
// meanwhile, while all 12 still wait; released one at a time, each waiter
// runs after its own holder released. The control
// (TestWaitServerWaitBudgetControl) lifts the budget and sees more than
// one of them wait on the server.
func TestWaitServerWaitBudget(t *testing.T) {
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		most, least := serverWaitHeads(t, drv, false)
		require.LessOrEqual(t, most, 1, "the Locker's heads waiting on the server at once (budget: a quarter of 4 connections)")
		require.GreaterOrEqual(t, least, 1, "a head waited on the server at some sample (the budget is used)")
	})
}

// TestWaitServerWaitBudgetControl: TestWaitServerWaitBudget with the
// budget lifted: more than one head of the Locker waits on the server at
// once, so the test's bound is not met by chance.
func TestWaitServerWaitBudgetControl(t *testing.T) {
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		most, _ := serverWaitHeads(t, drv, true)
		require.Greater(t, most, 1, "without the budget, several heads wait on the server at once")
	})
}

// serverWaitHeads runs the scenario of TestWaitServerWaitBudget (with the
// budget lifted when lift is true) and returns the most backends of the
// waiting Locker seen in the server's lock queue at one sample, and the
// number of samples with at least one.
func serverWaitHeads(t *testing.T, drv frontdoor.Driver, lift bool) (most, samplesWithOne int) {
	admin := migrated.DB(t)
	ctx := testdb.Context(t)
	const keys = 12
	holders := frontdoor.Open(t, drv, frontdoor.MaxConns(keys))
	first := testdb.Key(t)
	app := fmt.Sprintf("waitbudget_%d", first)
	door := queueDoor(t, drv, app, 4)
	if lift {
		if l := door.PgxLocker(); l != nil {
			pgadvisory.ServerWaitBudgetForTest(l, 1000)
		} else {
			pgadvisory.ServerWaitBudgetForTest(door.SQLLocker(), 1000)
		}
	}
	observer, err := admin.Conn(ctx)
	require.NoError(t, err)
	defer observer.Close()

	ids := make([]int64, keys)
	release := make([]func() error, keys)
	released := make([]atomic.Bool, keys)
	for i := range keys {
		ids[i] = first
		if i > 0 {
			ids[i] = testdb.Key(t)
		}
		release[i] = holders.Hold(t, ids[i], nil)
	}

	var ran, early atomic.Int32
	done := make(chan error, keys)
	for i := range keys {
		go func() {
			done <- door.RunExclusive(ctx, ids[i], func(frontdoor.Tx) error {
				if !released[i].Load() {
					early.Add(1)
				}
				ran.Add(1)
				return nil
			}, pgadvisory.WithWait(0))
		}()
	}
	queued := func() int {
		var n int
		require.NoError(t, observer.QueryRowContext(ctx, `SELECT count(*) FROM pgadvisory.waiter WHERE lock_id = ANY($1)`, idsArray(ids)).Scan(&n))
		return n
	}
	require.Eventually(t, func() bool { return queued() == keys }, 30*time.Second, 5*time.Millisecond, "every waiter queued")

	sample := func() int {
		var n int
		require.NoError(t, observer.QueryRowContext(ctx, `SELECT count(*) FROM pg_catalog.pg_locks AS l
			JOIN pg_catalog.pg_stat_activity AS a ON a.pid = l.pid
			WHERE l.locktype = 'advisory' AND NOT l.granted AND a.application_name = $1`, app).Scan(&n))
		return n
	}
	other := make(chan error, 1)
	for s := range 150 {
		n := sample()
		most = max(most, n)
		if n > 0 {
			samplesWithOne++
		}
		if s == 50 && !lift {
			// Another call on the waiting Locker's pool, meanwhile.
			go func() {
				octx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				other <- door.RunExclusive(octx, testdb.Key(t), func(frontdoor.Tx) error { return nil })
			}()
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !lift {
		require.NoError(t, frontdoor.Await(t, other, "the other call on the waiting Locker's pool"))
	}
	require.Zero(t, ran.Load(), "no waiter ran while the holders held")
	require.Equal(t, keys, queued(), "every waiter still waits")
	t.Logf("at most %d of the Locker's backends in the server's lock queue at once; %d of 150 samples had one", most, samplesWithOne)

	for i := range keys {
		released[i].Store(true)
		require.NoError(t, release[i]())
	}
	for range keys {
		require.NoError(t, frontdoor.Await(t, done, "a waiter"))
	}
	require.Zero(t, early.Load(), "a waiter ran before its holder released")
	require.Zero(t, queued(), "the queues are empty")
	return most, samplesWithOne
}

// idsArray is ids as a PostgreSQL bigint[] literal.
func idsArray(ids []int64) string {
	b := []byte{'{'}
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, "%d", id)
	}
	return string(append(b, '}'))
}
