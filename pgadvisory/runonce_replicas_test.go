package pgadvisory_test

// Run-once tests: RunOnce / RunOncePgx against a real PostgreSQL, one story
// per runonce_*_test.go file. This file: eight replicas fire the daily
// report, some of them seconds after it is done, and exactly one report is
// sent; the control shows what the ledger prevents (plain RunExclusive runs
// the report again for the late replicas).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

func TestRunOnceReplicas(t *testing.T) {
	admin := migrated.DB(t)
	replicas := openReplicas(t, 8)
	host, err := os.Hostname()
	require.NoError(t, err)
	defaultHolder := fmt.Sprintf("%s/%d", host, os.Getpid())

	for _, tc := range []struct {
		name   string
		fenced bool
	}{{"fenced_named_holders", true}, {"unfenced_default_holder", false}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testdb.Context(t)
			key := testdb.Key(t)
			tbl := newReportTable(t, admin)
			window := pgadvisory.DailyWindow(time.Now(), nil)
			opts := func(i int) []pgadvisory.Option {
				if tc.fenced {
					return []pgadvisory.Option{pgadvisory.WithFencing(), pgadvisory.WithHolder(replicas[i].name)}
				}
				return nil
			}
			outcomes, calls, tokens := fireReport(t, ctx, replicas, key, window, tbl, true, opts)

			var winner string
			var nLocked, nDone, nLateDone int
			for _, o := range outcomes {
				switch {
				case o.err == nil:
					require.Empty(t, winner, "a second success: %s and %s", winner, o.replica)
					winner = o.replica
				case errors.Is(o.err, pgadvisory.ErrLocked):
					nLocked++
				case errors.Is(o.err, pgadvisory.ErrAlreadyDone):
					nDone++
					if o.late {
						nLateDone++
					}
				default:
					t.Fatalf("%s: unexpected error %v", o.replica, o.err)
				}
			}
			t.Logf("winner %s, %d ErrLocked, %d ErrAlreadyDone", winner, nLocked, nDone)
			require.NotEmpty(t, winner)
			require.Equal(t, int64(1), calls, "exactly one fn ran")
			require.Positive(t, nLocked, "some replicas fired while the report ran")
			require.Equal(t, 3, nLateDone, "every replica that fired after the success was told it is done")
			require.Equal(t, int64(1), countRows(t, admin, `SELECT count(*) FROM `+tbl))

			ledger := runOnceRows(t, admin, key)
			require.Len(t, ledger, 1)
			row := ledger[0]
			require.Equal(t, window, row.window)
			require.True(t, row.ordered, "started_at <= finished_at")
			if tc.fenced {
				require.True(t, row.token.Valid)
				require.Equal(t, tokens[winner], row.token.Int64)
				require.Equal(t, winner, row.holder)
			} else {
				require.False(t, row.token.Valid)
				require.Equal(t, defaultHolder, row.holder)
			}
		})
	}

	// CONTROL: the same replicas with plain RunExclusive (no ledger) run
	// the report again when they fire after it finished.
	t.Run("control_run_exclusive", func(t *testing.T) {
		ctx := testdb.Context(t)
		key := testdb.Key(t)
		tbl := newReportTable(t, admin)
		outcomes, calls, _ := fireReport(t, ctx, replicas, key, "", tbl, false, func(int) []pgadvisory.Option { return nil })
		for _, o := range outcomes {
			if o.late {
				require.NoError(t, o.err, o.replica)
			}
		}
		require.GreaterOrEqual(t, calls, int64(4), "without the ledger the report runs again (1 + 3 late replicas)")
		require.Equal(t, calls, countRows(t, admin, `SELECT count(*) FROM `+tbl))
		require.Empty(t, runOnceRows(t, admin, key))
	})
}

// replica is one service replica: its own pool, one front door.
type replica struct {
	name string
	door frontdoor.Door
}

// openReplicas opens n replicas, alternating database/sql and pgx, each with
// its own two-connection pool (the lock transaction and the publish).
func openReplicas(t *testing.T, n int) []replica {
	t.Helper()
	out := make([]replica, n)
	for i := range out {
		door := frontdoor.Open(t, frontdoor.Drivers[i%2], frontdoor.MaxConns(2))
		out[i] = replica{name: fmt.Sprintf("replica-%d-%s", i, door.Label()), door: door}
	}
	return out
}

// runOnceRow is a row of pgadvisory.run_once.
type runOnceRow struct {
	lockID            int64
	window            string
	token             sql.NullInt64
	holder            string
	started, finished time.Time
	ordered           bool // started_at <= finished_at, compared by the server
}

func runOnceRows(t testing.TB, db *sql.DB, key int64) []runOnceRow {
	t.Helper()
	rows, err := db.Query(`SELECT lock_id, window_key, token, holder, started_at, finished_at, started_at <= finished_at
		FROM pgadvisory.run_once WHERE lock_id = $1 ORDER BY window_key`, key)
	require.NoError(t, err)
	defer rows.Close()
	var out []runOnceRow
	for rows.Next() {
		var r runOnceRow
		require.NoError(t, rows.Scan(&r.lockID, &r.window, &r.token, &r.holder, &r.started, &r.finished, &r.ordered))
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	return out
}

// newReportTable is the report the job writes: one row per run.
func newReportTable(t testing.TB, db *sql.DB) string {
	t.Helper()
	tbl := pgx.Identifier{testdb.Schema(t), "reports"}.Sanitize()
	_, err := db.Exec(`CREATE TABLE ` + tbl + ` (replica text NOT NULL, token bigint)`)
	require.NoError(t, err)
	return tbl
}

func countRows(t testing.TB, db *sql.DB, query string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.QueryRow(query, args...).Scan(&n))
	return n
}

// replicaOutcome is what one replica's call returned.
type replicaOutcome struct {
	replica string
	err     error
	late    bool
}

// fireReport fires the daily report on every replica: the first five start
// after random delays within 0.8 s, the last three after the first success
// has committed (plus random delays up to 1.2 s, retrying on ErrLocked), so
// the calls spread over about 2 s and some of them come after the report is
// done. The job writes
// one report row through the lock transaction and then holds the lock until
// some replica has been turned away with ErrLocked, so contention happens in
// every run. runOnce=false is the control: plain RunExclusive, no ledger.
func fireReport(t *testing.T, ctx context.Context, replicas []replica, key int64, window, tbl string, runOnce bool, opts func(i int) []pgadvisory.Option) (outcomes []replicaOutcome, calls int64, tokens map[string]int64) {
	t.Helper()
	var (
		nCalls      atomic.Int64
		mu          sync.Mutex
		lockedOnce  sync.Once
		successOnce sync.Once
		locked      = make(chan struct{})
		success     = make(chan struct{})
		wg          sync.WaitGroup
	)
	tokens = map[string]int64{}
	outcomes = make([]replicaOutcome, len(replicas))
	for i, r := range replicas {
		late := i >= 5
		delay := time.Duration(rand.Int64N(int64(800 * time.Millisecond)))
		if late {
			delay = time.Duration(rand.Int64N(int64(1200 * time.Millisecond)))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if late {
				select {
				case <-success:
				case <-ctx.Done():
				}
			}
			time.Sleep(delay)
			job := func(tx frontdoor.Tx) error {
				nCalls.Add(1)
				tok, _ := tx.FencingToken()
				mu.Lock()
				tokens[r.name] = tok
				mu.Unlock()
				if err := tx.Exec(ctx, `INSERT INTO `+tbl+` (replica, token) VALUES ($1, NULLIF($2::bigint, 0))`, r.name, tok); err != nil {
					return err
				}
				select { // hold the lock until someone was turned away
				case <-locked:
				case <-time.After(20 * time.Second):
				}
				return nil
			}
			call := func() error {
				if runOnce {
					return r.door.RunOnce(ctx, key, window, job, opts(i)...)
				}
				return r.door.RunExclusive(ctx, key, job, opts(i)...)
			}
			err := call()
			// A late replica retries while it meets ErrLocked, as a cron
			// retry would, so that it gets a definite answer.
			for tries := 0; late && errors.Is(err, pgadvisory.ErrLocked) && tries < 200; tries++ {
				time.Sleep(25 * time.Millisecond)
				err = call()
			}
			switch {
			case err == nil:
				successOnce.Do(func() { close(success) })
			case errors.Is(err, pgadvisory.ErrLocked):
				lockedOnce.Do(func() { close(locked) })
			}
			outcomes[i] = replicaOutcome{replica: r.name, err: err, late: late}
		}()
	}
	wg.Wait()
	return outcomes, nCalls.Load(), tokens
}
