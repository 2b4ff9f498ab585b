package pgadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// This file holds the front-door abstraction shared by the correctness tests
// (one test body, run over database/sql and over pgxpool) and the design
// source's scenario: three replicas fire the same daily report at once.

// rowScanner is *sql.Row and pgx.Row alike.
type rowScanner interface{ Scan(dest ...any) error }

// txq is the lock transaction as test bodies use it, whichever front door
// opened it.
type txq interface {
	exec(ctx context.Context, query string, args ...any) error
	queryRow(ctx context.Context, query string, args ...any) rowScanner
}

type sqlTxq struct{ tx *sql.Tx }

func (q sqlTxq) exec(ctx context.Context, query string, args ...any) error {
	_, err := q.tx.ExecContext(ctx, query, args...)
	return err
}

func (q sqlTxq) queryRow(ctx context.Context, query string, args ...any) rowScanner {
	return q.tx.QueryRowContext(ctx, query, args...)
}

type pgxTxq struct{ tx pgx.Tx }

func (q pgxTxq) exec(ctx context.Context, query string, args ...any) error {
	_, err := q.tx.Exec(ctx, query, args...)
	return err
}

func (q pgxTxq) queryRow(ctx context.Context, query string, args ...any) rowScanner {
	return q.tx.QueryRow(ctx, query, args...)
}

// runFunc runs fn in a transaction under the lock key (controls run the same
// fn without the lock, or with a hand-written one).
type runFunc func(ctx context.Context, key int64, fn func(txq) error, opts ...pgadvisory.Option) error

// instance is one "replica": its own connection pool and the runtime's entry
// points on it.
type instance struct {
	run     runFunc // RunExclusive / RunExclusivePgx
	runLock func(ctx context.Context, l pgadvisory.Lock, fn func(txq) error, opts ...pgadvisory.Option) error
}

// frontDoor opens instances of one front door. maxConns 0 keeps testdb's
// default pool size.
type frontDoor struct {
	name string
	open func(t testing.TB, maxConns int) instance
}

var (
	sqlDoor = frontDoor{name: "database-sql", open: func(t testing.TB, maxConns int) instance {
		db := testdb.DB(t)
		if maxConns > 0 {
			db.SetMaxOpenConns(maxConns)
		}
		return sqlInstance(db)
	}}
	pgxDoor = frontDoor{name: "pgxpool", open: func(t testing.TB, maxConns int) instance {
		pool := testdb.PoolConfig(t, func(c *pgxpool.Config) {
			if maxConns > 0 {
				c.MaxConns = int32(maxConns)
			}
		})
		return pgxInstance(pool)
	}}
	frontDoors = []frontDoor{sqlDoor, pgxDoor}
)

func sqlInstance(db *sql.DB) instance {
	adapt := func(fn func(txq) error) func(*sql.Tx) error {
		if fn == nil {
			return nil
		}
		return func(tx *sql.Tx) error { return fn(sqlTxq{tx}) }
	}
	return instance{
		run: func(ctx context.Context, key int64, fn func(txq) error, opts ...pgadvisory.Option) error {
			return pgadvisory.RunExclusive(ctx, db, key, adapt(fn), opts...)
		},
		runLock: func(ctx context.Context, l pgadvisory.Lock, fn func(txq) error, opts ...pgadvisory.Option) error {
			return l.RunExclusive(ctx, db, adapt(fn), opts...)
		},
	}
}

func pgxInstance(pool *pgxpool.Pool) instance {
	adapt := func(fn func(txq) error) func(pgx.Tx) error {
		if fn == nil {
			return nil
		}
		return func(tx pgx.Tx) error { return fn(pgxTxq{tx}) }
	}
	return instance{
		run: func(ctx context.Context, key int64, fn func(txq) error, opts ...pgadvisory.Option) error {
			return pgadvisory.RunExclusivePgx(ctx, pool, key, adapt(fn), opts...)
		},
		runLock: func(ctx context.Context, l pgadvisory.Lock, fn func(txq) error, opts ...pgadvisory.Option) error {
			return l.RunExclusivePgx(ctx, pool, adapt(fn), opts...)
		},
	}
}

// forEachFrontDoor runs body as one subtest per front door.
func forEachFrontDoor(t *testing.T, body func(t *testing.T, door frontDoor)) {
	for _, door := range frontDoors {
		t.Run(door.name, func(t *testing.T) { body(t, door) })
	}
}

// testCtx is a context bounded well above anything a test waits for, so a
// hang fails instead of blocking the binary.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// hold runs the lock key on inst in the background, with fn (after work, if
// any) blocked until release is called. It returns once the lock is held.
// release ends fn and returns the call's error; it runs at cleanup too.
func hold(t *testing.T, inst instance, key int64, work func(txq) error, opts ...pgadvisory.Option) (release func() error) {
	t.Helper()
	acquired, stop, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- inst.run(context.Background(), key, func(q txq) error {
			if work != nil {
				if err := work(q); err != nil {
					return err
				}
			}
			close(acquired)
			<-stop
			return nil
		}, opts...)
	}()
	select {
	case <-acquired:
	case err := <-done:
		t.Fatalf("hold: lock %d not taken: %v", key, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("hold: lock %d not taken within 30s", key)
	}
	var once sync.Once
	var err error
	release = func() error {
		once.Do(func() {
			close(stop)
			err = <-done
		})
		return err
	}
	t.Cleanup(func() { _ = release() })
	return release
}

// TestScenarioDailyReport is the design source's opening scenario: three
// instances of a service, each with its own connection pool, fire the daily
// report at the same moment. Inside the lock each sends (inserts) the report
// unless it exists for the day. Exactly one report row per day; the other two
// instances get ErrLocked without running fn. The winner keeps the lock until
// both others have returned (sending takes a while), so the outcome is
// deterministic: were the lock broken, a second winner would time out waiting
// for its losers and fail the round.
func TestScenarioDailyReport(t *testing.T) {
	mixes := []struct {
		name  string
		doors [3]frontDoor
	}{
		{"database-sql", [3]frontDoor{sqlDoor, sqlDoor, sqlDoor}},
		{"pgxpool", [3]frontDoor{pgxDoor, pgxDoor, pgxDoor}},
		{"mixed", [3]frontDoor{sqlDoor, pgxDoor, sqlDoor}},
	}
	for _, mix := range mixes {
		t.Run(mix.name, func(t *testing.T) {
			ctx := testCtx(t)
			check := testdb.DB(t)
			reports := pgx.Identifier{testdb.Schema(t), "reports"}.Sanitize()
			// No unique constraint: a second report must show up as a row,
			// not be hidden behind a constraint violation.
			_, err := check.ExecContext(ctx, "CREATE TABLE "+reports+" (day date NOT NULL, instance int NOT NULL)")
			require.NoError(t, err)

			var instances [3]instance
			for i, door := range mix.doors {
				instances[i] = door.open(t, 0)
			}
			key := testdb.Key(t) // the daily report's lock
			firstDay := time.Date(2025, time.March, 1, 0, 0, 0, 0, time.UTC)

			const rounds = 5
			for round := range rounds {
				day := firstDay.AddDate(0, 0, round)
				var (
					wg     sync.WaitGroup
					calls  atomic.Int32
					start  = make(chan struct{})
					losers = make(chan struct{}, len(instances))
					errs   [3]error
				)
				for i, inst := range instances {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						err := inst.run(ctx, key, func(q txq) error {
							calls.Add(1)
							var exists bool
							if err := q.queryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+reports+" WHERE day = $1)", day).Scan(&exists); err != nil {
								return err
							}
							if !exists {
								if err := q.exec(ctx, "INSERT INTO "+reports+" (day, instance) VALUES ($1, $2)", day, i); err != nil {
									return err
								}
							}
							// Sending takes a while: the others fire meanwhile.
							for range len(instances) - 1 {
								select {
								case <-losers:
								case <-time.After(10 * time.Second):
									return errors.New("the other instances did not return while the report was being sent")
								}
							}
							return nil
						})
						errs[i] = err
						if errors.Is(err, pgadvisory.ErrLocked) {
							losers <- struct{}{}
						}
					}()
				}
				close(start)
				wg.Wait()

				sent, locked := 0, 0
				for i, err := range errs {
					switch {
					case err == nil:
						sent++
					case errors.Is(err, pgadvisory.ErrLocked):
						require.Equal(t, pgadvisory.ErrLocked, err, "ErrLocked is returned bare")
						locked++
					default:
						t.Fatalf("round %d, instance %d: unexpected error: %v", round, i, err)
					}
				}
				require.Equal(t, 1, sent, "round %d: exactly one instance sends the report", round)
				require.Equal(t, 2, locked, "round %d: the other two get ErrLocked", round)
				require.EqualValues(t, 1, calls.Load(), "round %d: fn runs only for the winner", round)

				var rows int
				require.NoError(t, check.QueryRowContext(ctx, "SELECT count(*) FROM "+reports+" WHERE day = $1", day).Scan(&rows))
				require.Equal(t, 1, rows, "round %d: exactly one report row for the day", round)
			}
			var total int
			require.NoError(t, check.QueryRowContext(ctx, "SELECT count(*) FROM "+reports).Scan(&total))
			require.Equal(t, rounds, total)
		})
	}
}
