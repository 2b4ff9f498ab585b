package pgadvisory_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
)

// Writers with the same token do not block each other: the fence trigger
// takes no lock that a writer of the current token waits on. The control
// shows that the check detects blocking: writers of the same row do block.

func TestFencingSameTokenWritersDoNotBlock(t *testing.T) {
	admin := migrated.DB(t)
	for _, door := range fencing.Doors(t, nil) {
		t.Run(door.Label(), func(t *testing.T) {
			ctx := testdb.Context(t)
			key := testdb.Key(t)
			tbl := fencing.Table(t, admin, testdb.Schema(t), "accounts", key, "strict")
			tok := fencing.Holder(t, ctx, door, key, nil)

			// Both writers have written (fencing.OpenWriter returns after the
			// INSERT) while the other is open.
			pid1, release1, done1 := fencing.OpenWriter(t, ctx, door, tbl, tok, 1)
			pid2, release2, done2 := fencing.OpenWriter(t, ctx, door, tbl, tok, 2)
			require.Zero(t, witness.Of(admin).BlockedBy(t, pid1, "%"))
			require.Zero(t, witness.Of(admin).BlockedBy(t, pid2, "%"))
			release2()
			require.NoError(t, frontdoor.Await(t, done2, "writer 2"))
			release1()
			require.NoError(t, frontdoor.Await(t, done1, "writer 1"))
			require.Equal(t, map[int64]fencing.Row{1: {Balance: 0, Token: tok}, 2: {Balance: 0, Token: tok}}, fencing.Rows(t, admin, tbl))
		})
	}
}

// TestFencingSameTokenControl shows that the check above detects blocking:
// two same-token writers of the same row do block (the row lock), and the
// second one's write is not done while the first is open.
func TestFencingSameTokenControl(t *testing.T) {
	admin := migrated.DB(t)
	door := fencing.Doors(t, nil)[1]
	ctx := testdb.Context(t)
	key := testdb.Key(t)
	tbl := fencing.Table(t, admin, testdb.Schema(t), "accounts", key, "strict")
	tok := fencing.Holder(t, ctx, door, key, func(tx frontdoor.Tx) error {
		return tx.Exec(ctx, `INSERT INTO `+tbl+` (id, balance) VALUES (1, 0)`)
	})

	pids := make(chan int64, 1)
	rel := make(chan struct{})
	release := sync.OnceFunc(func() { close(rel) })
	t.Cleanup(release)
	done1 := make(chan error, 1)
	go func() {
		done1 <- door.RunFenced(ctx, tok, func(tx frontdoor.Tx) error {
			pid, err := tx.QueryInt(ctx, `SELECT pg_backend_pid()`)
			if err != nil {
				return err
			}
			if err := tx.Exec(ctx, `UPDATE `+tbl+` SET balance = balance + 1 WHERE id = 1`); err != nil {
				return err
			}
			pids <- pid
			<-rel
			return nil
		})
	}()
	pid1 := frontdoor.Await(t, pids, "writer 1")

	var updated atomic.Bool
	done2 := make(chan error, 1)
	go func() {
		done2 <- door.RunFenced(ctx, tok, func(tx frontdoor.Tx) error {
			err := tx.Exec(ctx, `UPDATE `+tbl+` SET balance = balance + 1 WHERE id = 1`)
			updated.Store(true)
			return err
		})
	}()
	require.Eventually(t, func() bool {
		return witness.Of(admin).BlockedBy(t, pid1, "%UPDATE%") == 1
	}, 30*time.Second, 10*time.Millisecond, "a writer of the same row must block")
	require.False(t, updated.Load(), "the blocked write is not done while the other writer is open")
	release()
	require.NoError(t, frontdoor.Await(t, done1, "writer 1"))
	require.NoError(t, frontdoor.Await(t, done2, "writer 2"))
	require.True(t, updated.Load())
	require.Equal(t, int64(2), fencing.Rows(t, admin, tbl)[1].Balance)
}
