package pgadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// fn ends the lock transaction itself: it calls Commit or Rollback on the
// transaction it was given (or, through pgx, runs COMMIT). The call reports
// ErrTxEnded (Op "fn"), not a driver message, and says that what fn
// committed ran under the lock only up to then. RunOnce claims the window
// before fn, in the same transaction, so a fn that commits itself commits
// the claim too and the window's work never runs twice.

// fnEnding is how fn ends the transaction, per front door.
type fnEnding struct {
	name   string
	sqlEnd func(tx *sql.Tx) error
	pgxEnd func(ctx context.Context, tx pgx.Tx) error
	commit bool // the work fn wrote before ending is committed
}

var fnEndings = []fnEnding{
	{"Commit", func(tx *sql.Tx) error { return tx.Commit() }, func(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) }, true},
	{"Rollback", func(tx *sql.Tx) error { return tx.Rollback() }, func(ctx context.Context, tx pgx.Tx) error { return tx.Rollback(ctx) }, false},
	{"COMMIT statement (pgx)", nil, func(ctx context.Context, tx pgx.Tx) error { _, err := tx.Exec(ctx, "COMMIT"); return err }, true},
}

func TestFnEndsTransaction(t *testing.T) {
	for _, end := range fnEndings {
		for _, returns := range []string{"nil", "error"} {
			t.Run(end.name+"/returns_"+returns, func(t *testing.T) {
				frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
					if drv == frontdoor.SQL && end.sqlEnd == nil {
						t.Skip("database/sql cannot see a COMMIT statement without a round trip")
					}
					ctx := testdb.Context(t)
					w := witness.New(t)
					door := frontdoor.Open(t, drv, frontdoor.MaxConns(failurePoolSize))
					key := testdb.Key(t)
					boom := errors.New("after ending the transaction")
					err := runEnding(ctx, door, key, end, func(tx frontdoor.Tx) error { return w.Mark(ctx, tx, "before-end") }, func() error {
						if returns == "error" {
							return boom
						}
						return nil
					})
					sqlstate.RequireTyped(t, err, pgadvisory.ErrTxEnded, "fn", "")
					require.Contains(t, err.Error(), "fn ended the lock transaction itself; what it committed ran under the lock only up to that moment")
					if returns == "error" {
						require.ErrorIs(t, err, boom, "fn's own error is kept")
					}
					require.NotContains(t, err.Error(), "already been committed", "no bare driver message")
					w.RequireClosing(t, door, witness.Closing{Mark: "before-end", Committed: end.commit, Next: "next-call"}, key)
				})
			})
		}
	}
}

// TestRunOnceFnEndsTransaction: a RunOnce whose fn commits the transaction
// itself reports ErrTxEnded, and the window is done: the next call does not
// run fn again. The control is the order this replaced, the ledger row
// written after fn: there fn's own commit leaves no row, and every call
// runs the window's work again.
func TestRunOnceFnEndsTransaction(t *testing.T) {
	admin := migrated.DB(t)
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		door := frontdoor.Open(t, drv, frontdoor.MaxConns(failurePoolSize))
		tbl := newReportTable(t, admin)
		key := testdb.Key(t)
		work := func(tx frontdoor.Tx) error {
			return tx.Exec(ctx, `INSERT INTO `+tbl+` (replica) VALUES ($1)`, door.Label())
		}
		for call := range 3 {
			err := runOnceEnding(ctx, door, key, "2026-12-02", fnEndings[0], work)
			if call == 0 {
				require.ErrorIs(t, err, pgadvisory.ErrTxEnded)
			} else {
				require.ErrorIs(t, err, pgadvisory.ErrAlreadyDone, "call %d", call)
			}
		}
		require.Equal(t, int64(1), countRows(t, admin, `SELECT count(*) FROM `+tbl), "the work ran once")
		require.Len(t, runOnceRows(t, admin, key), 1, "fn's commit committed the claim")
		frontdoor.RequireIdle(t, door)
	})
	t.Run("control-ledger-after-fn", func(t *testing.T) {
		ctx := testdb.Context(t)
		door := frontdoor.Open(t, frontdoor.SQL, frontdoor.MaxConns(failurePoolSize))
		tbl := newReportTable(t, admin)
		key := testdb.Key(t)
		for range 3 {
			_ = pgadvisory.RunExclusive(ctx, door.DB(), key, func(tx *sql.Tx) error {
				var done bool
				if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT FROM pgadvisory.run_once WHERE lock_id = $1 AND window_key = '2026-12-02')`, key).Scan(&done); err != nil || done {
					return err
				}
				if _, err := tx.ExecContext(ctx, `INSERT INTO `+tbl+` (replica) VALUES ('control')`); err != nil {
					return err
				}
				_ = tx.Commit() // fn ends the transaction itself
				_, err := tx.ExecContext(ctx, `INSERT INTO pgadvisory.run_once (lock_id, window_key, holder, started_at, finished_at)
					VALUES ($1, '2026-12-02', 'control', now(), now())`, key)
				return err // sql.ErrTxDone: the ledger row is never written
			})
		}
		require.Equal(t, int64(3), countRows(t, admin, `SELECT count(*) FROM `+tbl), "the work ran on every call")
		require.Empty(t, runOnceRows(t, admin, key))
	})
}

// runEnding runs RunExclusive whose fn does work, ends the transaction as
// end says, and returns what after returns.
func runEnding(ctx context.Context, door frontdoor.Door, key int64, end fnEnding, work func(frontdoor.Tx) error, after func() error) error {
	if door.Driver == frontdoor.Pgx {
		return pgadvisory.RunExclusivePgx(ctx, door.Pool(), key, func(tx pgx.Tx) error {
			if err := work(frontdoor.PgxTx(tx)); err != nil {
				return err
			}
			if err := end.pgxEnd(ctx, tx); err != nil {
				return err
			}
			return after()
		})
	}
	return pgadvisory.RunExclusive(ctx, door.DB(), key, func(tx *sql.Tx) error {
		if err := work(frontdoor.SQLTx(tx)); err != nil {
			return err
		}
		if err := end.sqlEnd(tx); err != nil {
			return err
		}
		return after()
	})
}

// runOnceEnding is runEnding for RunOnce, with fn returning nil.
func runOnceEnding(ctx context.Context, door frontdoor.Door, key int64, window string, end fnEnding, work func(frontdoor.Tx) error) error {
	if door.Driver == frontdoor.Pgx {
		return pgadvisory.RunOncePgx(ctx, door.Pool(), key, window, func(tx pgx.Tx) error {
			if err := work(frontdoor.PgxTx(tx)); err != nil {
				return err
			}
			return end.pgxEnd(ctx, tx)
		})
	}
	return pgadvisory.RunOnce(ctx, door.DB(), key, window, func(tx *sql.Tx) error {
		if err := work(frontdoor.SQLTx(tx)); err != nil {
			return err
		}
		return end.sqlEnd(tx)
	})
}
