package pgadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// The run-once ledger: a failed run leaves no row, a success makes later
// calls for the window ErrAlreadyDone without calling fn, a row written by
// other code counts too (before the call; while fn runs, such a write waits
// for the call's claim and then fails), and bad arguments are refused. The
// helpers are in runonce_replicas_test.go.

func TestRunOnceLedger(t *testing.T) {
	admin := migrated.DB(t)
	for _, door := range fencing.Doors(t, nil) {
		t.Run(door.Label(), func(t *testing.T) {
			ctx := testdb.Context(t)
			tbl := newReportTable(t, admin)
			var calls atomic.Int64
			job := func(fail error) func(frontdoor.Tx) error {
				return func(tx frontdoor.Tx) error {
					calls.Add(1)
					if err := tx.Exec(ctx, `INSERT INTO `+tbl+` (replica) VALUES ($1)`, door.Label()); err != nil {
						return err
					}
					return fail
				}
			}

			t.Run("failed_run_leaves_no_row", func(t *testing.T) {
				key := testdb.Key(t)
				calls.Store(0)
				boom := errors.New("report failed")
				err := door.RunOnce(ctx, key, "2026-12-02", job(boom))
				require.ErrorIs(t, err, boom)
				require.Empty(t, runOnceRows(t, admin, key))
				require.Equal(t, int64(0), countRows(t, admin, `SELECT count(*) FROM `+tbl))

				require.NoError(t, door.RunOnce(ctx, key, "2026-12-02", job(nil)))
				require.Len(t, runOnceRows(t, admin, key), 1)
				require.ErrorIs(t, door.RunOnce(ctx, key, "2026-12-02", job(nil)), pgadvisory.ErrAlreadyDone)
				require.Equal(t, int64(2), calls.Load(), "the third call did not run fn")

				// A different window runs again.
				require.NoError(t, door.RunOnce(ctx, key, "2026-12-03", job(nil)))
				require.Equal(t, int64(3), calls.Load())
				ledger := runOnceRows(t, admin, key)
				require.Len(t, ledger, 2)
				require.Equal(t, []string{"2026-12-02", "2026-12-03"}, []string{ledger[0].window, ledger[1].window})
				_, err = admin.Exec(`DELETE FROM ` + tbl)
				require.NoError(t, err)
			})

			// A call that is not granted the lock claims nothing and waits for
			// nothing, even where its claim travels with the lock statement
			// (pgx's pipeline) while the holder's claim of the same window is
			// not committed yet: it returns ErrLocked at once. The control:
			// once the holder gave up, the window runs.
			t.Run("not_granted_claims_nothing", func(t *testing.T) {
				key := testdb.Key(t)
				calls.Store(0)
				entered, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
				go func() {
					done <- door.RunOnce(ctx, key, "2026-12-02", func(frontdoor.Tx) error {
						close(entered)
						<-release
						return errors.New("the holder gives up")
					})
				}()
				frontdoor.Await(t, entered, "the holder's fn")
				lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err := door.RunOnce(lctx, key, "2026-12-02", job(nil))
				cancel()
				close(release)
				require.ErrorIs(t, err, pgadvisory.ErrLocked, "the refused call neither waited for the holder's claim nor claimed")
				require.Error(t, frontdoor.Await(t, done, "the holder"))
				require.Empty(t, runOnceRows(t, admin, key))
				require.NoError(t, door.RunOnce(ctx, key, "2026-12-02", job(nil)), "control: the window runs once the holder gave up")
				require.Equal(t, int64(1), calls.Load())
				require.Len(t, runOnceRows(t, admin, key), 1)
				_, err = admin.Exec(`DELETE FROM ` + tbl)
				require.NoError(t, err)
			})

			t.Run("row_inserted_by_hand", func(t *testing.T) {
				key := testdb.Key(t)
				calls.Store(0)
				_, err := admin.Exec(`INSERT INTO pgadvisory.run_once (lock_id, window_key, holder, started_at, finished_at)
					VALUES ($1, '2026-12-02', 'by hand', now(), now())`, key)
				require.NoError(t, err)
				require.ErrorIs(t, door.RunOnce(ctx, key, "2026-12-02", job(nil)), pgadvisory.ErrAlreadyDone)
				require.Zero(t, calls.Load(), "fn is not called")
				// CONTROL: the ledger check is what stopped it.
				require.NoError(t, door.RunOnce(ctx, key, "2026-12-01", job(nil)))
				require.Equal(t, int64(1), calls.Load())
				_, err = admin.Exec(`DELETE FROM ` + tbl)
				require.NoError(t, err)
			})

			t.Run("row_inserted_during_fn", func(t *testing.T) {
				// Code that bypasses the lock tries to record a run of the
				// window while fn runs. The claim, written before fn, holds
				// the window: the bypass waits for the call's transaction
				// and then fails on the primary key, and fn's run stands.
				key := testdb.Key(t)
				bypass := make(chan error, 1)
				err := door.RunOnce(ctx, key, "2026-12-02", func(tx frontdoor.Tx) error {
					if err := tx.Exec(ctx, `INSERT INTO `+tbl+` (replica) VALUES ('claimed')`); err != nil {
						return err
					}
					go func() {
						_, err := admin.ExecContext(ctx, `INSERT INTO pgadvisory.run_once (lock_id, window_key, holder, started_at, finished_at)
							VALUES ($1, '2026-12-02', 'bypass', now(), now())`, key)
						bypass <- err
					}()
					// The bypass waits for this transaction (on its claim).
					require.Eventually(t, func() bool {
						return countRows(t, admin, `SELECT count(*) FROM pg_catalog.pg_stat_activity
							WHERE wait_event_type = 'Lock' AND query LIKE '%''bypass''%'`) == 1
					}, 30*time.Second, 10*time.Millisecond, "the bypassing INSERT waits for the claim")
					return nil
				})
				require.NoError(t, err)
				sqlstate.Require(t, frontdoor.Await(t, bypass, "the bypassing INSERT"), "23505")
				require.Equal(t, int64(1), countRows(t, admin, `SELECT count(*) FROM `+tbl+` WHERE replica = 'claimed'`))
				ledger := runOnceRows(t, admin, key)
				require.Len(t, ledger, 1)
				require.NotEqual(t, "bypass", ledger[0].holder)
			})

			t.Run("invalid_arguments", func(t *testing.T) {
				calls.Store(0)
				err := door.RunOnce(ctx, testdb.Key(t), "", job(nil))
				require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument)
				require.Zero(t, calls.Load())
			})
		})
	}

	t.Run("nil_handles_and_lock_methods", func(t *testing.T) {
		ctx := testdb.Context(t)
		noop := func(*sql.Tx) error { return nil }
		require.ErrorIs(t, pgadvisory.RunOnce(ctx, nil, 1, "w", noop), pgadvisory.ErrInvalidArgument)
		require.ErrorIs(t, pgadvisory.RunOncePgx(ctx, nil, 1, "w", func(pgx.Tx) error { return nil }), pgadvisory.ErrInvalidArgument)
		require.ErrorIs(t, pgadvisory.RunOnce(ctx, admin, 1, "w", nil), pgadvisory.ErrInvalidArgument)
		require.ErrorIs(t, pgadvisory.RunOncePgx(ctx, testdb.Pool(t), 1, "w", nil), pgadvisory.ErrInvalidArgument)

		// Lock.RunOnce and Lock.RunOncePgx share one ledger row per window.
		l := pgadvisory.Lock{Name: "reports.daily_email", ID: testdb.Key(t)}
		pool := frontdoor.Open(t, frontdoor.Pgx, frontdoor.MaxConns(2)).Pool()
		require.NoError(t, l.RunOnce(ctx, admin, "2026-12-02", noop, pgadvisory.WithHolder("lock-method")))
		require.ErrorIs(t, l.RunOncePgx(ctx, pool, "2026-12-02", func(pgx.Tx) error { return nil }), pgadvisory.ErrAlreadyDone)
		ledger := runOnceRows(t, admin, l.ID)
		require.Len(t, ledger, 1)
		require.Equal(t, "lock-method", ledger[0].holder)
	})
}

// TestRunOnceLedgerTimes: the claim is written before fn, yet finished_at
// is when the run committed (the deferred trigger of the migrations), after
// fn's last statement; started_at is the claim, before fn's first one.
func TestRunOnceLedgerTimes(t *testing.T) {
	admin := migrated.DB(t)
	frontdoor.ForEach(t, func(t *testing.T, d frontdoor.Door) {
		ctx := testdb.Context(t)
		key := testdb.Key(t)
		var fnStart, fnEnd time.Time
		require.NoError(t, d.RunOnce(ctx, key, "2026-12-02", func(tx frontdoor.Tx) error {
			if err := tx.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&fnStart); err != nil {
				return err
			}
			if err := tx.Exec(ctx, "SELECT pg_sleep(0.01)"); err != nil {
				return err
			}
			return tx.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&fnEnd)
		}))
		var started, finished time.Time
		require.NoError(t, admin.QueryRowContext(ctx, `SELECT started_at, finished_at FROM pgadvisory.run_once
			WHERE lock_id = $1 AND window_key = '2026-12-02'`, key).Scan(&started, &finished))
		require.False(t, started.After(fnStart), "claimed before fn ran: %v > %v", started, fnStart)
		require.False(t, finished.Before(fnEnd), "finished at COMMIT, after fn: %v < %v", finished, fnEnd)
	}, frontdoor.MaxConns(2))
}
