package status_test

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/status"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/keyspace"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestStatusQueuedWaiters: calls waiting in lockgen's queue hold no
// connection, so pg_locks does not show them. While a lock is held, two
// exclusive and one shared waiting call (WithWait) show as one line of
// their own, with the lock's registered name, MODE "queued", not granted,
// no backend, and STATE "3 queued (1 shared)"; in JSON as
// {"waiting": 3, "shared": 1}; the holder's row is there too. Once the
// holder released and the waiters ran, the line is gone. The control: the
// view read alone (Query) lists the holder and at most one waiter, the
// head of the queue waiting on the server for a holder that did not queue.
func TestStatusQueuedWaiters(t *testing.T) {
	db := migrated.DB(t)
	ctx := testdb.Context(t)
	name := "test.status_queue_" + strconv.FormatInt(time.Now().UnixNano()%1e9, 10)
	lock := pgadvisory.Lock{Name: name, ID: keyspace.ID(name)}
	require.NoError(t, pgadvisory.Register(ctx, db, []pgadvisory.Declared{{Name: name, ID: lock.ID}}))
	l, err := pgadvisory.New(pgadvisory.Stdlib(db))
	require.NoError(t, err)

	held, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 4)
	go func() {
		done <- l.RunExclusive(ctx, lock, func(*sql.Tx) error { close(held); <-release; return nil })
	}()
	<-held
	for _, opts := range [][]pgadvisory.Option{nil, {pgadvisory.WithShared()}, nil} {
		go func() {
			done <- l.RunExclusive(ctx, lock, func(*sql.Tx) error { return nil }, append(opts, pgadvisory.WithWait(0))...)
		}()
	}
	queued := func() *status.Lock {
		t.Helper()
		snap, err := status.Read(ctx, db, "")
		require.NoError(t, err)
		var line *status.Lock
		for i, s := range snap.Locks {
			if s.LockID == lock.ID && s.Mode == "queued" {
				require.Nil(t, line, "one line for the queue")
				line = &snap.Locks[i]
			}
		}
		return line
	}
	require.Eventually(t, func() bool { q := queued(); return q != nil && q.Queue.Waiting == 3 }, 30*time.Second, 5*time.Millisecond)
	line := queued()
	require.Equal(t, name, line.Name)
	require.False(t, line.Granted)
	require.Zero(t, line.PID, "a queued call holds no connection")
	require.Equal(t, status.Queue{Waiting: 3, Shared: 1}, *line.Queue)

	var table bytes.Buffer
	require.NoError(t, status.WriteTable(&table, []status.Lock{*line}))
	require.Contains(t, table.String(), "3 queued (1 shared)")
	var js bytes.Buffer
	require.NoError(t, status.WriteJSON(&js, []status.Lock{*line}))
	var out []map[string]any
	require.NoError(t, json.Unmarshal(js.Bytes(), &out))
	require.Equal(t, "queued", out[0]["mode"])
	require.Equal(t, map[string]any{"waiting": 3.0, "shared": 1.0}, out[0]["queue"])

	view, err := status.Query(ctx, db, name)
	require.NoError(t, err)
	granted := 0
	for _, v := range view {
		if v.Granted {
			granted++
		}
	}
	require.Equal(t, 1, granted, "the view lists the holder")
	require.LessOrEqual(t, len(view)-granted, 1, "and at most the head of the queue, which waits on the server for a holder that did not queue")

	close(release)
	for range 4 {
		require.NoError(t, <-done)
	}
	require.Nil(t, queued(), "no waiter left: no line")
}
