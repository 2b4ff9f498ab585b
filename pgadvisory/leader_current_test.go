package pgadvisory_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// CurrentLeader reports the leader while its backend holds the lock, and
// ErrNoLeader once it does not, although the leader row, read alone, still
// names it.

// childURL and childKey are how TestCurrentLeaderAfterProcessKilled hands
// its database and key to the leader process it starts (this test binary,
// running TestCurrentLeaderChildProcess).
const (
	childURL = "LOCKGEN_LEADER_CHILD_URL"
	childKey = "LOCKGEN_LEADER_CHILD_KEY"
)

// TestCurrentLeaderChildProcess is the leader process of
// TestCurrentLeaderAfterProcessKilled: it leads, prints its term and waits
// to be killed. Run by itself it does nothing.
func TestCurrentLeaderChildProcess(t *testing.T) {
	url := os.Getenv(childURL)
	if url == "" {
		t.Skip("the leader process of TestCurrentLeaderAfterProcessKilled")
	}
	key, err := strconv.ParseInt(os.Getenv(childKey), 10, 64)
	require.NoError(t, err)
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	// Killed by its parent long before the test's deadline ends the
	// leadership (a parent that died cannot leave it leading forever).
	err = pgadvisory.LeadPgx(testdb.Context(t), pool, key, func(ctx context.Context, term int64) error {
		fmt.Printf("elected %d\n", term)
		<-ctx.Done()
		return nil
	}, pgadvisory.WithHolder("child"))
	t.Fatalf("the leader process's leadership ended: %v", err)
}

// TestCurrentLeaderAfterProcessKilled: a leader process is SIGKILLed (no
// cleanup, no resign). CurrentLeader reports it while it lives, and
// ErrNoLeader once the server has ended its backend; the control shows
// that the leader row alone still names the dead leader.
func TestCurrentLeaderAfterProcessKilled(t *testing.T) {
	admin := migrated.DB(t)
	key := testdb.Key(t)
	ctx := testdb.Context(t)
	child := startChild(t, "TestCurrentLeaderChildProcess", childURL+"="+testdb.URL(t), childKey+"="+strconv.FormatInt(key, 10))
	cmd := child.cmd
	var term int64
	_, err := fmt.Sscanf(frontdoor.Await(t, child.lines, "the leader process's election"), "elected %d", &term)
	require.NoError(t, err)

	for _, d := range frontdoor.OpenAll(t) {
		leader, err := d.CurrentLeader(ctx, pgadvisory.ID(key))
		require.NoError(t, err, d.Label())
		require.Equal(t, "child", leader.Holder)
		require.Equal(t, term, leader.Term)
		require.EqualValues(t, witness.Of(admin).Holder(t, key).PID, leader.PID)
		require.WithinDuration(t, time.Now(), leader.Since, time.Minute)
	}

	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	require.Eventually(t, func() bool { return witness.Of(admin).LockFree(t, key) }, 30*time.Second, 10*time.Millisecond,
		"the server ends the dead process's backend")
	for _, d := range frontdoor.OpenAll(t) {
		_, err := d.CurrentLeader(ctx, pgadvisory.ID(key))
		require.ErrorIs(t, err, pgadvisory.ErrNoLeader, d.Label())
		var pe *pgadvisory.Error
		require.ErrorAs(t, err, &pe)
		require.Equal(t, pgadvisory.OpCurrentLeader, pe.Op)
	}
	// Control: the row alone still names the dead leader.
	var holder string
	var rowTerm int64
	require.NoError(t, admin.QueryRowContext(ctx, `SELECT holder, term FROM pgadvisory.leader WHERE lock_id = $1`, key).Scan(&holder, &rowTerm))
	require.Equal(t, "child", holder)
	require.Equal(t, term, rowTerm)
}

// TestCurrentLeaderIsTheSameBackend: CurrentLeader reports a leader only
// while the backend recorded by its election holds the lock: not another
// backend that took the lock afterwards (a plain session lock), and not a
// backend with the same pid that started after the election (a reused pid,
// made here by moving the row's election time before the backend's start;
// the control puts it back).
func TestCurrentLeaderIsTheSameBackend(t *testing.T) {
	admin := migrated.DB(t)
	w := witness.Of(admin)
	frontdoor.ForEach(t, func(t *testing.T, d frontdoor.Door) {
		ctx := testdb.Context(t)
		key := testdb.Key(t)
		err := d.Lead(ctx, pgadvisory.ID(key), func(ctx context.Context, term int64) error {
			leader, err := d.CurrentLeader(ctx, pgadvisory.ID(key))
			require.NoError(t, err)
			require.Equal(t, term, leader.Term)
			require.EqualValues(t, w.Holder(t, key).PID, leader.PID)

			var elected, started time.Time
			require.NoError(t, admin.QueryRowContext(ctx, `SELECT l.elected_at, a.backend_start FROM pgadvisory.leader AS l
				JOIN pg_stat_activity AS a ON a.pid = l.pid WHERE l.lock_id = $1`, key).Scan(&elected, &started))
			require.True(t, started.Before(elected))
			setElected := func(at time.Time) {
				_, err := admin.ExecContext(ctx, `UPDATE pgadvisory.leader SET elected_at = $2 WHERE lock_id = $1`, key, at)
				require.NoError(t, err)
			}
			setElected(started)
			_, err = d.CurrentLeader(ctx, pgadvisory.ID(key))
			require.ErrorIs(t, err, pgadvisory.ErrNoLeader, "a backend with the same pid that started after the election")
			setElected(elected)
			_, err = d.CurrentLeader(ctx, pgadvisory.ID(key))
			require.NoError(t, err, "control: the same backend again")

			// A term published by someone else (the sequence moved past it
			// by a fenced holder: impossible while the leader holds the lock,
			// forced here) is not the leader's.
			_, err = admin.ExecContext(ctx, `UPDATE pgadvisory.fence SET token = token + 1 WHERE lock_id = $1`, key)
			require.NoError(t, err)
			_, err = d.CurrentLeader(ctx, pgadvisory.ID(key))
			require.ErrorIs(t, err, pgadvisory.ErrNoLeader, "a term that is not the published token")
			return nil
		})
		require.NoError(t, err)

		// After the leader resigned, a plain session lock on the key is no
		// leader, although the leader row is still there.
		require.NoError(t, d.RunSession(ctx, pgadvisory.ID(key), func(ctx context.Context) error {
			_, err := d.CurrentLeader(ctx, pgadvisory.ID(key))
			require.ErrorIs(t, err, pgadvisory.ErrNoLeader)
			return nil
		}))
	})
}

// TestCurrentLeaderNotMigrated: without lockgen's schema CurrentLeader
// says so (ErrNotMigrated), not that nobody leads.
func TestCurrentLeaderNotMigrated(t *testing.T) {
	_, url := testdb.EmptyDatabase(t)
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	_, err = pgadvisory.CurrentLeader(testdb.Context(t), db, 1)
	require.ErrorIs(t, err, pgadvisory.ErrNotMigrated)
	require.NotErrorIs(t, err, pgadvisory.ErrNoLeader)
}
