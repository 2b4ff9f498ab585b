package status_test

import (
	"context"
	"database/sql"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/status"
	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/lockscene"
	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestReadAsAMonitoringRole: a role with pg_monitor (which lets it see
// every session in pg_stat_activity) but no privilege on lockgen's view
// used to get "permission denied for view status" and nothing else. It now
// gets every lock from pg_locks, raw keys with their holders, and a note
// naming the GRANT; once granted, names. The application's own role, a
// member of nothing, gets the same.
func TestReadAsAMonitoringRole(t *testing.T) {
	ctx := testdb.Context(t)
	admin := testdb.DB(t)
	s := lockscene.Start(t, admin)
	for _, monitor := range []bool{true, false} {
		role := fencing.AppRole(t, admin)
		if monitor {
			_, err := admin.Exec(`GRANT pg_monitor TO ` + role)
			require.NoError(t, err)
		}
		db := fencing.OpenAs(t, admin, role)

		_, err := status.Query(ctx, db, "")
		require.ErrorContains(t, err, "permission denied for view status", "control: the view is denied")

		snap, err := status.Read(ctx, db, "")
		require.NoError(t, err)
		require.False(t, snap.Named)
		require.Contains(t, snap.Unnamed, "the role "+role+" may not read the view pgadvisory.status")
		grant := regexp.MustCompile(`GRANT SELECT ON pgadvisory\.status TO \S+`).FindString(snap.Unnamed)
		require.Equal(t, "GRANT SELECT ON pgadvisory.status TO "+role, grant)
		holder := rowOf(snap.Locks, s.Plain.ID, true)
		require.NotNil(t, holder, "the held lock is listed by its key")
		require.Equal(t, s.HolderPID, holder.PID)
		if monitor {
			require.Equal(t, s.HolderApp, holder.AppName, "pg_monitor sees other roles' sessions")
			require.Equal(t, "idle in transaction", holder.State)
		}
		waiter := rowOf(snap.Locks, s.Plain.ID, false)
		require.NotNil(t, waiter)
		require.Equal(t, []int{s.HolderPID}, waiter.BlockedBy)

		_, err = admin.Exec(grant)
		require.NoError(t, err)
		snap, err = status.Read(ctx, db, "")
		require.NoError(t, err)
		require.True(t, snap.Named, "the GRANT the note names gives names")
		require.Equal(t, s.Plain.Name, rowOf(snap.Locks, s.Plain.ID, true).Name)
	}
}

func rowOf(locks []status.Lock, id int64, granted bool) *status.Lock {
	for i := range locks {
		if locks[i].LockID == id && locks[i].Granted == granted {
			return &locks[i]
		}
	}
	return nil
}

// TestReadRefusesAStandby: on a hot standby, which grants no lock the
// primary holds, Read used to return no lock at all ("no advisory locks
// held or awaited") while the primary held one; it now refuses with
// ErrStandby. Control: the primary shows the lock.
func TestReadRefusesAStandby(t *testing.T) {
	ctx, cancel := context.WithTimeout(testdb.Context(t), time.Minute)
	defer cancel()
	primary := pgcluster.Start(t)
	standby := primary.StartStandby(t)
	pdb := open(t, primary.URL())
	require.NoError(t, pgadvisory.Migrate(ctx, pdb))
	held, err := pdb.Conn(ctx)
	require.NoError(t, err)
	defer held.Close()
	_, err = held.ExecContext(ctx, `SELECT pg_advisory_lock(42)`)
	require.NoError(t, err)

	snap, err := status.Read(ctx, pdb, "")
	require.NoError(t, err)
	require.NotNil(t, rowOf(snap.Locks, 42, true), "control: the primary holds it")

	sdb := open(t, standby.URL())
	require.Eventually(t, func() bool {
		var ok bool
		return sdb.QueryRowContext(ctx, `SELECT to_regclass('pgadvisory.status') IS NOT NULL`).Scan(&ok) == nil && ok
	}, 30*time.Second, 20*time.Millisecond, "the schema reaches the standby")
	locks, err := status.Query(ctx, sdb, "")
	require.NoError(t, err)
	require.Nil(t, rowOf(locks, 42, true), "control: the view on the standby shows none of the primary's locks")
	_, err = status.Read(ctx, sdb, "")
	require.ErrorIs(t, err, status.ErrStandby)
	require.ErrorContains(t, err, "run lockgen status against the primary")
}

func open(t *testing.T, u string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", u)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}
