package pgadvisory_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Publish ordering: the next holder's publish waits for a write in flight
// with the old token and completes once it ends, so no write with the old
// token commits after a newer token is published. The control shows that
// without the trigger nothing orders them.

func TestFencingPublishOrdering(t *testing.T) {
	admin := migrated.DB(t)
	doors := fencing.Doors(t, nil)

	// (a) The next holder's publish waits for the write in flight with the
	// old token, and completes once it ends; no T1 write commits after it.
	for _, door := range doors {
		t.Run("waits_then_succeeds/"+door.Label(), func(t *testing.T) {
			ctx := testdb.Context(t)
			key := testdb.Key(t)
			tbl := fencing.Table(t, admin, testdb.Schema(t), "accounts", key, "strict")
			t1 := fencing.Holder(t, ctx, door, key, func(tx frontdoor.Tx) error {
				return tx.Exec(ctx, `INSERT INTO `+tbl+` (id, balance) VALUES (1, 0)`)
			})
			wPid, release, wDone := fencing.OpenWriter(t, ctx, door, tbl, t1, 2)

			var bRan atomic.Bool
			bDone := fencing.StartHolder(ctx, door, key, tbl, &bRan)
			require.Eventually(t, func() bool {
				return witness.Of(admin).BlockedBy(t, wPid, "%fence_acquire%") == 1
			}, 30*time.Second, 10*time.Millisecond, "B's publish must wait for the open T1 writer")
			time.Sleep(200 * time.Millisecond) // the old writer stays open a while
			require.False(t, bRan.Load(), "B's fn must not run before its token is published")
			require.Equal(t, t1, fencing.Published(t, admin, key))
			require.Equal(t, int64(1), witness.Of(admin).BlockedBy(t, wPid, "%fence_acquire%"))

			release()
			require.NoError(t, frontdoor.Await(t, wDone, "the T1 writer"), "T1 was current until the writer ended")
			b := frontdoor.Await(t, bDone, "B")
			require.NoError(t, b.Err)
			require.Greater(t, b.Token, t1)
			require.Equal(t, b.Token, fencing.Published(t, admin, key))
			// B's fn ran after the T1 write committed: it updated row 2 too.
			require.Equal(t, map[int64]fencing.Row{1: {Balance: 1, Token: b.Token}, 2: {Balance: 1, Token: b.Token}}, fencing.Rows(t, admin, tbl))

			// Any T1 write attempted after the publish is rejected.
			err := door.RunFenced(ctx, t1, func(tx frontdoor.Tx) error {
				return tx.Exec(ctx, `INSERT INTO `+tbl+` (id, balance) VALUES (3, 0)`)
			})
			sqlstate.RequireKind(t, err, pgadvisory.ErrStaleToken, "LF001")
			require.Len(t, fencing.Rows(t, admin, tbl), 2)
		})
	}

	// (b) The publish with a short publish timeout fails with 55P03 while the
	// old writer is open (fence_acquire, the function every fenced call
	// runs, with 200ms), and leaves no lock on its session.
	t.Run("short_wait_times_out", func(t *testing.T) {
		ctx := testdb.Context(t)
		door := doors[1]
		key := testdb.Key(t)
		tbl := fencing.Table(t, admin, testdb.Schema(t), "accounts", key, "strict")
		t1 := fencing.Holder(t, ctx, door, key, nil)
		_, release, wDone := fencing.OpenWriter(t, ctx, door, tbl, t1, 1)

		conn, err := admin.Conn(ctx)
		require.NoError(t, err)
		defer conn.Close()
		tx, err := conn.BeginTx(ctx, nil)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }() // before conn.Close, which waits for tx
		var granted bool
		err = tx.QueryRowContext(ctx, `SELECT granted FROM pgadvisory.fence_acquire(ARRAY[$1]::bigint[], false, NULL, '200ms')`, key).Scan(&granted)
		sqlstate.Require(t, err, "55P03")
		require.Equal(t, 0, len(witness.Of(admin).Holds(t, key)), "the failed publish released its session lock")

		release()
		require.NoError(t, frontdoor.Await(t, wDone, "the T1 writer"))
		require.Equal(t, t1, fencing.Published(t, admin, key))
	})

	// (b') Through the runtime the wait is defaultPublishTimeout (5 s): a
	// writer that stays open longer makes the next holder fail with
	// ErrLockTimeout at the publish step, without calling fn. It draws no
	// token; T1 stays current, and a later holder succeeds.
	for _, door := range doors {
		t.Run("runtime_publish_timeout/"+door.Label(), func(t *testing.T) {
			t.Parallel() // the two doors wait their 5 s together
			ctx := testdb.Context(t)
			key := testdb.Key(t)
			tbl := fencing.Table(t, admin, testdb.Schema(t), "accounts", key, "strict")
			t1 := fencing.Holder(t, ctx, door, key, nil)
			_, release, wDone := fencing.OpenWriter(t, ctx, door, tbl, t1, 1)

			var bRan atomic.Bool
			b := frontdoor.Await(t, fencing.StartHolder(ctx, door, key, tbl, &bRan), "B's publish to time out")
			require.False(t, b.Ran)
			require.ErrorIs(t, b.Err, pgadvisory.ErrLockTimeout)
			require.Equal(t, "55P03", pgadvisory.SQLState(b.Err))
			var pe *pgadvisory.Error
			require.ErrorAs(t, b.Err, &pe)
			require.Equal(t, pgadvisory.OpPublish, pe.Op)
			require.Equal(t, []int64{key}, pe.LockIDs)
			require.Equal(t, t1, fencing.Published(t, admin, key))

			release()
			require.NoError(t, frontdoor.Await(t, wDone, "the T1 writer"), "B never published: T1 is still current")
			var cRan atomic.Bool
			c := frontdoor.Await(t, fencing.StartHolder(ctx, door, key, tbl, &cRan), "C")
			require.NoError(t, c.Err)
			// B gave up before drawing a token (the fence row is locked
			// first), so C's may be T1's successor; other tests draw from
			// the same sequence meanwhile, so only "newer" is certain.
			require.Greater(t, c.Token, t1, "C's token is newer than T1's")
			require.Equal(t, map[int64]fencing.Row{1: {Balance: 1, Token: c.Token}}, fencing.Rows(t, admin, tbl))
		})
	}

	// CONTROL: without the trigger nothing orders the publish after the old
	// writer: B publishes and finishes while the T1 writer is open, and the
	// T1 write then commits after the newer publish.
	for _, door := range doors {
		t.Run("control_no_trigger/"+door.Label(), func(t *testing.T) {
			ctx := testdb.Context(t)
			key := testdb.Key(t)
			tbl := fencing.Table(t, admin, testdb.Schema(t), "accounts", key, "")
			t1 := fencing.Holder(t, ctx, door, key, nil)
			_, release, wDone := fencing.OpenWriter(t, ctx, door, tbl, t1, 1)

			var bRan atomic.Bool
			b := frontdoor.Await(t, fencing.StartHolder(ctx, door, key, tbl, &bRan), "B")
			require.NoError(t, b.Err)
			require.Equal(t, b.Token, fencing.Published(t, admin, key), "B published while the T1 writer was open")
			release()
			require.NoError(t, frontdoor.Await(t, wDone, "the T1 writer"), "the T1 write committed after the newer publish")
			require.Contains(t, fencing.Rows(t, admin, tbl), int64(1))
		})
	}
}
