package pgadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/designsource/pglock"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Fault tests: the holder's backend is killed (pg_terminate_backend) while
// the server runs its COMMIT, at two points chosen deterministically rather
// than by luck (TestFaultKillLedger hits COMMIT only sometimes):
//
//   - before the commit record: a deferred constraint trigger sleeps inside
//     COMMIT, and the backend is killed while it sleeps. Nothing commits.
//   - after the commit record: synchronous_standby_names names a standby that
//     never connects, so COMMIT waits in SyncRep after committing locally, and
//     the backend is killed while it waits. The row is committed.
//
// The client sees a broken connection during COMMIT in both cases and cannot
// tell them apart, so both front doors must answer ErrCommitUnknown. Each
// case has a control run through the design source's hand-written
// RunExclusive (designSourceRunExclusive, bench_test.go): it returns a bare
// driver error in both cases, although one did not commit and the other did,
// so a caller reading "error, so nothing happened" is wrong in the second.
//
// failurePoolSize is in failures_connection_test.go.

// TestFaultKillDuringCommitBeforeRecord: the backend is killed while COMMIT
// runs a deferred trigger, before the commit record is written. The server
// aborts the transaction and ends the session (FATAL 57P01). The library
// does not guess from the server's reason which side of the commit record
// the session ended on: a session lost during COMMIT is ErrCommitUnknown.
// Nothing is committed, the lock is free and the pool goes on working.
func TestFaultKillDuringCommitBeforeRecord(t *testing.T) {
	setup := sleepInCommitWitness
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		w := setup(t)
		door := frontdoor.Open(t, drv, frontdoor.MaxConns(failurePoolSize))
		key := testdb.Key(t)
		err := killDuringCommit(t, ctx, w, door.RunExclusive, key, "in-commit", "PgSleep")
		sqlstate.RequireTyped(t, err, pgadvisory.ErrCommitUnknown, "commit", "57P01")
		require.NotErrorIs(t, err, pgadvisory.ErrConnLost, "ErrConnLost would promise that nothing committed")
		// killed before the commit record: rolled back
		w.RequireClosing(t, door, witness.Closing{Mark: "in-commit", Next: "next-call"}, key)
	})
	t.Run("control-design-source", func(t *testing.T) {
		ctx := testdb.Context(t)
		w := setup(t)
		key := testdb.Key(t)
		err := killDuringCommit(t, ctx, w, designSourceRunner(t, nil), key, "in-commit", "PgSleep")
		requireDesignSourceBareError(t, err)
		// Here "error, so not committed" happens to be right; the same bare
		// error comes back after the commit record (AfterRecord's control).
		require.False(t, w.Committed(t, "in-commit"))
		require.True(t, w.LockFree(t, key))
	})
}

// sleepInCommitWitness is a witness whose marks labelled in-commit* make
// COMMIT sleep in a deferred constraint trigger, before the commit record.
func sleepInCommitWitness(t *testing.T) *witness.Witness {
	w := witness.New(t)
	fn := pgx.Identifier{testdb.Schema(t), "sleep_in_commit"}.Sanitize()
	// A deferred constraint trigger runs at COMMIT, before the commit
	// record. Only rows labelled in-commit* sleep, so the usability check
	// commits at once.
	_, err := w.DB.Exec(`CREATE FUNCTION ` + fn + `() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_sleep(` + sleepInCommitSeconds + `); RETURN NULL; END $$`)
	require.NoError(t, err)
	_, err = w.DB.Exec(`CREATE CONSTRAINT TRIGGER sleep_in_commit AFTER INSERT ON ` + w.Table + `
		DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.label LIKE 'in-commit%')
		EXECUTE FUNCTION ` + fn + `()`)
	require.NoError(t, err)
	return w
}

// TestFaultKillDuringFencedCommit: a fenced write (RunFenced) whose backend
// is killed inside COMMIT gets the lock transaction's answer,
// ErrCommitUnknown, not ErrConnLost (which would promise that nothing
// committed), with Op "fenced write" and its token.
func TestFaultKillDuringFencedCommit(t *testing.T) {
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		w := sleepInCommitWitness(t)
		door := frontdoor.Open(t, drv, frontdoor.MaxConns(failurePoolSize))
		const token = 7
		// The write takes the key in its transaction, as killDuringCommit
		// checks that COMMIT is under way while the key is held.
		fenced := func(ctx context.Context, key int64, fn func(frontdoor.Tx) error, _ ...pgadvisory.Option) error {
			return door.RunFenced(ctx, token, func(tx frontdoor.Tx) error {
				if err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", key); err != nil {
					return err
				}
				return fn(tx)
			})
		}
		key := testdb.Key(t)
		err := killDuringCommit(t, ctx, w, fenced, key, "in-commit-fenced", "PgSleep")
		pe := sqlstate.RequireTyped(t, err, pgadvisory.ErrCommitUnknown, pgadvisory.OpFencedWrite, "57P01")
		require.Equal(t, int64(token), pe.Token)
		require.NotErrorIs(t, err, pgadvisory.ErrConnLost, "ErrConnLost would promise that nothing committed")
		w.RequireClosing(t, door, witness.Closing{Mark: "in-commit-fenced", Late: true}, key)
	})
}

// TestFaultKillDuringCommitAfterRecord: the backend is killed while COMMIT
// waits for a synchronous standby, after the commit record. The server
// finishes the local commit and closes the connection without an answer
// (only a WARNING that the transaction "has already committed locally").
// The call reports ErrCommitUnknown, and the row is indeed committed: the
// library claims neither outcome. The lock is free and the pool goes on
// working.
func TestFaultKillDuringCommitAfterRecord(t *testing.T) {
	c := syncRepCluster(t)
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		w := witnessOnCluster(t, c)
		door := frontdoor.Open(t, drv, frontdoor.MaxConns(failurePoolSize), frontdoor.Configure(onSyncRepCluster(t, c)))
		key := testdb.Key(t)
		err := killDuringCommit(t, ctx, w, door.RunExclusive, key, "in-syncrep", "SyncRep")
		sqlstate.RequireTyped(t, err, pgadvisory.ErrCommitUnknown, "commit", "")
		require.NotErrorIs(t, err, pgadvisory.ErrConnLost, "ErrConnLost would promise that nothing committed")
		// Killed after the commit record: committed locally.
		w.RequireClosing(t, door, witness.Closing{Mark: "in-syncrep", Committed: true, Late: true, Next: "next-call", NextSetup: localCommit}, key)
	})
	t.Run("control-design-source", func(t *testing.T) {
		ctx := testdb.Context(t)
		w := witnessOnCluster(t, c)
		key := testdb.Key(t)
		err := killDuringCommit(t, ctx, w, designSourceRunner(t, onSyncRepCluster(t, c)), key, "in-syncrep", "SyncRep")
		requireDesignSourceBareError(t, err)
		// The trap: a bare error from COMMIT, yet the row is committed. A
		// caller that treats the error as "nothing happened" and redoes the
		// work does it twice.
		require.Eventually(t, func() bool { return w.Committed(t, "in-syncrep") }, 30*time.Second, 10*time.Millisecond,
			"the design source failed, yet its work committed")
		require.Eventually(t, func() bool { return w.LockFree(t, key) }, 30*time.Second, 10*time.Millisecond)
	})
}

// sleepInCommitSeconds bounds how long the deferred trigger sleeps inside COMMIT.
// The test kills the backend as soon as it is seen sleeping, so this is not
// a timing assumption: it only has to outlast a slow observer.
const sleepInCommitSeconds = "30"

// designSourceRunner is the design source's RunExclusive on a database/sql
// pool of its own; adjust (may be nil) edits the connection configuration.
// It ignores options.
func designSourceRunner(t *testing.T, adjust func(*pgx.ConnConfig)) exclusiveRunner {
	t.Helper()
	cfg, err := pgx.ParseConfig(testdb.URL(t))
	require.NoError(t, err)
	if adjust != nil {
		adjust(cfg)
	}
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { _ = db.Close() })
	return func(ctx context.Context, key int64, fn func(frontdoor.Tx) error, _ ...pgadvisory.Option) error {
		return pglock.RunExclusive(ctx, db, key, func(tx *sql.Tx) error { return fn(frontdoor.SQLTx(tx)) })
	}
}

// killDuringCommit runs one call through run whose fn marks label with the
// witness. When the call's backend is seen executing COMMIT while waiting
// on waitEvent, the observer terminates it. It returns the call's error.
func killDuringCommit(t *testing.T, ctx context.Context, w *witness.Witness, run exclusiveRunner, key int64, label, waitEvent string) error {
	t.Helper()
	pids := make(chan int64, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, key, func(tx frontdoor.Tx) error {
			pid, err := tx.QueryInt(ctx, "SELECT pg_backend_pid()")
			if err != nil {
				return err
			}
			if err := w.Mark(ctx, tx, label); err != nil {
				return err
			}
			pids <- pid
			return nil
		})
	}()
	var pid int64
	select {
	case pid = <-pids:
	case err := <-done:
		t.Fatalf("the call ended before fn ran: %v", err)
	case <-ctx.Done():
		t.Fatalf("fn never ran: %v", ctx.Err())
	}

	// Wait (bounded by ctx) until the backend is inside COMMIT at the chosen
	// point. If the call ends first, COMMIT did not stop where the test
	// expects and the test is void.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		var n int
		require.NoError(t, w.DB.QueryRowContext(ctx, `SELECT count(*) FROM pg_catalog.pg_stat_activity
			WHERE pid = $1 AND state = 'active' AND lower(query) = 'commit' AND wait_event = $2`,
			pid, waitEvent).Scan(&n))
		if n == 1 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the call ended before its backend was seen in COMMIT waiting on %s: %v", waitEvent, err)
		case <-ctx.Done():
			t.Fatalf("backend %d never seen in COMMIT waiting on %s: %v", pid, waitEvent, ctx.Err())
		case <-tick.C:
		}
	}
	require.False(t, w.LockFree(t, key), "control: the probe sees the lock held while COMMIT runs")

	var killed bool
	// With a timeout, pg_terminate_backend waits until the backend is gone.
	require.NoError(t, w.DB.QueryRowContext(ctx, "SELECT pg_terminate_backend($1, 30000)", pid).Scan(&killed))
	require.True(t, killed)
	require.False(t, w.BackendAlive(t, pid))

	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		t.Fatalf("the call did not return after its backend was killed: %v", ctx.Err())
		return nil
	}
}

// requireDesignSourceBareError checks a design-source call killed during COMMIT: a bare
// driver error, which says nothing about the outcome, whatever the row says.
func requireDesignSourceBareError(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	require.NotErrorIs(t, err, pgadvisory.ErrCommitUnknown)
	require.NotErrorIs(t, err, pgadvisory.ErrConnLost)
	var pe *pgadvisory.Error
	require.False(t, errors.As(err, &pe), "the design source returns the driver's error as is")
	t.Logf("design source's error: %v", err)
}

// syncRepCluster is a throwaway cluster whose synchronous standby never
// connects: a session with synchronous_commit = on waits in SyncRep after
// every COMMIT that wrote WAL, committed locally but never acknowledged. The
// cluster's default stays synchronous_commit = off (pgcluster's), so
// observers, setup and cleanup never wait; the calls under test opt in.
func syncRepCluster(t *testing.T) *pgcluster.Cluster {
	t.Helper()
	return pgcluster.Shared(t, "pgadvisory-syncrep",
		pgcluster.WithSetting("synchronous_standby_names", "nobody"))
}

// onSyncRepCluster points a configuration at c with synchronous_commit = on.
func onSyncRepCluster(t *testing.T, c *pgcluster.Cluster) func(*pgx.ConnConfig) {
	t.Helper()
	cc, err := pgx.ParseConfig(c.URL())
	require.NoError(t, err)
	return func(cfg *pgx.ConnConfig) {
		cfg.Host, cfg.Port, cfg.Database, cfg.User, cfg.Password = cc.Host, cc.Port, cc.Database, cc.User, cc.Password
		cfg.TLSConfig, cfg.Fallbacks = nil, nil
		cfg.RuntimeParams["synchronous_commit"] = "on"
	}
}

// witnessOnCluster is a witness on c: synchronous_commit = off, and a marks
// table of the test's own, dropped at the end (the cluster is shared by the
// test binary).
func witnessOnCluster(t *testing.T, c *pgcluster.Cluster) *witness.Witness {
	t.Helper()
	cfg, err := pgx.ParseConfig(c.URL())
	require.NoError(t, err)
	cfg.RuntimeParams["synchronous_commit"] = "off"
	obs := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { _ = obs.Close() })
	table := pgx.Identifier{fmt.Sprintf("syncrep_marks_%x", testdb.Key(t))}.Sanitize()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = obs.ExecContext(ctx, "CREATE TABLE "+table+" (label text PRIMARY KEY)")
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// A failed test may have left a session waiting in SyncRep with the
		// table locked: end it, or the DROP waits forever.
		_, _ = obs.ExecContext(ctx, `SELECT pg_terminate_backend(pid, 10000) FROM pg_catalog.pg_locks
			WHERE relation = $1::regclass AND pid <> pg_backend_pid()`, table)
		_, _ = obs.ExecContext(ctx, "DROP TABLE IF EXISTS "+table)
	})
	return &witness.Witness{DB: obs, Table: table}
}

// localCommit is the next call's first statement on a cluster whose
// synchronous standby never answers: its COMMIT waits for the local flush
// only.
const localCommit = "SET LOCAL synchronous_commit = local"
