package pgadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/faultproxy"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Fault-injection tests: the ledger
// under a nemesis that kills the lock holder's backend at random and a proxy
// that cuts clients while COMMIT is in flight. The other fault stories are
// faults_commit_test.go (a kill inside COMMIT, at chosen points) and
// faults_half_open_test.go (a link that goes silent). failurePoolSize is in
// failures_connection_test.go.

// TestFaultKillLedger: the ledger over both front doors with WithWait while
// a nemesis kills the lock holder's backend at random points (before, during
// or after fn, sometimes during COMMIT) and the proxy cuts the client right
// after a lock transaction's COMMIT reached the server, the first and every
// ledgerCommitCutEvery-th after it. Outcomes are ok,
// definite failures (ErrConnLost, ErrDeadlock, other) or unknown
// (ErrCommitUnknown); the ledger stays unique and contiguous, holds between
// #ok and #ok+#unknown rows, every ok call's row and no row of a definitely
// failed call. Afterwards no lock and no connection is left behind.
func TestFaultKillLedger(t *testing.T) {
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		w := witness.New(t)
		table := newCallLedger(t, w.DB)
		key := testdb.Key(t)
		app := "nemesis-" + testdb.Schema(t)
		px := faultproxy.ToTestDB(t)
		var commits, ledgerCommits, cuts atomic.Int64
		// Only the COMMIT of a transaction whose fn ran to its end (it sent
		// ledgerStepDone) is cut: a queued call that is not granted also
		// commits, to keep its place in the queue, so a busy run has several
		// COMMITs per call, and a cut that fell on those would end its call
		// before the lock transaction's COMMIT, never with ErrCommitUnknown.
		// The proxy's hook per connection remembers the mark.
		px.OnClientWriteEach(func() func([]byte) faultproxy.Action {
			stepDone := false
			return func(p []byte) faultproxy.Action {
				switch {
				case faultproxy.HasQuery(p, ledgerStepDone):
					stepDone = true
				case faultproxy.HasQuery(p, "rollback"):
					stepDone = false
				case faultproxy.HasQuery(p, "commit"):
					commits.Add(1)
					cut := stepDone && ledgerCommits.Add(1)%ledgerCommitCutEvery == 1
					stepDone = false
					if cut {
						cuts.Add(1)
						return faultproxy.ForwardThenCutClient
					}
				}
				return faultproxy.Forward
			}
		})
		door := frontdoor.Open(t, drv, frontdoor.MaxConns(failurePoolSize), frontdoor.Configure(px.Route),
			frontdoor.Settings(map[string]string{"application_name": app}))

		stop := make(chan struct{})
		killed := make(chan int, 1)
		go func() { killed <- killLockHolders(w.DB, key, app, stop) }()
		ta := runCallLedger(ctx, func(ctx context.Context, fn func(frontdoor.Tx) error) error {
			return door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
				if err := fn(tx); err != nil {
					return err
				}
				return tx.Exec(ctx, ledgerStepDone) // no arguments: sent as a simple query the proxy reads
			}, pgadvisory.WithWait(30*time.Second))
		}, table)
		close(stop)
		kills := frontdoor.Await(t, killed, "the killer's count")
		px.OnClientWriteEach(nil)

		// Unknown outcomes beyond the proxy's cuts are nemesis kills that
		// hit a COMMIT in flight.
		t.Logf("%s: %v; nemesis kills=%d, commits cut by the proxy=%d of %d lock transactions' (%d in all)",
			drv, ta, kills, cuts.Load(), ledgerCommits.Load(), commits.Load())
		for _, err := range ta.others {
			t.Logf("other error: %v", err)
		}
		require.Empty(t, callLedgerViolations(t, w.DB, table, ta))
		require.Positive(t, kills, "the nemesis killed at least one holder")
		require.Positive(t, ta.counts[outcomeUnknown], "at least one ErrCommitUnknown surfaced")
		require.Positive(t, ta.counts[outcomeOK], "some calls succeeded")
		require.Eventually(t, func() bool { return w.Locks(t, true, key)+w.Locks(t, false, key) == 0 },
			30*time.Second, 10*time.Millisecond, "no lock left behind")
		w.RequireClosing(t, door, witness.Closing{Next: "after-nemesis", StaleConns: failurePoolSize}, key)
	})
}

// TestFaultKillLedgerControl: the same workload (proxy cutting every
// commitCutEvery-th COMMIT, nemesis running) in plain transactions without the
// lock; the checker must report duplicates. The nemesis finds no holder.
func TestFaultKillLedgerControl(t *testing.T) {
	ctx := testdb.Context(t)
	obs := testdb.DB(t)
	table := newCallLedger(t, obs)
	key := testdb.Key(t)
	app := "nemesis-control-" + testdb.Schema(t)
	px := faultproxy.ToTestDB(t)
	var commits atomic.Int64
	px.OnClientWrite(func(p []byte) faultproxy.Action {
		if faultproxy.HasQuery(p, "commit") && commits.Add(1)%commitCutEvery == 0 {
			return faultproxy.ForwardThenCutClient
		}
		return faultproxy.Forward
	})
	cfg, err := pgx.ParseConfig(testdb.URL(t))
	require.NoError(t, err)
	px.Route(cfg)
	cfg.RuntimeParams["application_name"] = app
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(nemesisWorkers)
	t.Cleanup(func() { _ = db.Close() })

	stop := make(chan struct{})
	killed := make(chan int, 1)
	go func() { killed <- killLockHolders(obs, key, app, stop) }()
	ta := runCallLedger(ctx, func(ctx context.Context, fn func(frontdoor.Tx) error) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		if err := fn(frontdoor.SQLTx(tx)); err != nil {
			return err
		}
		if err := tx.Commit(); err != nil {
			// The control has no error model: a failed COMMIT is unknown.
			return fmt.Errorf("%w: %w", pgadvisory.ErrCommitUnknown, err)
		}
		return nil
	}, table)
	close(stop)
	kills := frontdoor.Await(t, killed, "the killer's count")
	for i, err := range ta.others {
		if i < 3 {
			t.Logf("other: %v", err)
		}
	}
	v := callLedgerViolations(t, obs, table, ta)
	t.Logf("control without lock: %v, nemesis kills=%d; violations: %v", ta, kills, v)
	require.NotEmpty(t, v, "without the lock the checker must find duplicates")
	require.Contains(t, v[0], "duplicate seq")
}

const (
	nemesisWorkers = 8
	nemesisIters   = 6
	nemesisPause   = 2 * time.Millisecond
	// commitCutEvery: the control's proxy cuts the client right after
	// forwarding every commitCutEvery-th COMMIT.
	commitCutEvery = 4
	// ledgerCommitCutEvery: under the lock the proxy cuts the client right
	// after forwarding the first lock transaction's COMMIT and every
	// ledgerCommitCutEvery-th after it, so that some calls must end in
	// ErrCommitUnknown.
	ledgerCommitCutEvery = 3
	// ledgerStepDone is the statement TestFaultKillLedger's fn sends last,
	// which tells the proxy that the next COMMIT on that connection is a
	// lock transaction's.
	ledgerStepDone = "SELECT 'fault ledger: step done'"
)

// callOutcome is how one ledger call ended.
type callOutcome int

const (
	outcomeOK callOutcome = iota
	outcomeConnLost
	outcomeDeadlock
	outcomeOther
	outcomeUnknown
)

// outcomeTally counts outcomes and remembers which calls were acknowledged and
// which failed definitely.
type outcomeTally struct {
	mu      sync.Mutex
	counts  [outcomeUnknown + 1]int
	okCalls []string
	failed  []string // definite failures: nothing may be committed
	others  []error
}

func (ta *outcomeTally) record(call string, err error) {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	switch {
	case err == nil:
		ta.counts[outcomeOK]++
		ta.okCalls = append(ta.okCalls, call)
		return
	case errors.Is(err, pgadvisory.ErrCommitUnknown):
		ta.counts[outcomeUnknown]++
		return
	case errors.Is(err, pgadvisory.ErrConnLost):
		ta.counts[outcomeConnLost]++
	case errors.Is(err, pgadvisory.ErrDeadlock):
		ta.counts[outcomeDeadlock]++
	default:
		ta.counts[outcomeOther]++
		ta.others = append(ta.others, err)
	}
	ta.failed = append(ta.failed, call)
}

func (ta *outcomeTally) String() string {
	return fmt.Sprintf("ok=%d connlost=%d deadlock=%d other=%d unknown=%d",
		ta.counts[outcomeOK], ta.counts[outcomeConnLost], ta.counts[outcomeDeadlock], ta.counts[outcomeOther], ta.counts[outcomeUnknown])
}

// newCallLedger creates the ledger: seq (no unique constraint, so that
// duplicates are recorded) and the call that wrote it.
func newCallLedger(t *testing.T, db *sql.DB) string {
	t.Helper()
	table := pgx.Identifier{testdb.Schema(t), "fault_ledger"}.Sanitize()
	_, err := db.Exec("CREATE TABLE " + table + " (seq bigint NOT NULL, call text NOT NULL)")
	require.NoError(t, err)
	return table
}

// callLedgerStep is the critical section: read max(seq), pause, insert max+1.
func callLedgerStep(ctx context.Context, tx frontdoor.Tx, table, call string) error {
	last, err := tx.QueryInt(ctx, "SELECT coalesce(max(seq), 0) FROM "+table)
	if err != nil {
		return err
	}
	time.Sleep(nemesisPause)
	return tx.Exec(ctx, "INSERT INTO "+table+" (seq, call) VALUES ($1, $2)", last+1, call)
}

// runCallLedger runs nemesisWorkers × nemesisIters calls of callLedgerStep
// through run, all starting at once, and tallies the outcomes.
func runCallLedger(ctx context.Context, run func(ctx context.Context, fn func(frontdoor.Tx) error) error, table string) *outcomeTally {
	ta := &outcomeTally{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range nemesisWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range nemesisIters {
				call := fmt.Sprintf("w%d-i%d", w, i)
				err := run(ctx, func(tx frontdoor.Tx) error { return callLedgerStep(ctx, tx, table, call) })
				// The server may be full of other tests' connections
				// (SQLSTATE 53300 at connect): nothing ran, so retry, bounded.
				for try := 0; tooManyClients(err) && try < 200 && ctx.Err() == nil; try++ {
					time.Sleep(25 * time.Millisecond)
					err = run(ctx, func(tx frontdoor.Tx) error { return callLedgerStep(ctx, tx, table, call) })
				}
				ta.record(call, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	return ta
}

// tooManyClients reports a connection refused because the server has no
// free connection slot.
func tooManyClients(err error) bool {
	var pgErr *pgconn.PgError
	return err != nil && errors.As(err, &pgErr) && pgErr.Code == "53300"
}

// callLedgerViolations checks the ledger against the tally and returns every
// broken invariant: seq unique and contiguous from 1; #ok <= rows <=
// #ok + #unknown; every acknowledged call's row present; no row from a call
// that failed definitely.
func callLedgerViolations(t *testing.T, db *sql.DB, table string, ta *outcomeTally) []string {
	t.Helper()
	var rows, distinct, lo, hi int64
	require.NoError(t, db.QueryRow("SELECT count(*), count(DISTINCT seq), coalesce(min(seq), 0), coalesce(max(seq), 0) FROM "+table).
		Scan(&rows, &distinct, &lo, &hi))
	var v []string
	if rows != distinct {
		v = append(v, fmt.Sprintf("%d duplicate seq values (rows=%d distinct=%d)", rows-distinct, rows, distinct))
	}
	if rows > 0 && (lo != 1 || hi != distinct) {
		v = append(v, fmt.Sprintf("seq not contiguous from 1: min=%d max=%d distinct=%d", lo, hi, distinct))
	}
	ok, unknown := int64(ta.counts[outcomeOK]), int64(ta.counts[outcomeUnknown])
	if rows < ok || rows > ok+unknown {
		v = append(v, fmt.Sprintf("rows=%d outside [#ok=%d, #ok+#unknown=%d]", rows, ok, ok+unknown))
	}
	present := map[string]int{}
	r, err := db.Query("SELECT call FROM " + table)
	require.NoError(t, err)
	defer r.Close()
	for r.Next() {
		var c string
		require.NoError(t, r.Scan(&c))
		present[c]++
	}
	require.NoError(t, r.Err())
	for _, c := range ta.okCalls {
		if present[c] != 1 {
			v = append(v, fmt.Sprintf("acknowledged call %s has %d rows", c, present[c]))
		}
	}
	for _, c := range ta.failed {
		if present[c] != 0 {
			v = append(v, fmt.Sprintf("definitely failed call %s committed %d rows", c, present[c]))
		}
	}
	return v
}

// killLockHolders terminates, every 20–50 ms until stop is closed, the backend
// that holds key and runs under application name app. It returns the number
// of backends it terminated.
func killLockHolders(obs *sql.DB, key int64, app string, stop <-chan struct{}) (kills int) {
	for {
		select {
		case <-stop:
			return kills
		case <-time.After(time.Duration(20+rand.IntN(31)) * time.Millisecond):
		}
		var n int
		err := obs.QueryRow(`SELECT count(*) FILTER (WHERE pg_catalog.pg_terminate_backend(l.pid))
			FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
			WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
			  AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
			  AND ((l.classid::bigint << 32) | l.objid::bigint) = $1
			  AND a.application_name = $2`, key, app).Scan(&n)
		if err == nil {
			kills += n
		}
	}
}
