package pgadvisory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// The caller's context ends while COMMIT is in flight: COMMIT waits for a
// synchronous standby that never connects (syncRepCluster,
// faults_commit_test.go), after the commit record is written locally, and
// the deadline passes. The row IS committed, so the call must not say that
// nothing was: ErrCommitUnknown. Its controls: the design source's
// hand-written RunExclusive returns a bare context error for the same
// committed row, and a context that ends before COMMIT is sent commits
// nothing and says so.

// TestCommitDeadlineDuringCommit: a deadline during COMMIT is
// ErrCommitUnknown on both front doors, and the row is committed.
func TestCommitDeadlineDuringCommit(t *testing.T) {
	c := syncRepCluster(t)
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		w := witnessOnCluster(t, c)
		door := frontdoor.Open(t, drv, frontdoor.MaxConns(failurePoolSize), frontdoor.Configure(onSyncRepCluster(t, c)))
		key := testdb.Key(t)
		err := commitPastDeadline(t, w, door.RunExclusive, key, "deadline-in-commit")
		sqlstate.RequireTyped(t, err, pgadvisory.ErrCommitUnknown, "commit", "")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.NotErrorIs(t, err, pgadvisory.ErrConnLost, "ErrConnLost would promise that nothing committed")
		requireCommittedLocally(t, w, "deadline-in-commit")
		w.RequireClosing(t, door, witness.Closing{Late: true, Next: "next-call", NextSetup: localCommit}, key)
	})
	t.Run("control-design-source", func(t *testing.T) {
		// The hand-written version returns the bare context error, which
		// reads as "it failed", for a row that is committed.
		w := witnessOnCluster(t, c)
		key := testdb.Key(t)
		err := commitPastDeadline(t, w, designSourceRunner(t, onSyncRepCluster(t, c)), key, "deadline-in-commit")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		var pe *pgadvisory.Error
		require.False(t, errors.As(err, &pe))
		requireCommittedLocally(t, w, "deadline-in-commit") // the design source failed, yet its work committed
	})
}

// TestCommitContextDoneBeforeCommit: a context that ends before COMMIT is
// sent (fn returns nil after it ended) commits nothing, and the error says
// so: no ErrCommitUnknown. On the SyncRep cluster a COMMIT that was sent
// would have committed the row locally, so the row's absence shows that
// COMMIT was not sent.
func TestCommitContextDoneBeforeCommit(t *testing.T) {
	c := syncRepCluster(t)
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		w := witnessOnCluster(t, c)
		door := frontdoor.Open(t, drv, frontdoor.MaxConns(failurePoolSize), frontdoor.Configure(onSyncRepCluster(t, c)))
		key := testdb.Key(t)
		ctx, cancel := context.WithCancel(testdb.Context(t))
		defer cancel()
		err := door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
			if err := w.Mark(ctx, tx, "canceled-before-commit"); err != nil {
				return err
			}
			cancel()
			return nil
		})
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, pgadvisory.ErrCommitUnknown)
		w.RequireClosing(t, door, witness.Closing{Mark: "canceled-before-commit"}, key)
	})
}

// commitPastDeadline runs one call through run whose fn marks label and
// returns; the call's deadline passes while COMMIT waits for the
// synchronous standby (the witness sees the backend in COMMIT waiting on
// SyncRep before the deadline is let go). It returns the call's error.
func commitPastDeadline(t *testing.T, w *witness.Witness, run exclusiveRunner, key int64, label string) error {
	t.Helper()
	outer := testdb.Context(t)
	// The deadline passes when the test says so, once COMMIT is seen
	// waiting: no timing assumption.
	deadline := newManualDeadline(outer)
	pids := make(chan int64, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(deadline, key, func(tx frontdoor.Tx) error {
			pid, err := tx.QueryInt(deadline, "SELECT pg_backend_pid()")
			if err != nil {
				return err
			}
			if err := w.Mark(deadline, tx, label); err != nil {
				return err
			}
			pids <- pid
			return nil
		})
	}()
	defer deadline.expire()
	var pid int64
	select {
	case pid = <-pids:
	case err := <-done:
		t.Fatalf("the call ended before fn ran: %v", err)
	}
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, w.DB.QueryRowContext(outer, `SELECT count(*) FROM pg_catalog.pg_stat_activity
			WHERE pid = $1 AND state = 'active' AND lower(query) = 'commit' AND wait_event = 'SyncRep'`, pid).Scan(&n))
		return n == 1
	}, 30*time.Second, 5*time.Millisecond, "COMMIT waits for the standby")
	pgSyncRepPID = pid
	deadline.expire()
	select {
	case err := <-done:
		return err
	case <-outer.Done():
		t.Fatalf("the call did not return after its deadline: %v", outer.Err())
		return nil
	}
}

// pgSyncRepPID is the backend of the last call commitPastDeadline ran.
var pgSyncRepPID int64

// requireCommittedLocally shows that the row of label committed. The
// backend of commitPastDeadline's call may still wait for the standby after
// the call returned (its client gone; the row is invisible meanwhile), or
// have stopped waiting at a cancel request from the driver; the row is
// visible once the wait ends, here by terminating the backend if it still
// waits (the server then finishes the local commit, as in
// TestFaultKillDuringCommitAfterRecord).
func requireCommittedLocally(t *testing.T, w *witness.Witness, label string) {
	t.Helper()
	ctx := testdb.Context(t)
	var killed bool
	require.NoError(t, w.DB.QueryRowContext(ctx, "SELECT pg_terminate_backend($1, 30000)", pgSyncRepPID).Scan(&killed))
	t.Logf("backend still waiting after the call returned: %v", killed)
	require.Eventually(t, func() bool { return w.Committed(t, label) }, 30*time.Second, 10*time.Millisecond,
		"committed locally before the wait for the standby")
}
