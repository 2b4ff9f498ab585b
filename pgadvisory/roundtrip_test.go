package pgadvisory_test

// Round trips per call, counted on the wire (internal/testkit/wirecount): a round
// trip starts whenever the client writes after having read from the server.
// Every measured handle has ONE connection, so the statement cache warmed by
// the first call is the one the measured calls use, and pool liveness pings
// are turned off (they are pool policy, not this package's cost). Lock
// holders use separate, uncounted connections.

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
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/designsource/pglock"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/wirecount"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

func TestRoundTripsControls(t *testing.T) {
	ctx := context.Background()
	c := wirecount.New()
	db, pool := countedDB(t, c), countedPool(t, c)

	t.Run("select1", func(t *testing.T) {
		requireSteadyRoundTrips(t, c, 1, func() error {
			var n int
			return pool.QueryRow(ctx, "SELECT 1").Scan(&n)
		})
	})
	t.Run("bare_tx_stdlib", func(t *testing.T) {
		requireSteadyRoundTrips(t, c, 3, func() error { return bareTxStdlib(ctx, db) })
	})
	t.Run("bare_tx_pgx", func(t *testing.T) {
		requireSteadyRoundTrips(t, c, 3, func() error { return bareTxPgx(ctx, pool) })
	})
	t.Run("pgx_begin_then_lock", func(t *testing.T) {
		// pgx's non-pipelined BeginTx: the counter tells 3 from the pipelined 2.
		key := testdb.Key(t)
		requireSteadyRoundTrips(t, c, 3, func() error {
			tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback(ctx) }()
			var ok bool
			if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1)", key).Scan(&ok); err != nil {
				return err
			}
			return tx.Commit(ctx)
		})
	})
	t.Run("design_source", func(t *testing.T) {
		key := testdb.Key(t)
		requireSteadyRoundTrips(t, c, 3, func() error {
			return pglock.RunExclusive(ctx, db, key, func(*sql.Tx) error { return nil })
		})
	})
	t.Run("design_source_loser_waits_for_rollback", func(t *testing.T) {
		// Control for requireLoserRoundTrips: the design source rolls back before it returns,
		// so with the gate at 2 it cannot return; it needs a third round trip.
		key := testdb.Key(t)
		holdElsewhere(t, key)
		op := func() error { return pglock.RunExclusive(ctx, db, key, func(*sql.Tx) error { return nil }) }
		require.ErrorIs(t, op(), pglock.ErrLocked, "warm-up")
		before := c.RoundTrips()
		release := c.Gate(2)
		t.Cleanup(release)
		errc := make(chan error, 1)
		go func() { errc <- op() }()
		require.Eventually(t, func() bool { return c.Waiting() == 1 }, 30*time.Second, time.Millisecond)
		select {
		case err := <-errc:
			t.Fatalf("returned (%v) while its ROLLBACK was held at the gate", err)
		default:
		}
		release()
		require.ErrorIs(t, frontdoor.Await(t, errc, "the contender's return"), pglock.ErrLocked)
		require.EqualValues(t, 3, c.RoundTrips()-before, "BEGIN, lock, ROLLBACK before returning")
	})
}

func TestRoundTripsRunExclusivePgx(t *testing.T) {
	migrated.DB(t) // WithWait on one lock waits in the queue of migration 00011: its first try costs the same
	ctx := context.Background()
	c := wirecount.New()
	pool := countedPool(t, c)
	noop := func(pgx.Tx) error { return nil }

	uncontended := []struct {
		name string
		opts func(key int64) []pgadvisory.Option
	}{
		{"plain", func(int64) []pgadvisory.Option { return nil }},
		{"WithWait", func(int64) []pgadvisory.Option { return []pgadvisory.Option{pgadvisory.WithWait(5 * time.Second)} }},
		{"WithWait0", func(int64) []pgadvisory.Option { return []pgadvisory.Option{pgadvisory.WithWait(0)} }},
		// A queued read-only call (made read-only by its lock statement).
		{"WithWaitReadOnly", func(int64) []pgadvisory.Option {
			return []pgadvisory.Option{pgadvisory.WithWait(5 * time.Second), pgadvisory.WithReadOnly()}
		}},
		{"WithShared", func(int64) []pgadvisory.Option { return []pgadvisory.Option{pgadvisory.WithShared()} }},
		{"WithLocks", func(k int64) []pgadvisory.Option { return []pgadvisory.Option{pgadvisory.WithLocks(k+1, k+2)} }},
		{"all", func(k int64) []pgadvisory.Option {
			return []pgadvisory.Option{pgadvisory.WithShared(), pgadvisory.WithWait(5 * time.Second), pgadvisory.WithLocks(k + 1),
				pgadvisory.WithPgxTxOptions(pgx.TxOptions{AccessMode: pgx.ReadOnly}), pgadvisory.WithObserver(func(pgadvisory.Event) {})}
		}},
	}
	for _, tc := range uncontended {
		t.Run("uncontended/"+tc.name, func(t *testing.T) {
			key := testdb.Key(t)
			testdb.Key(t) // reserve key+1 and key+2 for WithLocks
			testdb.Key(t)
			called := 0
			requireSteadyRoundTrips(t, c, 2, func() error {
				return pgadvisory.RunExclusivePgx(ctx, pool, key, func(tx pgx.Tx) error { called++; return nil }, tc.opts(key)...)
			})
			require.Equal(t, 4, called)
		})
	}

	contended := []struct {
		name string
		opts func(key int64) []pgadvisory.Option
	}{
		{"plain", func(int64) []pgadvisory.Option { return nil }},
		{"WithShared", func(int64) []pgadvisory.Option { return []pgadvisory.Option{pgadvisory.WithShared()} }},
		{"WithLocks", func(k int64) []pgadvisory.Option { return []pgadvisory.Option{pgadvisory.WithLocks(k - 1)} }},
	}
	for _, tc := range contended {
		t.Run("loser/"+tc.name, func(t *testing.T) {
			testdb.Key(t) // key-1 is free for WithLocks
			key := testdb.Key(t)
			holdElsewhere(t, key)
			op := func() error { return pgadvisory.RunExclusivePgx(ctx, pool, key, noop, tc.opts(key)...) }
			require.ErrorIs(t, op(), pgadvisory.ErrLocked, "warm-up")
			require.Eventually(t, frontdoor.OnPool(pool).Idle, 30*time.Second, time.Millisecond)
			requireLoserRoundTrips(t, c, 1, frontdoor.OnPool(pool).Idle, op)
		})
	}
}

func TestRoundTripsRunExclusive(t *testing.T) {
	migrated.DB(t) // WithWait on one lock waits in the queue of migration 00011: its first try costs the same
	ctx := context.Background()
	c := wirecount.New()
	db := countedDB(t, c)
	noop := func(*sql.Tx) error { return nil }

	options := map[string]func(key int64) []pgadvisory.Option{
		"plain":      func(int64) []pgadvisory.Option { return nil },
		"WithWait":   func(int64) []pgadvisory.Option { return []pgadvisory.Option{pgadvisory.WithWait(5 * time.Second)} },
		"WithShared": func(int64) []pgadvisory.Option { return []pgadvisory.Option{pgadvisory.WithShared()} },
		"WithLocks":  func(k int64) []pgadvisory.Option { return []pgadvisory.Option{pgadvisory.WithLocks(k+1, k+2)} },
		"WithWaitReadOnly": func(int64) []pgadvisory.Option {
			return []pgadvisory.Option{pgadvisory.WithWait(5 * time.Second), pgadvisory.WithReadOnly()}
		},
		"WithTxOptions": func(int64) []pgadvisory.Option {
			return []pgadvisory.Option{pgadvisory.WithTxOptions(sql.TxOptions{ReadOnly: true})}
		},
	}
	for name, opts := range options {
		t.Run("uncontended/"+name, func(t *testing.T) {
			key := testdb.Key(t)
			testdb.Key(t)
			testdb.Key(t)
			requireSteadyRoundTrips(t, c, 3, func() error { return pgadvisory.RunExclusive(ctx, db, key, noop, opts(key)...) })
		})
	}
	t.Run("loser", func(t *testing.T) {
		key := testdb.Key(t)
		holdElsewhere(t, key)
		op := func() error { return pgadvisory.RunExclusive(ctx, db, key, noop) }
		require.ErrorIs(t, op(), pgadvisory.ErrLocked, "warm-up")
		require.Eventually(t, frontdoor.OnDB(db).Idle, 30*time.Second, time.Millisecond)
		requireLoserRoundTrips(t, c, 2, frontdoor.OnDB(db).Idle, op) // BEGIN, lock; the ROLLBACK in the background
	})
}

// TestRoundTripsRunSession: a session lock costs two round trips on a
// direct connection (the lock statement, the unlock), with or without
// WithWait, once its Locker has checked one connection of the pool and
// found it direct to a primary; a new Locker's first call checks the
// connection it opens (three). The watcher does not check during these
// calls (interval one minute).
func TestRoundTripsRunSession(t *testing.T) {
	ctx := testdb.Context(t)
	c := wirecount.New()
	doors := []frontdoor.Door{frontdoor.OnDB(countedDB(t, c)), frontdoor.OnPool(countedPool(t, c))}
	noop := func(context.Context) error { return nil }
	options := map[string]func(key int64) []pgadvisory.Option{
		"plain":      func(int64) []pgadvisory.Option { return nil },
		"WithWait":   func(int64) []pgadvisory.Option { return []pgadvisory.Option{pgadvisory.WithWait(5 * time.Second)} },
		"WithWait0":  func(int64) []pgadvisory.Option { return []pgadvisory.Option{pgadvisory.WithWait(0)} },
		"WithLocks":  func(k int64) []pgadvisory.Option { return []pgadvisory.Option{pgadvisory.WithLocks(k+1, k+2)} },
		"WithShared": func(int64) []pgadvisory.Option { return []pgadvisory.Option{pgadvisory.WithShared()} },
		// Queued sets and shared locks: the queue's try is the one statement.
		"WithWait_WithLocks": func(k int64) []pgadvisory.Option {
			return []pgadvisory.Option{pgadvisory.WithWait(0), pgadvisory.WithLocks(k+1, k+2)}
		},
		"WithWait_WithShared": func(int64) []pgadvisory.Option {
			return []pgadvisory.Option{pgadvisory.WithWait(0), pgadvisory.WithShared()}
		},
	}
	for _, door := range doors {
		t.Run(door.Label()+"/first_checks", func(t *testing.T) {
			key := testdb.Key(t)
			require.NoError(t, door.RunSession(ctx, pgadvisory.ID(key), noop), "warm-up: statements prepared on the connection")
			fresh := door.WithLocker()
			for i, want := range []int64{3, 2, 2} {
				before := c.RoundTrips()
				require.NoError(t, fresh.RunSession(ctx, pgadvisory.ID(key), noop, pgadvisory.WithCheckInterval(time.Minute)))
				require.Equal(t, want, c.RoundTrips()-before, "round trips of a new Locker's call %d", i+1)
			}
		})
		for name, opts := range options {
			t.Run(door.Label()+"/"+name, func(t *testing.T) {
				key := testdb.Key(t)
				testdb.Key(t)
				testdb.Key(t)
				requireSteadyRoundTrips(t, c, 2, func() error {
					return door.RunSession(ctx, pgadvisory.ID(key), noop, append(opts(key), pgadvisory.WithCheckInterval(time.Minute))...)
				})
			})
		}
	}
}

// TestRoundTripsLead: an uncontended leadership on a shared connection is
// two round trips on either driver: the try statement, which also elects
// and commits the term durably, and the resign, which unlocks.
func TestRoundTripsLead(t *testing.T) {
	migrated.DB(t)
	ctx := testdb.Context(t)
	c := wirecount.New()
	doors := []frontdoor.Door{frontdoor.OnDB(countedDB(t, c)), frontdoor.OnPool(countedPool(t, c))}
	for _, door := range doors {
		t.Run(door.Label(), func(t *testing.T) {
			key := testdb.Key(t)
			var last int64
			requireSteadyRoundTrips(t, c, 2, func() error {
				return door.Lead(ctx, pgadvisory.ID(key), func(_ context.Context, term int64) error {
					if term <= last {
						return fmt.Errorf("term %d after %d", term, last)
					}
					last = term
					return nil
				}, pgadvisory.WithCheckInterval(time.Minute))
			})
		})
	}
}

// countedPool is a one-connection pgx pool whose round trips c counts.
func countedPool(t testing.TB, c *wirecount.Counter) *pgxpool.Pool {
	t.Helper()
	return testdb.PoolConfig(t, func(cfg *pgxpool.Config) {
		cfg.MaxConns = 1
		cfg.ConnConfig.DialFunc = c.Dial(cfg.ConnConfig.DialFunc)
		cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	})
}

// countedDB is a one-connection database/sql handle (pgx stdlib) whose round
// trips c counts.
func countedDB(t testing.TB, c *wirecount.Counter) *sql.DB {
	t.Helper()
	cfg, err := pgx.ParseConfig(testdb.URL(t))
	require.NoError(t, err)
	cfg.DialFunc = c.Dial(cfg.DialFunc)
	db := stdlib.OpenDB(*cfg, stdlib.OptionShouldPing(func(context.Context, stdlib.ShouldPingParams) bool { return false }))
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, db.PingContext(context.Background()))
	return db
}

// requireSteadyRoundTrips warms op up (first use prepares its statements), then runs it
// three times and requires each run to cost exactly want round trips.
func requireSteadyRoundTrips(t *testing.T, c *wirecount.Counter, want int64, op func() error) {
	t.Helper()
	require.NoError(t, op(), "warm-up")
	for i := range 3 {
		before := c.RoundTrips()
		require.NoError(t, op())
		require.Equal(t, want, c.RoundTrips()-before, "round trips of run %d", i)
	}
}

// holdElsewhere holds key exclusively on a separate, uncounted connection until t ends.
func holdElsewhere(t *testing.T, keys ...int64) {
	t.Helper()
	conn, err := testdb.Pool(t).Acquire(context.Background())
	require.NoError(t, err)
	t.Cleanup(conn.Release)
	for _, k := range keys {
		var ok bool
		require.NoError(t, conn.QueryRow(context.Background(), "SELECT pg_try_advisory_lock($1)", k).Scan(&ok))
		require.True(t, ok)
	}
}

// requireLoserRoundTrips runs a call that loses the lock with the counter's gate letting
// only n round trips start. It requires the call to return ErrLocked while
// the gate holds the rest back (so the caller waited for at most n), and the
// count at that moment to be exactly n. It then requires one more round trip
// (the ROLLBACK) to be waiting at the gate, releases it and waits until the
// connection is idle again.
func requireLoserRoundTrips(t *testing.T, c *wirecount.Counter, n int64, idle func() bool, op func() error) {
	t.Helper()
	before := c.RoundTrips()
	release := c.Gate(n)
	t.Cleanup(release)
	errc := make(chan error, 1)
	go func() { errc <- op() }()
	var err error
	select {
	case err = <-errc:
	case <-time.After(30 * time.Second):
		release()
		t.Fatalf("the losing call did not return within %d round trips: it needs more before returning (a synchronous ROLLBACK?)", n)
	}
	require.ErrorIs(t, err, pgadvisory.ErrLocked)
	require.Equal(t, n, c.RoundTrips()-before, "round trips before the call returned")
	require.Eventually(t, func() bool { return c.Waiting() == 1 }, 30*time.Second, time.Millisecond,
		"the ROLLBACK should be under way in the background")
	release()
	require.Eventually(t, func() bool { return c.RoundTrips()-before == n+1 && idle() }, 30*time.Second, time.Millisecond,
		"the background ROLLBACK should finish and return the connection")
}

// TestRoundTripsRunOnce: a run claims its window before fn in the lock
// transaction. database/sql sends BEGIN, the lock statement, the claim and
// COMMIT (four); pgx pipelines BEGIN, the lock statement and the claim, then
// COMMIT (two). A window already done costs the claim's round trip and the
// ROLLBACK, which returns before the call does (four and two).
func TestRoundTripsRunOnce(t *testing.T) {
	ctx := context.Background()
	migrated.DB(t)
	c := wirecount.New()
	db, pool := countedDB(t, c), countedPool(t, c)
	var windows atomic.Int64
	window := func() string { return fmt.Sprintf("rt-%d", windows.Add(1)) }

	t.Run("database/sql", func(t *testing.T) {
		key := testdb.Key(t)
		requireSteadyRoundTrips(t, c, 4, func() error {
			return pgadvisory.RunOnce(ctx, db, key, window(), func(*sql.Tx) error { return nil })
		})
		requireSteadyOutcome(t, c, 4, pgadvisory.ErrAlreadyDone, func() error {
			return pgadvisory.RunOnce(ctx, db, key, "rt-done", func(*sql.Tx) error { return nil })
		})
	})
	t.Run("pgx", func(t *testing.T) {
		key := testdb.Key(t)
		requireSteadyRoundTrips(t, c, 2, func() error {
			return pgadvisory.RunOncePgx(ctx, pool, key, window(), func(pgx.Tx) error { return nil })
		})
		requireSteadyOutcome(t, c, 2, pgadvisory.ErrAlreadyDone, func() error {
			return pgadvisory.RunOncePgx(ctx, pool, key, "rt-done", func(pgx.Tx) error { return nil })
		})
	})
	t.Run("pgx/loser", func(t *testing.T) {
		// The claim rides along with the lock statement and writes nothing
		// for a loser: one round trip before the call returns.
		key := testdb.Key(t)
		holdElsewhere(t, key)
		op := func() error {
			return pgadvisory.RunOncePgx(ctx, pool, key, window(), func(pgx.Tx) error { return nil })
		}
		require.ErrorIs(t, op(), pgadvisory.ErrLocked, "warm-up")
		require.Eventually(t, frontdoor.OnPool(pool).Idle, 30*time.Second, time.Millisecond)
		requireLoserRoundTrips(t, c, 1, frontdoor.OnPool(pool).Idle, op)
	})
}

// requireSteadyOutcome is requireSteadyRoundTrips for a call that returns an
// error matching want every time (warm-up included).
func requireSteadyOutcome(t *testing.T, c *wirecount.Counter, n int64, want error, op func() error) {
	t.Helper()
	if err := op(); !errors.Is(err, want) {
		require.NoError(t, err, "warm-up")
	}
	for i := range 3 {
		before := c.RoundTrips()
		require.ErrorIs(t, op(), want)
		require.Equal(t, n, c.RoundTrips()-before, "round trips of run %d", i)
	}
}

// TestRoundTripsRunSessionSetRefused: a session set refused on a shared
// connection gives back exactly what its try statement took. Refused at
// its first lock, it took nothing and costs what a refused single lock
// costs; refused at its second, one round trip more, the unlock of the
// first.
func TestRoundTripsRunSessionSetRefused(t *testing.T) {
	ctx := testdb.Context(t)
	c := wirecount.New()
	doors := []frontdoor.Door{frontdoor.OnDB(countedDB(t, c)), frontdoor.OnPool(countedPool(t, c))}
	for _, door := range doors {
		t.Run(door.Label(), func(t *testing.T) {
			first, second, free := testdb.Key(t), testdb.Key(t), testdb.Key(t)
			held := testdb.Key(t) // first < second < free < held: a set is taken in ascending order
			holdElsewhere(t, first, held)
			refused := func(keys ...int64) int64 {
				t.Helper()
				op := func() error {
					return door.RunSession(ctx, pgadvisory.ID(keys[0]), notCalled(t),
						pgadvisory.WithLocks(keys[1:]...), pgadvisory.WithCheckInterval(time.Minute))
				}
				require.ErrorIs(t, op(), pgadvisory.ErrLocked, "warm-up")
				var n int64
				for i := range 3 {
					before := c.RoundTrips()
					require.ErrorIs(t, op(), pgadvisory.ErrLocked)
					got := c.RoundTrips() - before
					if i > 0 {
						require.Equal(t, n, got, "round trips of run %d", i)
					}
					n = got
				}
				return n
			}
			single := refused(first)
			require.Equal(t, single, refused(first, second), "refused at its first lock, the set took nothing to give back")
			require.Equal(t, single+1, refused(second, free, held), "refused at its third lock, the set gives back the two it took in one round trip")
			require.Empty(t, witness.Of(testdb.DB(t)).Holds(t, second, free), "nothing of the refused sets is left held")
		})
	}
}
