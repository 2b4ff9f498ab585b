package pgadvisory_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestWaitFastPathHolderWakesHead: a holder that took the lock without
// queueing (a RunExclusive without WithWait, in one Locker) sends no
// NOTIFY; the queued waiter of another Locker, whose check interval is an
// hour (it would not poll again for minutes if it were not the head), is
// at the head of the queue and waits for the release on the server, in
// its second try: it runs when the holder commits, after exactly two
// tries (the one that joined the queue, the one that waited), however
// long the holder kept the lock. Both drivers.
func TestWaitFastPathHolderWakesHead(t *testing.T) {
	migrated.DB(t)
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		w := witness.New(t)
		key := testdb.Key(t)
		holder := frontdoor.Open(t, drv, frontdoor.MaxConns(2))
		tries := &waitTryCounter{}
		waiter := tracedDoor(t, drv, tries, pgadvisory.WithDefaultCheckInterval(time.Hour))

		held, release := make(chan struct{}), make(chan struct{})
		released := false
		defer func() {
			if !released {
				close(release)
			}
		}()
		holderDone := make(chan error, 1)
		go func() {
			holderDone <- holder.RunExclusive(ctx, key, func(frontdoor.Tx) error { close(held); <-release; return nil })
		}()
		frontdoor.Await(t, held, "the holder's lock")

		var ran atomic.Bool
		waiterDone := make(chan error, 1)
		go func() {
			waiterDone <- waiter.RunExclusive(ctx, key, func(frontdoor.Tx) error { ran.Store(true); return nil }, pgadvisory.WithWait(0))
		}()
		require.Eventually(t, func() bool { return queueRows(t, w.DB, key) == 1 && w.Locks(t, false, key) == 1 },
			30*time.Second, 5*time.Millisecond, "the head of the queue waits for the holder on the server")
		require.Equal(t, int64(2), tries.n.Load(), "the head joined, then waits in its second try")
		require.False(t, ran.Load())

		released = true
		close(release)
		require.NoError(t, frontdoor.Await(t, holderDone, "the holder"))
		require.NoError(t, frontdoor.Await(t, waiterDone, "the waiter"))
		require.True(t, ran.Load())
		require.Equal(t, int64(2), tries.n.Load(), "the second try was granted: no poll")
		require.Zero(t, queueRows(t, w.DB, key), "the queue is empty")
	})
}

// tracedDoor is a front door of driver, on a pool of 2 connections whose
// statements tracer sees, with a Locker of opts.
func tracedDoor(t testing.TB, driver frontdoor.Driver, tracer pgx.QueryTracer, opts ...pgadvisory.LockerOption) frontdoor.Door {
	t.Helper()
	pool := testdb.PoolConfig(t, func(c *pgxpool.Config) {
		c.MaxConns = 2
		c.ConnConfig.Tracer = tracer
	})
	if driver == frontdoor.Pgx {
		return frontdoor.OnPool(pool, opts...)
	}
	return frontdoor.OnDB(testdb.OpenDB(t, pool), opts...)
}

// waitTryCounter is a pgx tracer that counts the wait_try statements
// (queued tries) a pool sends, alone or in a batch.
type waitTryCounter struct{ n atomic.Int64 }

func (c *waitTryCounter) count(sql string) {
	if strings.Contains(sql, "pgadvisory.wait_try(") {
		c.n.Add(1)
	}
}

func (c *waitTryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.count(d.SQL)
	return ctx
}

func (c *waitTryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart counts as the batch is sent (TraceBatchQuery comes as
// each result is read).
func (c *waitTryCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	for _, q := range d.Batch.QueuedQueries {
		c.count(q.SQL)
	}
	return ctx
}

func (c *waitTryCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (c *waitTryCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
