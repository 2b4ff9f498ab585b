package pgadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/wirecount"
	"github.com/lockgen/lockgen/pgadvisory"
)

// leaseHolder reads the holder of lock's lease ("" when vacant).
func leaseHolder(t *testing.T, admin *sql.DB, lock int64) string {
	t.Helper()
	var h sql.NullString
	err := admin.QueryRow(`SELECT holder FROM pgadvisory.lease WHERE lock_id = $1`, lock).Scan(&h)
	if errors.Is(err, sql.ErrNoRows) {
		return ""
	}
	require.NoError(t, err)
	return h.String
}

// TestLeaseLeadThroughPgBouncer: through PgBouncer in transaction mode,
// where Lead without WithLease is refused, two Lockers (a database/sql and
// a pgx one, as two processes would be) take turns leading with a lease:
// each term is greater than the last and is the published token, the other
// Locker is refused (ErrLocked) while a leader's fn runs, also after more
// than a ttl (the renewals keep the lease), no pool connection is held
// while fn runs, the leader's fenced writes through PgBouncer are
// accepted, and when fn returns the lease is vacant at once.
func TestLeaseLeadThroughPgBouncer(t *testing.T) {
	admin := migrated.DB(t)
	e := newPgBouncerPools(t, "exec")
	ctx := testdb.Context(t)
	key := testdb.Key(t)
	lock := pgadvisory.ID(key)
	tbl := fencing.Table(t, admin, testdb.Schema(t), "accounts", key, "strict")
	_, err := admin.Exec(`INSERT INTO ` + tbl + ` (id, balance) VALUES (1, 0)`)
	require.Error(t, err, "control: the fenced table refuses a write without a token")
	require.NoError(t, fencing.Write(admin, fencing.Publish(t, admin, key), `INSERT INTO `+tbl+` (id, balance) VALUES (1, 0)`))

	a, err := pgadvisory.New(pgadvisory.Stdlib(e.db), pgadvisory.WithDefaultHolder("a"))
	require.NoError(t, err)
	b, err := pgadvisory.New(pgadvisory.Pgx(e.pool), pgadvisory.WithDefaultHolder("b"))
	require.NoError(t, err)
	inUse := map[string]func() int{
		"a": func() int { return e.db.Stats().InUse },
		"b": func() int { return int(e.pool.Stat().AcquiredConns()) },
	}
	type leader interface {
		Lead(context.Context, pgadvisory.Lock, func(context.Context, int64) error, ...pgadvisory.Option) error
	}
	lockers := map[string]leader{"a": a, "b": b}
	fenced := map[string]func(term int64, balance int) error{
		"a": func(term int64, balance int) error {
			return a.RunFenced(ctx, term, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, `UPDATE `+tbl+` SET balance = $1 WHERE id = 1`, balance)
				return err
			})
		},
		"b": func(term int64, balance int) error {
			return fencing.Write(admin, term, fmt.Sprintf(`UPDATE %s SET balance = %d WHERE id = 1`, tbl, balance))
		},
	}

	// Control: without WithLease, Lead is refused here.
	err = a.Lead(ctx, lock, func(context.Context, int64) error { return nil })
	require.ErrorIs(t, err, pgadvisory.ErrTransactionPooler)
	require.ErrorContains(t, err, "lead with WithLease", "the refusal says what works")

	const ttl = time.Second
	var last int64
	var leading atomic.Int32
	for round := 0; round < 4; round++ {
		me, other := "a", "b"
		if round%2 == 1 {
			me, other = "b", "a"
		}
		ran := false
		err := lockers[me].Lead(ctx, lock, func(fctx context.Context, term int64) error {
			ran = true
			if n := leading.Add(1); n != 1 {
				t.Errorf("%d leaders at once", n)
			}
			defer leading.Add(-1)
			require.Greater(t, term, last, "terms strictly increase")
			last = term
			require.Equal(t, term, fencing.Published(t, admin, key), "the term is the published token")
			require.Equal(t, me, leaseHolder(t, admin, key))
			require.Zero(t, inUse[me](), "no pool connection held while fn runs")
			require.ErrorIs(t, lockers[other].Lead(ctx, lock, func(context.Context, int64) error {
				t.Error("two leaders")
				return nil
			}, pgadvisory.WithLease(ttl)), pgadvisory.ErrLocked)
			time.Sleep(3 * ttl / 2)
			require.NoError(t, fctx.Err(), "renewed: still the leader after more than a ttl")
			require.ErrorIs(t, lockers[other].Lead(ctx, lock, func(context.Context, int64) error {
				t.Error("two leaders")
				return nil
			}, pgadvisory.WithLease(ttl)), pgadvisory.ErrLocked, "still held after more than a ttl")
			require.NoError(t, fenced[me](term, round), "the leader's fenced write")
			return nil
		}, pgadvisory.WithLease(ttl))
		require.NoError(t, err, "round %d", round)
		require.True(t, ran)
		require.Empty(t, leaseHolder(t, admin, key), "released at once when fn returned")
	}
	require.Equal(t, fencing.Row{Balance: 3, Token: last}, fencing.Rows(t, admin, tbl)[1])
}

// TestLeasePausedHolderLosesAndIsFenced: a holder whose renewals cannot get
// through (the test holds its lease row locked, as a stalled link or a
// paused process would leave it) has its fn's context canceled with
// ErrLockLost at its own deadline, before the lease expires on the
// database; once another Locker takes the lease, the old holder's fenced
// writes fail with ErrStaleToken, while the control, the same write to an
// unfenced table, lands beside the new leader's. The old holder's release
// leaves the new holder's lease alone, and its Lead reports the loss.
func TestLeasePausedHolderLosesAndIsFenced(t *testing.T) {
	admin := migrated.DB(t)
	ctx := testdb.Context(t)
	key := testdb.Key(t)
	lock := pgadvisory.ID(key)
	schema := testdb.Schema(t)
	tbl := fencing.Table(t, admin, schema, "accounts", key, "strict")
	control := fencing.Table(t, admin, schema, "control", key, "")
	a, err := pgadvisory.New(pgadvisory.Pgx(testdb.Pool(t)), pgadvisory.WithDefaultHolder("a"))
	require.NoError(t, err)
	b, err := pgadvisory.New(pgadvisory.Stdlib(testdb.DB(t)), pgadvisory.WithDefaultHolder("b"))
	require.NoError(t, err)

	// The holder stops a tenth of the TTL before its lease expires: at 4s,
	// 400ms, which a busy machine's scheduling does not eat up before the
	// test looks at the database's clock.
	const ttl = 4 * time.Second
	leading := make(chan int64)
	resume := make(chan struct{})
	var cause error
	var staleErr, controlErr error
	aDone := make(chan error, 1)
	go func() {
		aDone <- a.Lead(ctx, lock, func(fctx context.Context, term int64) error {
			leading <- term
			<-fctx.Done()
			cause = context.Cause(fctx)
			leading <- term
			<-resume // paused past the takeover; then writes as if still the leader
			staleErr = a.RunFenced(ctx, term, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO `+tbl+` (id, balance) VALUES (2, 99)`)
				return err
			})
			controlErr = fencing.Write(admin, term, fmt.Sprintf(`INSERT INTO %s (id, balance, fencing_token) VALUES (2, 99, %d)`, control, term))
			return nil
		}, pgadvisory.WithLease(ttl))
	}()
	term1 := frontdoor.Await(t, leading, "the first leader's term")

	// Block the renewals: the lease row stays locked by this transaction.
	blocker, err := admin.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = blocker.Rollback() }()
	var expires time.Time
	require.NoError(t, blocker.QueryRow(`SELECT expires_at FROM pgadvisory.lease WHERE lock_id = $1 FOR UPDATE`, key).Scan(&expires))

	select {
	case <-leading:
	case <-time.After(10 * ttl):
		t.Fatal("the holder's context was not canceled")
	}
	require.ErrorIs(t, cause, pgadvisory.ErrLockLost)
	var expired bool
	require.NoError(t, admin.QueryRow(`SELECT $1::timestamptz < clock_timestamp()`, expires).Scan(&expired))
	require.False(t, expired, "the holder stopped before its lease expired on the database")

	// Wait for the expiry on the database's clock, then let go of the row.
	for !expired {
		time.Sleep(50 * time.Millisecond)
		require.NoError(t, admin.QueryRow(`SELECT $1::timestamptz < clock_timestamp()`, expires).Scan(&expired))
	}
	require.NoError(t, blocker.Commit())

	var term2 int64
	bLeads := make(chan struct{})
	bDone := make(chan error, 1)
	bRelease := make(chan struct{})
	go func() {
		bDone <- b.Lead(ctx, lock, func(fctx context.Context, term int64) error {
			term2 = term
			require.NoError(t, fencing.Write(admin, term, fmt.Sprintf(`INSERT INTO %s (id, balance) VALUES (1, 10)`, tbl)))
			require.NoError(t, fencing.Write(admin, term, fmt.Sprintf(`INSERT INTO %s (id, balance, fencing_token) VALUES (1, 10, %d)`, control, term)))
			close(bLeads)
			<-bRelease
			return fctx.Err()
		}, pgadvisory.WithLease(ttl))
	}()
	frontdoor.Await(t, bLeads, "the second leader")
	require.Greater(t, term2, term1)

	close(resume)
	err = frontdoor.Await(t, aDone, "the paused leader's return")
	require.ErrorIs(t, staleErr, pgadvisory.ErrStaleToken, "the old term's fenced write is rejected")
	require.NoError(t, controlErr, "control: the unfenced write of the old term lands")
	require.ErrorIs(t, err, pgadvisory.ErrLockLost)
	var pe *pgadvisory.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, pgadvisory.OpWatch, pe.Op)
	require.Equal(t, "b", leaseHolder(t, admin, key), "the old holder's release left the new lease alone")
	require.Equal(t, map[int64]fencing.Row{1: {Balance: 10, Token: term2}}, fencing.Rows(t, admin, tbl))
	require.Len(t, fencing.Rows(t, admin, control), 2, "control: both leaders' writes landed")

	close(bRelease)
	require.NoError(t, frontdoor.Await(t, bDone, "the second leader's return"), "the new leader kept its lease")
}

// TestLeaseRenewalFindsSuperseded: a renewal that finds the lease's term
// superseded (a newer token published for the lock) cancels fn's context
// with ErrLockLost without waiting for the deadline.
func TestLeaseRenewalFindsSuperseded(t *testing.T) {
	admin := migrated.DB(t)
	ctx := testdb.Context(t)
	key := testdb.Key(t)
	l, err := pgadvisory.New(pgadvisory.Pgx(testdb.Pool(t)))
	require.NoError(t, err)
	const ttl = 30 * time.Second // renewed every 10s: the loss comes from the renewal
	var published bool
	err = l.Lead(ctx, pgadvisory.ID(key), func(fctx context.Context, term int64) error {
		require.Greater(t, fencing.Publish(t, admin, key), term)
		published = true
		select {
		case <-fctx.Done():
			return context.Cause(fctx)
		case <-time.After(ttl):
			return errors.New("not canceled")
		}
	}, pgadvisory.WithLease(ttl))
	require.True(t, published)
	require.ErrorIs(t, err, pgadvisory.ErrLockLost)
	require.ErrorContains(t, err, "superseded")
}

// TestLeaseBatchedRenewal: one Locker's leases are renewed together: taken
// one after another over one ttl, all of its leases with one ttl stay held
// across several ttls, and their expiries come together (one statement
// renews them all; renewed one by one, each on its own schedule, they would
// stay spread over a ttl).
func TestLeaseBatchedRenewal(t *testing.T) {
	admin := migrated.DB(t)
	ctx := testdb.Context(t)
	l, err := pgadvisory.New(pgadvisory.Pgx(testdb.Pool(t)))
	require.NoError(t, err)
	const n = 20
	const ttl = 1500 * time.Millisecond
	keys := make([]int64, n)
	started := make(chan struct{}, n)
	stop := make(chan struct{})
	done := make(chan error, n)
	for i := range keys {
		keys[i] = testdb.Key(t)
		time.Sleep(ttl / n) // the leases start spread over one ttl
		go func(key int64) {
			done <- l.Lead(ctx, pgadvisory.ID(key), func(fctx context.Context, _ int64) error {
				started <- struct{}{}
				select {
				case <-stop:
					return nil
				case <-fctx.Done():
					return context.Cause(fctx)
				}
			}, pgadvisory.WithLease(ttl))
		}(keys[i])
	}
	for range keys {
		frontdoor.Await(t, started, "a lease")
	}
	time.Sleep(3 * ttl)
	var spread time.Duration
	var distinct int
	require.NoError(t, admin.QueryRow(`SELECT extract(epoch FROM max(expires_at) - min(expires_at)) * 1e6, count(DISTINCT expires_at)
		FROM pgadvisory.lease WHERE lock_id = ANY($1)`, keys).Scan((*microseconds)(&spread), &distinct))
	require.Less(t, spread, ttl/10, "renewed together: one statement set every expiry (%d distinct)", distinct)
	close(stop)
	for range keys {
		require.NoError(t, frontdoor.Await(t, done, "a lease's return"))
	}
}

// microseconds scans a number of microseconds into a time.Duration.
type microseconds time.Duration

func (m *microseconds) Scan(v any) error {
	var f sql.NullFloat64
	if err := f.Scan(v); err != nil {
		return err
	}
	*m = microseconds(time.Duration(f.Float64) * time.Microsecond)
	return nil
}

// TestLeaseRefusals: what a lease does not support yet is refused with
// ErrInvalidArgument before anything is sent, and says so.
func TestLeaseRefusals(t *testing.T) {
	admin := migrated.DB(t)
	ctx := testdb.Context(t)
	key := testdb.Key(t)
	lock := pgadvisory.ID(key)
	l, err := pgadvisory.New(pgadvisory.Stdlib(testdb.DB(t)))
	require.NoError(t, err)
	lead := func(context.Context, int64) error { t.Error("fn ran"); return nil }
	for _, c := range []struct {
		name string
		call func() error
		msg  string
	}{
		{"zero ttl", func() error { return l.Lead(ctx, lock, lead, pgadvisory.WithLease(0)) }, "ttl must be positive"},
		{"RunSession WithShared", func() error {
			return l.RunSession(ctx, lock, func(context.Context) error { return nil }, pgadvisory.WithLease(time.Second), pgadvisory.WithShared())
		}, "a lease has one holder"},
		{"RunSession WithLocks", func() error {
			return l.RunSession(ctx, lock, func(context.Context) error { return nil }, pgadvisory.WithLease(time.Second),
				pgadvisory.WithLocks(testdb.Key(t)))
		}, "a lease is one lock's"},
		{"RunExclusive", func() error {
			return l.RunExclusive(ctx, lock, func(*sql.Tx) error { return nil }, pgadvisory.WithLease(time.Second))
		}, "WithLease does not apply to RunExclusive"},
		{"Campaign WithWait", func() error {
			return l.Campaign(ctx, lock, lead, pgadvisory.WithLease(time.Second), pgadvisory.WithWait(time.Second))
		}, "waiting for a lease is not supported yet"},
		{"WithWait", func() error {
			return l.Lead(ctx, lock, lead, pgadvisory.WithLease(time.Second), pgadvisory.WithWait(time.Second))
		}, "waiting for a lease is not supported yet"},
		{"WithCheckInterval", func() error {
			return l.Lead(ctx, lock, lead, pgadvisory.WithLease(time.Second), pgadvisory.WithCheckInterval(time.Second))
		}, "WithCheckInterval with WithLease"},
	} {
		err := c.call()
		require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument, c.name)
		require.ErrorContains(t, err, c.msg, c.name)
	}
	require.Empty(t, leaseHolder(t, admin, key), "nothing taken")
	require.Zero(t, fencing.Published(t, admin, key), "nothing published")
}

// TestLeaseCurrentLeader: CurrentLeader reports a lease leader (its holder,
// term, PID 0: no backend holds a lease, since and expires) while its lease is
// held, and no leader once the lease expired on the database's clock (even
// though nobody took it), once its term is superseded, and once it was
// released.
func TestLeaseCurrentLeader(t *testing.T) {
	admin := migrated.DB(t)
	ctx := testdb.Context(t)
	key := testdb.Key(t)
	lock := pgadvisory.ID(key)
	a, err := pgadvisory.New(pgadvisory.Pgx(testdb.Pool(t)), pgadvisory.WithDefaultHolder("a"))
	require.NoError(t, err)
	reader, err := pgadvisory.New(pgadvisory.Stdlib(testdb.DB(t)))
	require.NoError(t, err)
	const ttl = time.Second

	err = a.Lead(ctx, lock, func(fctx context.Context, term int64) error {
		got, err := reader.CurrentLeader(ctx, lock)
		require.NoError(t, err)
		require.Equal(t, "a", got.Holder)
		require.Equal(t, term, got.Term)
		require.Zero(t, got.PID)
		require.False(t, got.Since.IsZero())

		// Expired on the database: renewals are blocked by this row lock.
		blocker, err := admin.BeginTx(ctx, nil)
		require.NoError(t, err)
		defer func() { _ = blocker.Rollback() }()
		var expires time.Time
		require.NoError(t, blocker.QueryRow(`SELECT expires_at FROM pgadvisory.lease WHERE lock_id = $1 FOR UPDATE`, key).Scan(&expires))
		got, err = reader.CurrentLeader(ctx, lock)
		require.NoError(t, err)
		require.WithinDuration(t, expires, got.Expires, time.Millisecond, "Expires is the lease's expiry")
		require.True(t, got.Expires.After(got.Since))
		<-fctx.Done()
		for expired := false; !expired; {
			require.NoError(t, admin.QueryRow(`SELECT $1::timestamptz < clock_timestamp()`, expires).Scan(&expired))
			if !expired {
				time.Sleep(50 * time.Millisecond)
			}
		}
		_, err = reader.CurrentLeader(ctx, lock)
		require.ErrorIs(t, err, pgadvisory.ErrNoLeader, "an expired lease has no leader, although nobody took it")
		return blocker.Commit()
	}, pgadvisory.WithLease(ttl))
	require.ErrorIs(t, err, pgadvisory.ErrLockLost)

	err = a.Lead(ctx, lock, func(fctx context.Context, term int64) error {
		got, err := reader.CurrentLeader(ctx, lock)
		require.NoError(t, err)
		require.Equal(t, term, got.Term)
		fencing.Publish(t, admin, key)
		_, err = reader.CurrentLeader(ctx, lock)
		require.ErrorIs(t, err, pgadvisory.ErrNoLeader, "a superseded term has no leader")
		return nil
	}, pgadvisory.WithLease(time.Minute))
	require.NoError(t, err)

	require.NoError(t, a.Lead(ctx, lock, func(context.Context, int64) error { return nil }, pgadvisory.WithLease(time.Minute)))
	_, err = reader.CurrentLeader(ctx, lock)
	require.ErrorIs(t, err, pgadvisory.ErrNoLeader, "released: no leader")

	// Control: a session-lock leader has no expiry.
	require.NoError(t, a.Lead(ctx, lock, func(context.Context, int64) error {
		got, err := reader.CurrentLeader(ctx, lock)
		require.NoError(t, err)
		require.NotZero(t, got.PID)
		require.True(t, got.Expires.IsZero(), "a session-lock leader's Expires is zero, got %v", got.Expires)
		return nil
	}))
}

// TestLeaseSurvivesKilledBackends: a lease holds no backend, so killing
// every backend of the holder's pool while fn runs loses nothing: the next
// renewal runs on a new connection and the lease is kept past its ttl. The
// control, a session-lock leadership on the same pool, is lost
// (ErrLockLost) when its backend is killed.
func TestLeaseSurvivesKilledBackends(t *testing.T) {
	admin := migrated.DB(t)
	ctx := testdb.Context(t)
	pool := testdb.Pool(t)
	l, err := pgadvisory.New(pgadvisory.Pgx(pool), pgadvisory.WithDefaultHolder("killed"))
	require.NoError(t, err)
	var pids []int32
	const ttl = time.Second
	for _, lease := range []bool{true, false} {
		key := testdb.Key(t)
		opts := []pgadvisory.Option{pgadvisory.WithCheckInterval(100 * time.Millisecond)}
		if lease {
			opts = []pgadvisory.Option{pgadvisory.WithLease(ttl)}
		}
		err := l.Lead(ctx, pgadvisory.ID(key), func(fctx context.Context, term int64) error {
			pids = pids[:0]
			for _, c := range pool.AcquireAllIdle(ctx) {
				pids = append(pids, int32(c.Conn().PgConn().PID()))
				c.Release()
			}
			if !lease {
				var holder int32
				require.NoError(t, admin.QueryRow(`SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
					AND ((classid::bigint << 32) | objid::bigint) = $1`, key).Scan(&holder))
				pids = append(pids, holder)
			}
			require.NotEmpty(t, pids)
			_, err := admin.Exec(`SELECT pg_terminate_backend(p) FROM unnest($1::int[]) AS p`, pids)
			require.NoError(t, err)
			select {
			case <-fctx.Done():
				return context.Cause(fctx)
			case <-time.After(2 * ttl):
			}
			got, err := l.CurrentLeader(ctx, pgadvisory.ID(key))
			require.NoError(t, err)
			require.Equal(t, term, got.Term)
			return nil
		}, opts...)
		if lease {
			require.NoError(t, err, "the lease outlived its pool's backends")
		} else {
			require.ErrorIs(t, err, pgadvisory.ErrLockLost, "control: the session-lock leader lost its backend")
		}
	}
}

// TestLeaseThreeCandidatesThroughPgBouncer: three Lockers (a database/sql
// and two pgx pools, through two PgBouncers in transaction mode) compete
// for one lease over many leaderships, retrying at once when refused: never
// two fn bodies at once, every term greater than the one before and the
// lock's published token while its fn runs, and every leader's fenced write
// accepted (the fenced counter counts every leadership once).
func TestLeaseThreeCandidatesThroughPgBouncer(t *testing.T) {
	admin := migrated.DB(t)
	e1 := newPgBouncerPools(t, "exec")
	e2 := newPgBouncerPools(t, "simple_protocol")
	ctx := testdb.Context(t)
	key := testdb.Key(t)
	lock := pgadvisory.ID(key)
	tbl := fencing.Table(t, admin, testdb.Schema(t), "counter", key, "strict")
	require.NoError(t, fencing.Write(admin, fencing.Publish(t, admin, key), `INSERT INTO `+tbl+` (id, balance) VALUES (1, 0)`))

	type candidate struct {
		lead  func(func(context.Context, int64) error) error
		write func(term int64) error
	}
	update := `UPDATE ` + tbl + ` SET balance = balance + 1 WHERE id = 1`
	var cands []candidate
	for _, db := range []*sql.DB{e1.db} {
		l, err := pgadvisory.New(pgadvisory.Stdlib(db))
		require.NoError(t, err)
		cands = append(cands, candidate{
			lead: func(fn func(context.Context, int64) error) error {
				return l.Lead(ctx, lock, fn, pgadvisory.WithLease(time.Second))
			},
			write: func(term int64) error {
				return l.RunFenced(ctx, term, func(tx *sql.Tx) error { _, err := tx.ExecContext(ctx, update); return err })
			},
		})
	}
	for _, p := range []*pgxpool.Pool{e1.pool, e2.pool} {
		l, err := pgadvisory.New(pgadvisory.Pgx(p))
		require.NoError(t, err)
		cands = append(cands, candidate{
			lead: func(fn func(context.Context, int64) error) error {
				return l.Lead(ctx, lock, fn, pgadvisory.WithLease(time.Second))
			},
			write: func(term int64) error {
				return l.RunFenced(ctx, term, func(tx pgx.Tx) error { _, err := tx.Exec(ctx, update); return err })
			},
		})
	}

	const leaderships = 30
	var led, inside atomic.Int32
	var last atomic.Int64
	errs := make(chan error, len(cands))
	for _, c := range cands {
		go func() {
			for led.Load() < leaderships {
				err := c.lead(func(fctx context.Context, term int64) error {
					if n := inside.Add(1); n != 1 {
						return fmt.Errorf("%d fn bodies at once", n)
					}
					defer inside.Add(-1)
					if prev := last.Swap(term); term <= prev {
						return fmt.Errorf("term %d after %d", term, prev)
					}
					if pub := fencing.Published(t, admin, key); pub != term {
						return fmt.Errorf("term %d, published %d", term, pub)
					}
					if err := c.write(term); err != nil {
						return err
					}
					led.Add(1)
					time.Sleep(5 * time.Millisecond)
					return nil
				})
				if err != nil && !errors.Is(err, pgadvisory.ErrLocked) {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range cands {
		require.NoError(t, frontdoor.Await(t, errs, "a candidate's end"))
	}
	n := int(led.Load())
	require.GreaterOrEqual(t, n, leaderships)
	require.Equal(t, int64(n), fencing.Rows(t, admin, tbl)[1].Balance, "every leadership's fenced write, once")
}

// TestLeasePackageFunctionsTwoDatabases: the package-level Lead
// (deprecated) shares one lease state over all pools: two leases of the
// same lock ID on two databases are both held and renewed, each on its own
// pool, for several ttls (each fn checks its lease on its database).
func TestLeasePackageFunctionsTwoDatabases(t *testing.T) {
	ctx := testdb.Context(t)
	db1 := migrated.DB(t)
	db2 := migrated.UpTo(t, 9)
	key := testdb.Key(t)
	const ttl = time.Second
	errs := make(chan error, 2)
	started := make(chan struct{}, 2)
	for _, db := range []*sql.DB{db1, db2} {
		go func() {
			errs <- pgadvisory.Lead(ctx, db, key, func(fctx context.Context, term int64) error {
				started <- struct{}{}
				select {
				case <-fctx.Done():
					return context.Cause(fctx)
				case <-time.After(3 * ttl):
				}
				var held bool
				if err := db.QueryRowContext(ctx, `SELECT expires_at > clock_timestamp() FROM pgadvisory.lease WHERE lock_id = $1`, key).Scan(&held); err != nil {
					return err
				}
				if !held {
					return fmt.Errorf("fn ran on after its lease expired on the database (term %d)", term)
				}
				return nil
			}, pgadvisory.WithLease(ttl))
		}()
	}
	frontdoor.Await(t, started, "a lease")
	frontdoor.Await(t, started, "a lease")
	for range 2 {
		require.NoError(t, frontdoor.Await(t, errs, "a lease's return"), "each lease renewed on its own pool")
	}
}

// TestLeaseRenewalRoundTrips: a Locker's leases cost one round trip per
// renewal interval together, whatever their number: 50 leases held for two
// ttls cost about as many round trips as one renewal interval fits in that
// window (counted on the wire), not 50 times as many.
func TestLeaseRenewalRoundTrips(t *testing.T) {
	ctx := testdb.Context(t)
	migrated.DB(t)
	counter := wirecount.New()
	pool := testdb.PoolConfig(t, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.DialFunc = counter.Dial(nil)
		cfg.MaxConns = 4
	})
	l, err := pgadvisory.New(pgadvisory.Pgx(pool))
	require.NoError(t, err)
	const n = 50
	const ttl = 900 * time.Millisecond
	started := make(chan struct{}, n)
	stop := make(chan struct{})
	done := make(chan error, n)
	for range n {
		key := testdb.Key(t)
		go func() {
			done <- l.Lead(ctx, pgadvisory.ID(key), func(fctx context.Context, _ int64) error {
				started <- struct{}{}
				select {
				case <-stop:
					return nil
				case <-fctx.Done():
					return context.Cause(fctx)
				}
			}, pgadvisory.WithLease(ttl))
		}()
	}
	for range n {
		frontdoor.Await(t, started, "a lease")
	}
	time.Sleep(ttl / 2) // the acquisitions' connections are set up
	before := counter.RoundTrips()
	const window = 2 * ttl
	time.Sleep(window)
	trips := counter.RoundTrips() - before
	intervals := int64(window / (ttl / 3))
	t.Logf("%d leases, %v: %d round trips on the wire for %d renewal intervals", n, window, trips, intervals)
	require.Positive(t, trips, "renewals were sent")
	require.LessOrEqual(t, trips, 2*intervals, "one renewal statement per interval for all the leases, not one per lease")
	close(stop)
	for range n {
		require.NoError(t, frontdoor.Await(t, done, "a lease's return"))
	}
}
