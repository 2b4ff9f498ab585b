package pgadvisory_test

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/faultproxy"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestFencedWaitCanceledUnreadLeavesNothing: a waiting fenced call's try
// commits its place in the queue within its message (COMMIT AND CHAIN),
// before the call reads the place the try returned. Here the server's
// answer to the first try never reaches the call (a proxy holds it), so
// the call cannot know its row, and its ctx ends: it returns ctx's error
// and still leaves no row behind, found by the call's own number (the
// row's caller column). Both front doors.
func TestFencedWaitCanceledUnreadLeavesNothing(t *testing.T) {
	admin := migrated.DB(t)
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		key := testdb.Key(t)
		px := faultproxy.ToTestDB(t)
		door := frontdoor.Open(t, drv, frontdoor.MaxConns(2), frontdoor.Configure(px.Route))
		t.Cleanup(px.CutAll) // ends the held link before the pool closes
		release := holdSession(t, admin, key)
		defer release()

		var armed, held atomic.Bool
		px.OnClientWrite(func(p []byte) faultproxy.Action {
			if bytes.Contains(p, []byte("fence_wait_try")) && !held.Load() {
				armed.Store(true)
			}
			return faultproxy.Forward
		})
		// The answer that holds COMMIT AND CHAIN's "COMMIT" tag: the try
		// ran to its end on the server.
		px.OnServerWrite(func(p []byte) faultproxy.Action {
			if armed.Load() && bytes.Contains(p, []byte("COMMIT\x00")) && held.CompareAndSwap(false, true) {
				return faultproxy.HoldClient
			}
			return faultproxy.Forward
		})

		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			done <- door.RunExclusive(cctx, key, func(frontdoor.Tx) error { return nil },
				pgadvisory.WithWait(0), pgadvisory.WithFencing())
		}()
		require.Eventually(t, func() bool { return queueRows(t, admin, key) == 1 }, 30*time.Second, 2*time.Millisecond,
			"the try's row committed")
		require.Eventually(t, held.Load, 30*time.Second, 2*time.Millisecond, "the answer is held")
		cancel()
		require.ErrorIs(t, frontdoor.Await(t, done, "the canceled call"), context.Canceled)
		require.Zero(t, queueRows(t, admin, key), "a call that never read its place leaves no row")
	})
}
