package pgadvisory_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// The ledger is the mutual-exclusion checker: every call reads max(seq), pauses, and inserts max(seq)+1. Under a
// working lock the sequence is unique and contiguous; any overlap of two
// critical sections shows up as a duplicate seq. seq has no unique constraint
// on purpose, so that duplicates are recorded rather than refused.

// TestLedgerMutualExclusion runs the ledger through both front doors with
// WithWait: every call succeeds and the sequence is unique and contiguous.
func TestLedgerMutualExclusion(t *testing.T) {
	frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
		check := testdb.DB(t)
		table := newLedger(t, check)
		res := runLedger(t, door.RunExclusive, testdb.Key(t), table, ledgerWorkers, ledgerIters, pgadvisory.WithWait(30*time.Second))
		require.Empty(t, res.errs)
		require.Equal(t, ledgerWorkers*ledgerIters, res.ok)
		requireExclusive(t, readLedger(t, check, table), res.ok)
	}, frontdoor.MaxConns(ledgerWorkers+2))
}

// TestLedgerControlWithoutLock is the checker's control: the same ledger in
// plain transactions without the lock must produce duplicate seq values.
func TestLedgerControlWithoutLock(t *testing.T) {
	check := testdb.DB(t)
	table := newLedger(t, check)
	db := testdb.DB(t)
	res := runLedger(t, plainTxRunner(db, sql.LevelDefault, false), testdb.Key(t), table, ledgerWorkers, ledgerIters)
	require.Empty(t, res.errs)
	s := readLedger(t, check, table)
	require.EqualValues(t, res.ok, s.rows)
	require.Positive(t, s.duplicates(), "without the lock the checker must see duplicates (%v)", s)
	t.Logf("control without lock: %v, %d duplicates", s, s.duplicates())
}

const (
	ledgerWorkers = 16
	ledgerIters   = 6
	// ledgerPause is the race window between the read and the write. The same
	// pause is used with and without the lock.
	ledgerPause = 2 * time.Millisecond
)

// newLedger creates an empty ledger table in a private schema and returns its
// qualified name.
func newLedger(t *testing.T, db *sql.DB) string {
	t.Helper()
	table := pgx.Identifier{testdb.Schema(t), "ledger"}.Sanitize()
	_, err := db.Exec("CREATE TABLE " + table + " (seq bigint NOT NULL)")
	require.NoError(t, err)
	return table
}

// ledgerStep is the critical section.
func ledgerStep(ctx context.Context, tx frontdoor.Tx, table string) error {
	var last int64
	if err := tx.QueryRow(ctx, "SELECT coalesce(max(seq), 0) FROM "+table).Scan(&last); err != nil {
		return err
	}
	time.Sleep(ledgerPause)
	return tx.Exec(ctx, "INSERT INTO "+table+" (seq) VALUES ($1)", last+1)
}

// ledgerResult is what a ledger run reports: how many calls succeeded and
// the errors of the others.
type ledgerResult struct {
	ok   int
	errs []error
}

// exclusiveRunner runs fn in a transaction under lock key: a front door's
// RunExclusive, or a control's plainTxRunner.
type exclusiveRunner func(ctx context.Context, key int64, fn func(frontdoor.Tx) error, opts ...pgadvisory.Option) error

// runLedger runs workers goroutines of iters ledger steps each through run,
// all starting at once.
func runLedger(t *testing.T, run exclusiveRunner, key int64, table string, workers, iters int, opts ...pgadvisory.Option) ledgerResult {
	t.Helper()
	ctx := testdb.Context(t)
	var (
		mu  sync.Mutex
		res ledgerResult
		wg  sync.WaitGroup
	)
	start := make(chan struct{})
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range iters {
				err := run(ctx, key, func(tx frontdoor.Tx) error { return ledgerStep(ctx, tx, table) }, opts...)
				mu.Lock()
				if err == nil {
					res.ok++
				} else {
					res.errs = append(res.errs, err)
				}
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	return res
}

// ledgerState summarizes the table.
type ledgerState struct {
	rows, distinct, min, max int64
}

func (s ledgerState) duplicates() int64 { return s.rows - s.distinct }

func (s ledgerState) String() string {
	return fmt.Sprintf("rows=%d distinct=%d min=%d max=%d", s.rows, s.distinct, s.min, s.max)
}

func readLedger(t *testing.T, db *sql.DB, table string) ledgerState {
	t.Helper()
	var s ledgerState
	require.NoError(t, db.QueryRow("SELECT count(*), count(DISTINCT seq), coalesce(min(seq), 0), coalesce(max(seq), 0) FROM "+table).
		Scan(&s.rows, &s.distinct, &s.min, &s.max))
	return s
}

// requireExclusive checks the ledger's invariants after ok successful calls:
// seq unique and contiguous from 1, one row per successful call.
func requireExclusive(t *testing.T, s ledgerState, ok int) {
	t.Helper()
	require.EqualValues(t, ok, s.rows, "one ledger row per successful call (%v)", s)
	require.Zero(t, s.duplicates(), "seq must be unique (%v)", s)
	if ok > 0 {
		require.EqualValues(t, 1, s.min, "seq starts at 1 (%v)", s)
		require.EqualValues(t, s.rows, s.max, "seq is contiguous (%v)", s)
	}
}

// plainTxRunner is a control: fn in a plain database/sql transaction at iso,
// optionally behind a hand-written pg_advisory_xact_lock(key) statement.
// Options are ignored.
func plainTxRunner(db *sql.DB, iso sql.IsolationLevel, lock bool) exclusiveRunner {
	return func(ctx context.Context, key int64, fn func(frontdoor.Tx) error, _ ...pgadvisory.Option) error {
		tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: iso})
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		if lock {
			if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", key); err != nil {
				return err
			}
		}
		if err := fn(frontdoor.SQLTx(tx)); err != nil {
			return err
		}
		return tx.Commit()
	}
}
