package pgadvisory_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestLeaseCampaignThroughPgBouncer: through PgBouncer in transaction mode,
// two Lockers campaign for one lock with a lease. Each leader leads for a
// while and resigns (fn returns nil); the other campaigner, which was
// polling for the lease meanwhile, gets the next term: strictly greater
// than the last, and the lock's published token. Never two leaders at once;
// the leader holds no pool connection while fn runs; ctx ends both
// campaigns with nil.
func TestLeaseCampaignThroughPgBouncer(t *testing.T) {
	admin := migrated.DB(t)
	url := pgcluster.StartPgBouncer(t, testdb.URL(t), "transaction") + "&default_query_exec_mode=exec"
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		key := testdb.Key(t)
		ctx, cancel := context.WithCancel(testdb.Context(t))
		defer cancel()
		doors := map[string]frontdoor.Door{
			"a": frontdoor.Open(t, drv, frontdoor.URL(url), frontdoor.MaxConns(2)).WithLocker(pgadvisory.WithDefaultHolder("a")),
			"b": frontdoor.Open(t, drv, frontdoor.URL(url), frontdoor.MaxConns(2)).WithLocker(pgadvisory.WithDefaultHolder("b")),
		}
		const ttl = time.Second
		const rounds = 6
		type term struct {
			who  string
			term int64
		}
		var mu sync.Mutex
		var terms []term
		var leading atomic.Int32
		done := make(chan error, len(doors))
		for who, d := range doors {
			go func() {
				done <- d.Campaign(ctx, pgadvisory.ID(key), func(lctx context.Context, tm int64) error {
					if n := leading.Add(1); n != 1 {
						t.Errorf("%d leaders at once", n)
					}
					defer leading.Add(-1)
					if p := fencing.Published(t, admin, key); p != tm {
						t.Errorf("%s's term %d is not the published token %d", who, tm, p)
					}
					if h := leaseHolder(t, admin, key); h != who {
						t.Errorf("the lease's holder is %q, not %q", h, who)
					}
					if n := d.InUse(); n != 0 {
						t.Errorf("%d pool connections held while %s leads", n, who)
					}
					mu.Lock()
					terms = append(terms, term{who, tm})
					n := len(terms)
					mu.Unlock()
					if n >= rounds {
						cancel()
						<-lctx.Done()
						return nil
					}
					select {
					case <-time.After(3 * leaseTestPoll(ttl)):
						return nil // resigns
					case <-lctx.Done():
						return context.Cause(lctx)
					}
				}, pgadvisory.WithLease(ttl))
			}()
		}
		for range doors {
			require.NoError(t, frontdoor.Await(t, done, "a campaign's return"), "ctx ends a campaign with nil")
		}
		require.Len(t, terms, rounds)
		for i := 1; i < len(terms); i++ {
			require.Greater(t, terms[i].term, terms[i-1].term, "terms strictly increase: %v", terms)
			require.NotEqual(t, terms[i-1].who, terms[i].who, "after a resign the other campaigner gets the next term: %v", terms)
		}
		require.Empty(t, leaseHolder(t, admin, key), "released when the last leader returned")
	})
}

// leaseTestPoll is how often a campaign polls for a lease of ttl
// (pgadvisory's leasePoll).
func leaseTestPoll(ttl time.Duration) time.Duration {
	return min(max(ttl/10, 10*time.Millisecond), time.Second)
}

// TestLeaseCampaignTakesExpiredLease: a campaign waits for a lease held by
// a holder that never releases it (its row set by hand, as a crashed
// process leaves it) and takes it once it expired on the database's clock,
// within a few polls, with a term greater than the dead holder's.
func TestLeaseCampaignTakesExpiredLease(t *testing.T) {
	admin := migrated.DB(t)
	frontdoor.ForEach(t, func(t *testing.T, d frontdoor.Door) {
		ctx := testdb.Context(t)
		key := testdb.Key(t)
		old := fencing.Publish(t, admin, key)
		_, err := admin.ExecContext(ctx, `INSERT INTO pgadvisory.lease (lock_id, holder, owner_secret, term, since, expires_at)
			VALUES ($1, 'dead', sha256('x'), $2, clock_timestamp(), clock_timestamp() + interval '1 second')`, key, old)
		require.NoError(t, err)
		const ttl = time.Second
		start := time.Now()
		stop := errors.New("stop")
		var got int64
		err = d.Campaign(ctx, pgadvisory.ID(key), func(_ context.Context, term int64) error {
			got = term
			return stop
		}, pgadvisory.WithLease(ttl))
		require.ErrorIs(t, err, stop)
		require.Greater(t, got, old)
		waited := time.Since(start)
		require.GreaterOrEqual(t, waited, 900*time.Millisecond, "not before the expiry")
		require.Less(t, waited, time.Second+10*leaseTestPoll(ttl), "soon after the expiry")
	})
}

// TestLeaseRunSessionLost: RunSession with WithLease holds the lock as a
// lease (the holder's row, no pool connection held while fn runs, vacant
// at once when fn returns). A renewal that finds the lease expired cancels
// fn's context with ErrLockLost, and so does the holder's own deadline when
// renewals cannot get through (the row held locked by the test): before
// ttl has passed since the lease was taken. RunSession then returns
// ErrLockLost.
func TestLeaseRunSessionLost(t *testing.T) {
	admin := migrated.DB(t)
	frontdoor.ForEach(t, func(t *testing.T, d frontdoor.Door) {
		d = d.WithLocker(pgadvisory.WithDefaultHolder("worker"))
		ctx := testdb.Context(t)
		key := testdb.Key(t)
		const ttl = 1500 * time.Millisecond

		require.NoError(t, d.RunSession(ctx, pgadvisory.ID(key), func(fctx context.Context) error {
			require.Equal(t, "worker", leaseHolder(t, admin, key))
			require.Zero(t, d.InUse(), "no pool connection held while fn runs")
			require.ErrorIs(t, d.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error {
				t.Error("two holders")
				return nil
			}, pgadvisory.WithLease(ttl)), pgadvisory.ErrLocked)
			time.Sleep(3 * ttl / 2)
			return fctx.Err()
		}, pgadvisory.WithLease(ttl)), "renewed: held for more than a ttl")
		require.Empty(t, leaseHolder(t, admin, key), "released at once")

		// Expired on the database: the next renewal finds it.
		err := d.RunSession(ctx, pgadvisory.ID(key), func(fctx context.Context) error {
			_, err := admin.ExecContext(ctx, `UPDATE pgadvisory.lease SET expires_at = clock_timestamp() - interval '1 second' WHERE lock_id = $1`, key)
			require.NoError(t, err)
			select {
			case <-fctx.Done():
				require.ErrorIs(t, context.Cause(fctx), pgadvisory.ErrLockLost)
				return context.Cause(fctx)
			case <-time.After(2 * ttl):
				t.Error("fn's context was not canceled")
				return nil
			}
		}, pgadvisory.WithLease(ttl))
		require.ErrorIs(t, err, pgadvisory.ErrLockLost)
		require.ErrorContains(t, err, "expired")

		// Renewals blocked: canceled at the holder's own deadline, before
		// the lease expires on the database.
		var taken time.Time
		err = d.RunSession(ctx, pgadvisory.ID(key), func(fctx context.Context) error {
			taken = time.Now()
			tx, err := admin.BeginTx(ctx, nil)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback() }()
			_, err = tx.ExecContext(ctx, `SELECT 1 FROM pgadvisory.lease WHERE lock_id = $1 FOR UPDATE`, key)
			require.NoError(t, err)
			select {
			case <-fctx.Done():
				require.Less(t, time.Since(taken), ttl, "canceled before the deadline")
				return context.Cause(fctx)
			case <-time.After(2 * ttl):
				t.Error("fn's context was not canceled")
				return nil
			}
		}, pgadvisory.WithLease(ttl))
		require.ErrorIs(t, err, pgadvisory.ErrLockLost)
		require.ErrorContains(t, err, "not renewed within its ttl")
	})
}
