package fencing

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Doors returns both front doors, each with a pool of four connections for
// the lock calls (with server settings, may be nil) and another for fenced
// writes (RunFenced), as a holder writing on a second connection has.
func Doors(t testing.TB, settings map[string]string) []frontdoor.Door {
	t.Helper()
	doors := make([]frontdoor.Door, len(frontdoor.Drivers))
	for i, drv := range frontdoor.Drivers {
		lock := frontdoor.Open(t, drv, frontdoor.MaxConns(4), frontdoor.Settings(settings))
		doors[i] = lock.WithWrites(frontdoor.Open(t, drv, frontdoor.MaxConns(4)))
	}
	return doors
}

// Holder takes lockID through door with fencing, runs write (if not nil) in
// the lock transaction, and returns its token.
func Holder(t testing.TB, ctx context.Context, door frontdoor.Door, lockID int64, write func(frontdoor.Tx) error) int64 {
	t.Helper()
	var tok int64
	require.NoError(t, door.RunExclusive(ctx, lockID, func(tx frontdoor.Tx) error {
		tok, _ = tx.FencingToken()
		if write != nil {
			return write(tx)
		}
		return nil
	}, pgadvisory.WithFencing()))
	require.NotZero(t, tok)
	return tok
}

// OpenWriter starts a RunFenced transaction with token that inserts row id
// into table and stays open until release is called (or t ends). It returns
// the writer's backend pid and a channel with RunFenced's result.
func OpenWriter(t testing.TB, ctx context.Context, door frontdoor.Door, table string, token, id int64) (pid int64, release func(), done <-chan error) {
	t.Helper()
	pids := make(chan int64, 1)
	rel := make(chan struct{})
	release = sync.OnceFunc(func() { close(rel) })
	t.Cleanup(release)
	res := make(chan error, 1)
	go func() {
		res <- door.RunFenced(ctx, token, func(tx frontdoor.Tx) error {
			pid, err := tx.QueryInt(ctx, `SELECT pg_backend_pid()`)
			if err != nil {
				return err
			}
			if err := tx.Exec(ctx, `INSERT INTO `+table+` (id, balance) VALUES ($1, 0)`, id); err != nil {
				return err
			}
			pids <- pid
			select {
			case <-rel:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	select {
	case pid = <-pids:
	case err := <-res:
		t.Fatalf("fencing: writer ended before its write: %v", err)
	}
	return pid, release, res
}

// Call is what a holder started by [StartHolder] got.
type Call struct {
	Token int64 // its token (0 if it got none)
	Ran   bool  // whether fn ran
	Err   error // the call's error
}

// StartHolder runs a fenced holder of lockID through door in the
// background, whose fn updates every row of table through the lock
// transaction; ran is set as soon as fn runs.
func StartHolder(ctx context.Context, door frontdoor.Door, lockID int64, table string, ran *atomic.Bool) <-chan Call {
	out := make(chan Call, 1)
	go func() {
		var c Call
		c.Err = door.RunExclusive(ctx, lockID, func(tx frontdoor.Tx) error {
			ran.Store(true)
			c.Ran = true
			c.Token, _ = tx.FencingToken()
			return tx.Exec(ctx, `UPDATE `+table+` SET balance = balance + 1`)
		}, pgadvisory.WithFencing())
		out <- c
	}()
	return out
}
