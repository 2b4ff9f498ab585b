package pgadvisory_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Nothing leaks when the fenced acquisition fails part-way. The message
// takes session-level locks, which a ROLLBACK does not release; so
// fence_acquire releases them itself on any error, and after a failure of
// a later statement (the hand-over) the front door closes the connection
// instead of returning it to the pool. Each failure below is made to happen
// at its step; afterwards no advisory lock of the keys is held anywhere,
// the connection that ran the message is gone (after the hand-over failed)
// and a fresh caller gets the lock. fencing_pgbouncer_test.go runs the same
// failures behind PgBouncer in transaction mode.
//
// The control runs the same failing message by hand and, like a pool
// returning a connection, rolls back instead of closing: the session lock
// stays on that connection.

func TestFencingFailuresLeakNothing(t *testing.T) {
	admin := migrated.DB(t)
	for _, drv := range frontdoor.Drivers {
		t.Run(string(drv), func(t *testing.T) {
			t.Parallel() // the publish timeouts wait together
			app := fmt.Sprintf("fencing-leak-%d", testdb.Key(t))
			door := frontdoor.Open(t, drv, frontdoor.MaxConns(4), frontdoor.Settings(map[string]string{"application_name": app}))
			for _, step := range fencingFailureSteps {
				t.Run(step.name, func(t *testing.T) {
					emptyPool(door)
					require.Eventually(t, func() bool { return backendsNamed(t, admin, app) == 0 }, 30*time.Second, 10*time.Millisecond)
					runFencingFailure(t, admin, door, step, func(t *testing.T) {
						// Had the connection gone back to the pool, it would
						// still be there, idle.
						require.Eventually(t, func() bool { return backendsNamed(t, admin, app) == 0 }, 30*time.Second, 10*time.Millisecond,
							"the connection that ran the failed message is closed")
					})
				})
			}
		})
	}
}

// TestFencingFailureLeakControl: the failing hand-over, run by hand on one
// connection that is then rolled back and kept (what a pool does with a
// connection after an error), leaves the session lock on it.
func TestFencingFailureLeakControl(t *testing.T) {
	admin := migrated.DB(t)
	ctx := testdb.Context(t)
	key := testdb.Key(t)
	breakHandover(t, admin, key)
	conn := rawConn(t, admin)
	tx, err := conn.BeginTx(ctx, nil)
	require.NoError(t, err)
	var granted bool
	require.NoError(t, tx.QueryRowContext(ctx, `SELECT granted FROM pgadvisory.fence_acquire(ARRAY[$1]::bigint[], false, NULL, '5000ms')`, key).Scan(&granted))
	require.True(t, granted)
	_, err = tx.ExecContext(ctx, `COMMIT AND CHAIN`)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, `SELECT pgadvisory.fence_handover()`)
	sqlstate.Require(t, err, "22P02")
	require.NoError(t, tx.Rollback())

	holds := witness.Of(admin).Holds(t, key)
	require.Len(t, holds, 1, "the session lock outlives the rollback")
	require.Equal(t, "idle", holds[0].State)
	_, err = conn.ExecContext(ctx, `SELECT pg_advisory_unlock_all()`)
	require.NoError(t, err)
}

// fencingFailure is one way to make the fenced acquisition fail, at one
// step: setup arranges it for keys and returns the call's context and
// options, and what ends the arrangement once the call has failed; check
// checks the call's error.
type fencingFailure struct {
	name  string
	setup func(t *testing.T, admin *sql.DB, keys [2]int64) (ctx context.Context, opts []pgadvisory.Option, end func())
	check func(t *testing.T, err error)
	// settle, if not nil, waits (before the arrangement ends) until the
	// server has seen the failure too.
	settle func(t *testing.T, w *witness.Witness, keys [2]int64)
	// handover: the failure comes after the publish committed.
	handover bool
	// queued: the call fails while it waits in lockgen's queue, where no
	// message of its fails part-way (a try that is not granted commits):
	// its connection goes back to the pool.
	queued bool
}

var fencingFailureSteps = []fencingFailure{
	{
		// A writer of the previous token holds the fence row FOR SHARE
		// beyond the publish timeout: fence_acquire fails after it took the
		// locks and drew the token.
		name: "publish_timeout",
		setup: func(t *testing.T, admin *sql.DB, keys [2]int64) (context.Context, []pgadvisory.Option, func()) {
			tbl := fencing.Table(t, admin, testdb.Schema(t), "accounts", keys[0], "strict")
			t1 := fencing.Publish(t, admin, keys[0])
			end := openFencedWriter(t, admin, t1, `INSERT INTO `+tbl+` (id, balance) VALUES (1, 0)`)
			return testdb.Context(t), []pgadvisory.Option{pgadvisory.WithLocks(keys[1])}, end
		},
		check: func(t *testing.T, err error) {
			sqlstate.RequireTyped(t, err, pgadvisory.ErrLockTimeout, "publish", "55P03")
		},
	},
	{
		// The call waits for the higher key, which another session holds,
		// in lockgen's queue, until its context ends: the cancel arrives
		// while it sleeps between tries, or while, at the head of the
		// queue, it waits for the higher key on the server
		// (fence_wait_try), holding neither key. A wait inside
		// fence_acquire, on a database without the queue, is ended by the
		// server in TestFencingWaitOutlastsServerTimeouts.
		name:   "cancel_while_waiting",
		queued: true,
		setup: func(t *testing.T, admin *sql.DB, keys [2]int64) (context.Context, []pgadvisory.Option, func()) {
			other := rawConn(t, admin)
			_, err := other.ExecContext(context.Background(), `SELECT pg_advisory_lock($1)`, keys[1])
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(testdb.Context(t), 500*time.Millisecond)
			t.Cleanup(cancel)
			return ctx, []pgadvisory.Option{pgadvisory.WithLocks(keys[1]), pgadvisory.WithWait(0)}, func() {
				_, err := other.ExecContext(context.Background(), `SELECT pg_advisory_unlock($1)`, keys[1])
				require.NoError(t, err)
			}
		},
		check: func(t *testing.T, err error) {
			require.ErrorIs(t, err, context.DeadlineExceeded)
			var pe *pgadvisory.Error
			require.ErrorAs(t, err, &pe)
			require.Equal(t, pgadvisory.OpLock, pe.Op)
		},
		// The driver gives up at the deadline and cancels a statement that
		// waits on the server afterwards: wait until the server stopped
		// waiting, holding the lower key nowhere while the higher one is
		// still held elsewhere, before it is freed.
		settle: func(t *testing.T, w *witness.Witness, keys [2]int64) {
			require.Eventually(t, func() bool { return len(w.Holds(t, keys[0])) == 0 && w.Locks(t, false, keys[1]) == 0 },
				30*time.Second, 10*time.Millisecond, "the canceled acquisition released the lower key")
			require.Equal(t, 1, w.Locks(t, true, keys[1]), "the other session still holds the higher key")
		},
	},
	{
		// A deferred trigger on the fence row fails: fence_acquire fires
		// deferred triggers before it returns, so this fails inside it and
		// not in the COMMIT that follows.
		name: "deferred_trigger",
		setup: func(t *testing.T, admin *sql.DB, keys [2]int64) (context.Context, []pgadvisory.Option, func()) {
			drop := fenceRowTrigger(t, admin, keys[0], `RAISE EXCEPTION 'test: the publish fails at commit time'`)
			return testdb.Context(t), []pgadvisory.Option{pgadvisory.WithLocks(keys[1])}, drop
		},
		check: func(t *testing.T, err error) {
			pe := sqlstate.Require(t, err, "P0001")
			require.Contains(t, pe.Message, "test: the publish fails at commit time")
		},
	},
	{
		// The publish commits, then the hand-over fails (its pending
		// setting is broken): the backend holds the session locks in an
		// aborted transaction until the connection closes.
		name:     "failing_handover",
		handover: true,
		setup: func(t *testing.T, admin *sql.DB, keys [2]int64) (context.Context, []pgadvisory.Option, func()) {
			return testdb.Context(t), []pgadvisory.Option{pgadvisory.WithLocks(keys[1])}, breakHandover(t, admin, keys[0])
		},
		check: func(t *testing.T, err error) {
			sqlstate.Require(t, err, "22P02")
		},
	},
}

// runFencingFailure makes a fenced call on door fail at step, and checks
// that nothing is left behind: no advisory lock of the keys anywhere, the
// door's pool idle, and a fresh caller, fenced, gets both locks. closed
// checks that the connection that ran the message is gone (nil: not
// observable, e.g. behind a pooler).
func runFencingFailure(t *testing.T, admin *sql.DB, door frontdoor.Door, step fencingFailure, closed func(t *testing.T)) {
	keys := [2]int64{testdb.Key(t), testdb.Key(t)}
	ctx, opts, end := step.setup(t, admin, keys)
	before := fencing.Published(t, admin, keys[0])
	ran := false
	err := door.RunExclusive(ctx, keys[0], func(frontdoor.Tx) error { ran = true; return nil }, append(opts, pgadvisory.WithFencing())...)
	w := witness.Of(admin)
	if step.settle != nil {
		step.settle(t, w, keys)
	}
	end()
	step.check(t, err)
	require.False(t, ran, "fn must not run")
	if step.handover {
		require.Greater(t, fencing.Published(t, admin, keys[0]), before, "the publish committed before the hand-over failed")
	} else {
		require.Equal(t, before, fencing.Published(t, admin, keys[0]), "nothing published")
	}
	require.Eventually(t, func() bool { return len(w.Holds(t, keys[0], keys[1])) == 0 }, 30*time.Second, 10*time.Millisecond,
		"no advisory lock of the keys is held anywhere")
	if closed != nil && !step.queued {
		closed(t)
	}
	var queued int
	require.NoError(t, admin.QueryRow(`SELECT count(*) FROM pgadvisory.waiter WHERE lock_id = ANY($1)`, idsArray(keys[:])).Scan(&queued))
	require.Zero(t, queued, "the call left lockgen's queue")
	frontdoor.RequireIdle(t, door)

	var tok int64
	require.NoError(t, door.RunExclusive(testdb.Context(t), keys[0], func(tx frontdoor.Tx) error {
		tok, _ = tx.FencingToken()
		return nil
	}, pgadvisory.WithFencing(), pgadvisory.WithLocks(keys[1])), "a fresh caller gets the locks")
	require.Equal(t, tok, fencing.Published(t, admin, keys[0]))
	require.Equal(t, tok, fencing.Published(t, admin, keys[1]))
}

// emptyPool closes the door's idle connections.
func emptyPool(door frontdoor.Door) {
	if door.Driver == frontdoor.Pgx {
		door.Pool().Reset()
		return
	}
	door.DB().SetMaxIdleConns(0)
	door.DB().SetMaxIdleConns(4)
}

// breakHandover makes the hand-over of a fenced call on lockID fail: a
// deferred trigger on its fence row breaks the pending setting that
// fence_acquire leaves for fence_handover. It returns what removes the
// trigger (also done when t ends).
func breakHandover(t *testing.T, admin *sql.DB, lockID int64) (drop func()) {
	t.Helper()
	return fenceRowTrigger(t, admin, lockID, `PERFORM pg_catalog.set_config('pgadvisory.pending', 'garbage', false)`)
}

// fenceRowTrigger adds a deferred constraint trigger on lockID's row of
// pgadvisory.fence that runs body, until drop is called or t ends.
func fenceRowTrigger(t *testing.T, admin *sql.DB, lockID int64, body string) (drop func()) {
	t.Helper()
	fn := testdb.Schema(t) + ".fence_row_trigger"
	name := fmt.Sprintf("test_fence_row_%d", lockID)
	_, err := admin.Exec(`CREATE FUNCTION ` + fn + `() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN ` + body + `; RETURN NULL; END $$;
		CREATE CONSTRAINT TRIGGER ` + name + ` AFTER INSERT OR UPDATE ON pgadvisory.fence DEFERRABLE INITIALLY DEFERRED
			FOR EACH ROW WHEN (NEW.lock_id = ` + fmt.Sprint(lockID) + `) EXECUTE FUNCTION ` + fn + `()`)
	require.NoError(t, err)
	// DROP TRIGGER locks pgadvisory.fence, which the other tests use at the
	// same time: a deadlock there fails it, and it is sent again.
	drop = func() {
		var err error
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if _, err = admin.Exec(`DROP TRIGGER IF EXISTS ` + name + ` ON pgadvisory.fence`); err == nil {
				return
			}
			t.Logf("dropping the test trigger %s, again: %v", name, err)
		}
		t.Errorf("dropping the test trigger %s: %v", name, err)
	}
	t.Cleanup(drop)
	return drop
}

// openFencedWriter opens a transaction carrying token that runs stmt and
// stays open (holding its fence row FOR SHARE) until end is called or t
// ends.
func openFencedWriter(t *testing.T, admin *sql.DB, token int64, stmt string) (end func()) {
	t.Helper()
	tx, err := admin.BeginTx(context.Background(), nil)
	require.NoError(t, err)
	end = func() { _ = tx.Rollback() }
	t.Cleanup(end)
	_, err = tx.Exec(`SELECT set_config('pgadvisory.fencing_token', $1, true)`, fmt.Sprint(token))
	require.NoError(t, err)
	_, err = tx.Exec(stmt)
	require.NoError(t, err)
	return end
}

// backendsNamed counts the server's backends with application_name app.
func backendsNamed(t *testing.T, admin *sql.DB, app string) int {
	t.Helper()
	var n int
	require.NoError(t, admin.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n))
	return n
}
