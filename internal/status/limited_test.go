package status_test

import (
	"bytes"
	"database/sql"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/status"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/keyspace"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestStatusLimitedLock: a limited lock with 2 of its 3 slots held
// (RunLimited) and a SQL job waiting in the server's queue for one of
// them shows as one line, "2/3 held, 1 waiting", with its registered name,
// in the table and in JSON; its slots' keys do not show as rows of their
// own. The control: the view read alone (Query) lists the three slot-key
// rows, unnamed.
func TestStatusLimitedLock(t *testing.T) {
	db := migrated.DB(t)
	ctx := testdb.Context(t)
	name := "test.status_limited_" + strconv.FormatInt(time.Now().UnixNano()%1e9, 10)
	lock := pgadvisory.Lock{Name: name, ID: keyspace.ID(name)}
	require.NoError(t, pgadvisory.Register(ctx, db, []pgadvisory.Declared{{Name: name, ID: lock.ID}}))
	l, err := pgadvisory.New(pgadvisory.Stdlib(db))
	require.NoError(t, err)

	release := make(chan struct{})
	entered := make(chan int, 2)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			assertNoErr(t, l.RunLimited(ctx, lock, 3, func(tx *sql.Tx) error {
				s, _ := l.Slot(tx)
				entered <- s
				<-release
				return nil
			}, pgadvisory.WithWait(10*time.Second)))
		}()
	}
	held := []int{<-entered, <-entered}
	defer func() { close(release); wg.Wait() }()
	// A SQL job blocks on a held slot's key.
	waiter, err := db.Conn(ctx)
	require.NoError(t, err)
	defer waiter.Close()
	waiting := make(chan error, 1)
	go func() {
		_, err := waiter.ExecContext(ctx, `SELECT pg_advisory_lock(pgadvisory.slot_id($1, $2))`, lock.ID, held[0])
		waiting <- err
	}()
	slotKeys := []int64{keyspace.SlotID(lock.ID, 0), keyspace.SlotID(lock.ID, 1), keyspace.SlotID(lock.ID, 2)}
	require.Eventually(t, func() bool {
		raw, err := status.Query(ctx, db, "")
		require.NoError(t, err)
		n := 0
		for _, r := range raw {
			for _, k := range slotKeys {
				if r.LockID == k {
					require.Empty(t, r.Name, "slot keys are not registered")
					n++
				}
			}
		}
		return n == 3
	}, 10*time.Second, 10*time.Millisecond, "control: the view lists two holders and the waiter of slot keys")

	snap, err := status.Read(ctx, db, "")
	require.NoError(t, err)
	var line *status.Lock
	for i, r := range snap.Locks {
		for _, k := range slotKeys {
			require.NotEqual(t, k, r.LockID, "a slot key's row is folded into its lock's line")
		}
		if r.Name == name {
			require.Nil(t, line, "one line per limited lock")
			line = &snap.Locks[i]
		}
	}
	require.NotNil(t, line)
	require.Equal(t, &status.Limited{N: 3, Held: 2, Waiting: 1}, line.Limited)
	require.Equal(t, lock.ID, line.LockID)
	require.Equal(t, "limited", line.Mode)
	var table bytes.Buffer
	require.NoError(t, status.WriteTable(&table, []status.Lock{*line}))
	require.Contains(t, table.String(), name)
	require.Contains(t, table.String(), "2/3 held, 1 waiting")
	js := status.ToJSON(*line)
	require.Equal(t, &status.JSONLimit{N: 3, Held: 2, Waiting: 1}, js.Limit)

	// The prefix keeps it.
	snap, err = status.Read(ctx, db, name)
	require.NoError(t, err)
	require.Len(t, snap.Locks, 1)
	require.Equal(t, name, snap.Locks[0].Name)

	// Free the waiter: its call gets the lock once the holders are gone.
	_, err = db.ExecContext(ctx, `SELECT pg_cancel_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
		AND ((classid::bigint << 32) | objid::bigint) = $1`, slotKeys[held[0]])
	require.NoError(t, err)
	<-waiting
}

// assertNoErr reports err from a goroutine other than the test's.
func assertNoErr(t *testing.T, err error) {
	if err != nil {
		t.Error(err)
	}
}

// TestStatusLimitedCountsServerWaitersOnly: "W waiting" counts the backends
// that wait in the server's queue for a slot key (a SQL job), not lockgen's
// waiting calls (RunLimited WithWait), which hold no connection while they
// wait and are registered only in their own process's Locker, which status,
// run from another process, cannot see. With the slot of a lock of n = 1
// held, a SQL job and a lockgen call waiting for it show as "1/1 held,
// 1 waiting" (the control: the job is counted) while the call waits; the
// call then gets the slot once the holder and the job are gone, so it was
// waiting all along.
func TestStatusLimitedCountsServerWaitersOnly(t *testing.T) {
	db := migrated.DB(t)
	ctx := testdb.Context(t)
	lock := pgadvisory.ID(testdb.Key(t))
	l, err := pgadvisory.New(pgadvisory.Stdlib(db))
	require.NoError(t, err)

	release := make(chan struct{})
	entered := make(chan struct{})
	holderDone := make(chan error, 1)
	go func() {
		holderDone <- l.RunLimited(ctx, lock, 1, func(*sql.Tx) error {
			close(entered)
			<-release
			return nil
		})
	}()
	<-entered
	job, err := db.Conn(ctx)
	require.NoError(t, err)
	defer job.Close()
	jobDone := make(chan error, 1)
	go func() {
		_, err := job.ExecContext(ctx, `SELECT pg_advisory_xact_lock(pgadvisory.slot_id($1, 0))`, lock.ID)
		jobDone <- err
	}()
	waiterRan := make(chan struct{})
	waiterDone := make(chan error, 1)
	go func() {
		waiterDone <- l.RunLimited(ctx, lock, 1, func(*sql.Tx) error {
			close(waiterRan)
			return nil
		}, pgadvisory.WithWait(30*time.Second))
	}()

	limited := func() *status.Limited {
		snap, err := status.Read(ctx, db, "")
		require.NoError(t, err)
		for _, r := range snap.Locks {
			if r.LockID == lock.ID {
				return r.Limited
			}
		}
		return nil
	}
	require.Eventually(t, func() bool {
		lim := limited()
		return lim != nil && lim.Waiting == 1
	}, 20*time.Second, 100*time.Millisecond, "control: the SQL job is counted")
	// The call has tried and is waiting by now (its first try is one
	// statement; status.Read takes longer); it is not counted.
	require.Equal(t, &status.Limited{N: 1, Held: 1, Waiting: 1}, limited(), "the lockgen call is not counted")
	select {
	case <-waiterRan:
		t.Fatal("the lockgen call ran while the slot was held")
	default:
	}

	close(release)
	require.NoError(t, <-holderDone)
	// The job, granted the slot key in the server's queue, ends its
	// statement's transaction at once; then the call gets the slot.
	require.NoError(t, <-jobDone)
	select {
	case <-waiterRan:
	case <-time.After(20 * time.Second):
		t.Fatal("the lockgen call did not get the slot: it was not waiting")
	}
	require.NoError(t, <-waiterDone)
}
