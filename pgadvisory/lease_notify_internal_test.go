package pgadvisory

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// TestLeaseReleaseWakesCampaign: with polling switched off (a lease
// campaign sleeps an hour between tries unless woken), a released lease
// wakes the campaign waiting for it: in another Locker on another pool by
// the release's NOTIFY through that Locker's listening connection, and in
// the releasing Locker directly, even when that Locker cannot listen (as
// behind a transaction pooler, where no NOTIFY reaches it).
//
// Steps: A leads with a lease; B (another pool, listening) campaigns, tries
// once and sleeps. A's fn returns: B's fn starts. Then C, a Locker that
// cannot listen, leads with a lease and campaigns for it too; the
// campaign tries once and sleeps; the lead's fn returns: the campaign's fn
// starts.
func TestLeaseReleaseWakesCampaign(t *testing.T) {
	base, calls := pollingOff(t, &leasePollMin, &leasePollMax)
	ctx, cancel := context.WithCancel(base)
	poolA, poolB, poolC := testdb.Pool(t), testdb.Pool(t), testdb.Pool(t)
	db := stdlib.OpenDBFromPool(poolA)
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, Migrate(ctx, db))
	la, err := New(Pgx(poolA))
	require.NoError(t, err)
	lb, err := New(Pgx(poolB))
	require.NoError(t, err)
	lc, err := New(Pgx(poolC))
	require.NoError(t, err)
	lc.s.waits.cannot = true // its listener never starts: no NOTIFY reaches C
	const ttl = 30 * time.Second
	lock := ID(testdb.Key(t))

	// lead starts l.Lead, or l.Campaign, with a lease, whose fn holds the
	// leadership until release is closed (a campaign then ends);
	// started is closed when fn starts.
	lead := func(l *Locker[pgx.Tx], campaign bool, release chan struct{}) (started chan struct{}, done chan error) {
		started, done = make(chan struct{}), make(chan error, 1)
		cctx, stop := context.WithCancel(ctx)
		fn := func(fctx context.Context, _ int64) error {
			close(started)
			select {
			case <-release:
				if campaign {
					stop()
				}
				return nil
			case <-fctx.Done():
				return context.Cause(fctx)
			}
		}
		calls.Add(1)
		go func() {
			defer calls.Done()
			defer stop()
			if campaign {
				done <- l.Campaign(cctx, lock, fn, WithLease(ttl))
				return
			}
			done <- l.Lead(cctx, lock, fn, WithLease(ttl))
		}()
		return started, done
	}
	within := func(ch chan struct{}, d time.Duration) bool {
		select {
		case <-ch:
			return true
		case <-time.After(d):
			return false
		}
	}
	// triedOnce waits until a campaign on pool, which had made acquired
	// acquisitions of it before, tried once (one more) and gave its
	// connection back: it sleeps.
	triedOnce := func(pool *pgxpool.Pool, acquired int64) {
		t.Helper()
		require.Eventually(t, func() bool {
			st := pool.Stat()
			return st.AcquireCount() > acquired && st.AcquiredConns() == 0
		}, 10*time.Second, time.Millisecond, "the campaign tried once")
	}

	releaseA := make(chan struct{})
	startedA, doneA := lead(la, false, releaseA)
	require.True(t, within(startedA, 10*time.Second), "A leads")
	before := poolB.Stat().AcquireCount()
	startedB, doneB := lead(lb, true, make(chan struct{}))
	triedOnce(poolB, before)
	require.Eventually(t, lb.s.waits.listening, 10*time.Second, time.Millisecond, "B listens")
	require.False(t, within(startedB, 100*time.Millisecond), "B waits while A leads")
	close(releaseA)
	require.NoError(t, <-doneA)
	require.True(t, within(startedB, 10*time.Second), "A's release wakes B, another Locker's campaign, by NOTIFY")
	cancel()
	require.NoError(t, <-doneB)

	ctx, cancel = context.WithCancel(base)
	releaseC := make(chan struct{})
	startedC, doneC := lead(lc, false, releaseC)
	require.True(t, within(startedC, 10*time.Second), "C leads")
	before = poolC.Stat().AcquireCount()
	startedC2, doneC2 := lead(lc, true, make(chan struct{}))
	triedOnce(poolC, before)
	require.False(t, within(startedC2, 100*time.Millisecond), "C's campaign waits while C's lead leads")
	require.False(t, lc.s.waits.listening(), "C does not listen")
	close(releaseC)
	require.NoError(t, <-doneC)
	require.True(t, within(startedC2, 10*time.Second), "the release wakes its own Locker's campaign directly")
	cancel()
	require.NoError(t, <-doneC2)
}
