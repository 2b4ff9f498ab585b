package pgadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// The isolation trap: at REPEATABLE READ and
// SERIALIZABLE the snapshot is taken by the first statement, the one that
// waits for the lock, so the holder can miss the previous holder's writes.

// TestIsolationTrapControl proves the trap is real with hand-written lock
// transactions: at REPEATABLE READ the ledger gets duplicates although every
// transaction held the lock; at SERIALIZABLE the stale reads surface as
// serialization failures (40001) instead (or, were SSI to miss one, as
// duplicates).
func TestIsolationTrapControl(t *testing.T) {
	t.Run("repeatable-read", func(t *testing.T) {
		check := testdb.DB(t)
		table := newLedger(t, check)
		res := runLedger(t, plainTxRunner(testdb.DB(t), sql.LevelRepeatableRead, true), testdb.Key(t), table, trapWorkers, trapIters)
		require.Empty(t, res.errs, "inserts alone raise no serialization failure at REPEATABLE READ")
		s := readLedger(t, check, table)
		require.EqualValues(t, res.ok, s.rows)
		require.Positive(t, s.duplicates(), "REPEATABLE READ behind the lock must show stale reads (%v)", s)
		t.Logf("repeatable read + lock: %v, %d duplicates, %d failures", s, s.duplicates(), len(res.errs))
	})
	t.Run("serializable", func(t *testing.T) {
		check := testdb.DB(t)
		table := newLedger(t, check)
		res := runLedger(t, plainTxRunner(testdb.DB(t), sql.LevelSerializable, true), testdb.Key(t), table, trapWorkers, trapIters)
		for _, err := range res.errs {
			sqlstate.Require(t, err, "40001", "only serialization failures are expected")
		}
		s := readLedger(t, check, table)
		require.EqualValues(t, res.ok, s.rows)
		require.Positive(t, s.duplicates()+int64(len(res.errs)),
			"SERIALIZABLE behind the lock must show stale reads or 40001 (%v, %d failures)", s, len(res.errs))
		t.Logf("serializable + lock: %v, %d duplicates, %d failures", s, s.duplicates(), len(res.errs))
	})
}

// TestIsolationLevelRefused: asking either front door for REPEATABLE READ or
// SERIALIZABLE returns ErrIsolationLevel before fn runs and before any
// connection is used. The control call at READ COMMITTED shows that the
// counters do see a call that reaches the server.
func TestIsolationLevelRefused(t *testing.T) {
	refused := []struct {
		name string
		opt  pgadvisory.Option
	}{
		{"sql-repeatable-read", pgadvisory.WithTxOptions(sql.TxOptions{Isolation: sql.LevelRepeatableRead})},
		{"sql-serializable", pgadvisory.WithTxOptions(sql.TxOptions{Isolation: sql.LevelSerializable})},
		{"sql-snapshot", pgadvisory.WithTxOptions(sql.TxOptions{Isolation: sql.LevelSnapshot})},
		{"pgx-repeatable-read", pgadvisory.WithPgxTxOptions(pgx.TxOptions{IsoLevel: pgx.RepeatableRead})},
		{"pgx-serializable", pgadvisory.WithPgxTxOptions(pgx.TxOptions{IsoLevel: pgx.Serializable})},
	}
	accepted := []pgadvisory.Option{
		pgadvisory.WithTxOptions(sql.TxOptions{}),
		pgadvisory.WithTxOptions(sql.TxOptions{Isolation: sql.LevelReadCommitted}),
		pgadvisory.WithPgxTxOptions(pgx.TxOptions{IsoLevel: pgx.ReadCommitted}),
	}
	ctx := testdb.Context(t)

	t.Run(string(frontdoor.SQL), func(t *testing.T) {
		cfg, err := pgx.ParseConfig(testdb.URL(t))
		require.NoError(t, err)
		var connects atomic.Int32
		db := stdlib.OpenDB(*cfg, stdlib.OptionBeforeConnect(func(context.Context, *pgx.ConnConfig) error {
			connects.Add(1)
			return nil
		}))
		t.Cleanup(func() { _ = db.Close() })
		door := frontdoor.OnDB(db)
		key := testdb.Key(t)
		for _, tc := range refused {
			called := false
			err := door.RunExclusive(ctx, key, func(frontdoor.Tx) error { called = true; return nil }, tc.opt)
			requireIsolationRefused(t, err, tc.name)
			require.False(t, called, "%s: fn must not run", tc.name)
		}
		require.Zero(t, connects.Load(), "no connection may be opened")
		require.Zero(t, db.Stats().OpenConnections)

		for _, opt := range accepted {
			require.NoError(t, door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error { return requireReadCommitted(ctx, tx) }, opt))
		}
		require.Positive(t, connects.Load(), "control: a real call opens a connection")
	})

	t.Run(string(frontdoor.Pgx), func(t *testing.T) {
		pool := testdb.Pool(t)
		door := frontdoor.OnPool(pool)
		key := testdb.Key(t)
		acquires := pool.Stat().AcquireCount()
		for _, tc := range refused {
			called := false
			err := door.RunExclusive(ctx, key, func(frontdoor.Tx) error { called = true; return nil }, tc.opt)
			requireIsolationRefused(t, err, tc.name)
			require.False(t, called, "%s: fn must not run", tc.name)
		}
		require.Equal(t, acquires, pool.Stat().AcquireCount(), "no connection may be acquired")

		for _, opt := range accepted {
			require.NoError(t, door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error { return requireReadCommitted(ctx, tx) }, opt))
		}
		require.Greater(t, pool.Stat().AcquireCount(), acquires, "control: a real call acquires a connection")
	})
}

// TestIsolationServerDefaultRepeatableRead: when the connections default to
// REPEATABLE READ (a startup parameter, as a DBA might set per role),
// the lock transaction still runs at READ COMMITTED and the ledger stays
// exact. The control runs a hand-written lock transaction on the same
// connections (BEGIN without a level) and must find stale reads.
func TestIsolationServerDefaultRepeatableRead(t *testing.T) {
	ctx := testdb.Context(t)
	cfg, err := pgx.ParseConfig(testdb.URL(t))
	require.NoError(t, err)
	cfg.RuntimeParams[defaultIsolationParam] = "repeatable read"
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(ledgerWorkers + 2)
	t.Cleanup(func() { _ = db.Close() })
	pool := testdb.PoolConfig(t, func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams[defaultIsolationParam] = "repeatable read"
		c.MaxConns = ledgerWorkers + 2
	})

	// The setting is in force for plain transactions on both handles.
	var level string
	require.NoError(t, plainTxRunner(db, sql.LevelDefault, false)(ctx, 0, func(tx frontdoor.Tx) error {
		return tx.QueryRow(ctx, "SELECT current_setting('transaction_isolation')").Scan(&level)
	}))
	require.Equal(t, "repeatable read", level)
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, "SELECT current_setting('transaction_isolation')").Scan(&level)
	}))
	require.Equal(t, "repeatable read", level)

	t.Run("control-hand-written-lock", func(t *testing.T) {
		check := testdb.DB(t)
		table := newLedger(t, check)
		res := runLedger(t, plainTxRunner(db, sql.LevelDefault, true), testdb.Key(t), table, trapWorkers, trapIters)
		require.Empty(t, res.errs)
		s := readLedger(t, check, table)
		require.Positive(t, s.duplicates(), "the server default must make a hand-written lock read stale data (%v)", s)
		t.Logf("hand-written lock at server default repeatable read: %v, %d duplicates", s, s.duplicates())
	})

	for _, door := range []frontdoor.Door{frontdoor.OnDB(db), frontdoor.OnPool(pool)} {
		t.Run(door.Label(), func(t *testing.T) {
			require.NoError(t, door.RunExclusive(ctx, testdb.Key(t), func(tx frontdoor.Tx) error { return requireReadCommitted(ctx, tx) }))

			check := testdb.DB(t)
			table := newLedger(t, check)
			res := runLedger(t, door.RunExclusive, testdb.Key(t), table, ledgerWorkers, trapIters, pgadvisory.WithWait(30*time.Second))
			require.Empty(t, res.errs)
			requireExclusive(t, readLedger(t, check, table), res.ok)
		})
	}
}

const (
	trapWorkers = 4
	trapIters   = 5
)

func requireIsolationRefused(t *testing.T, err error, name string) {
	t.Helper()
	require.ErrorIs(t, err, pgadvisory.ErrIsolationLevel, name)
	var pe *pgadvisory.Error
	require.ErrorAs(t, err, &pe, name)
	require.Empty(t, pe.SQLState, "%s: refused locally, not by the server", name)
}

// requireReadCommitted fails unless q's transaction runs at READ COMMITTED.
func requireReadCommitted(ctx context.Context, tx frontdoor.Tx) error {
	var level string
	if err := tx.QueryRow(ctx, "SELECT current_setting('transaction_isolation')").Scan(&level); err != nil {
		return err
	}
	if level != "read committed" {
		return errors.New("lock transaction runs at " + level + ", want read committed")
	}
	return nil
}

// defaultIsolationParam is the connection parameter that makes every
// transaction of a session REPEATABLE READ unless it says otherwise.
const defaultIsolationParam = "default_transaction_isolation"
