package pgadvisory_test

// Fencing tests (research reliability.md §2, §4.4 items 3 and 4), against a
// real PostgreSQL, over both front doors. Every guarantee has a control that
// runs the same sequence with fencing off (a table without the trigger, or a
// write pattern that must block) and shows the failure the checker detects.
//
// The tests share the package database's pgadvisory schema with the
// migration tests, which drop it; each test therefore runs Migrate first
// (idempotent), and none of them is parallel at the top level.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// ---- 1. Stale writer under a pause -----------------------------------------

// lateWrite is one of the late writes of a paused holder, and its outcome.
type lateWrite struct {
	name string
	rows int64
	err  error
}

// lateWrites are the writes a paused holder with token tok attempts after
// it lost its lock: every kind of write through RunFenced, a write carrying
// the token in the column only, and a re-publish of the token.
func lateWrites(ctx context.Context, door frontdoor.Door, raw *sql.DB, tbl string, key, tok int64) []lateWrite {
	through := func(name, query string) lateWrite {
		w := lateWrite{name: name}
		w.err = door.RunFenced(ctx, tok, func(tx frontdoor.Tx) error {
			n, err := tx.ExecCount(ctx, query)
			w.rows = n
			return err
		})
		return w
	}
	out := []lateWrite{
		through("insert", `INSERT INTO `+tbl+` (id, balance) VALUES (4, 400)`),
		through("update", `UPDATE `+tbl+` SET balance = -1 WHERE id = 1`),
		through("update_row_b_did_not_touch", `UPDATE `+tbl+` SET balance = -9 WHERE id = 9`),
		through("delete", `DELETE FROM `+tbl+` WHERE id = 2`),
		through("upsert", `INSERT INTO `+tbl+` (id, balance) VALUES (3, -3) ON CONFLICT (id) DO UPDATE SET balance = excluded.balance`),
		through("multi_row_insert", `INSERT INTO `+tbl+` (id, balance) VALUES (5, 500), (6, 600)`),
	}
	w := lateWrite{name: "column_token"}
	res, err := raw.ExecContext(ctx, `INSERT INTO `+tbl+` (id, balance, fencing_token) VALUES (7, 700, $1)`, tok)
	if w.err = err; err == nil {
		w.rows, _ = res.RowsAffected()
	}
	out = append(out, w)
	w = lateWrite{name: "republish"}
	res, err = raw.ExecContext(ctx, fencing.PublishSQL, key, tok)
	if w.err = err; err == nil {
		w.rows, _ = res.RowsAffected()
	}
	return append(out, w)
}

// staleWriterSequence runs the paused-holder sequence: A takes the lock with
// fencing, writes through another connection, pauses; A's lock backend dies
// (terminated, or idle_in_transaction_session_timeout on lockPools); B
// takes the lock and writes; A resumes and writes with its old token.
// fenced=false is the control: the table has no trigger.
func staleWriterSequence(t *testing.T, admin *sql.DB, door frontdoor.Door, loss string, fenced bool) {
	ctx := testdb.Context(t)
	key := testdb.Key(t)
	policy := "strict"
	if !fenced {
		policy = ""
	}
	tbl := fencing.Table(t, admin, testdb.Schema(t), "accounts", key, policy)

	type pause struct{ token, pid int64 }
	paused := make(chan pause, 1)
	resume := make(chan struct{})
	resumeA := sync.OnceFunc(func() { close(resume) })
	t.Cleanup(resumeA)
	var late []lateWrite // set by A before aDone receives
	aDone := make(chan error, 1)
	go func() {
		aDone <- door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
			tok, ok := tx.FencingToken()
			if !ok {
				return errors.New("fencing test: FencingToken is false inside a fenced fn")
			}
			pid, err := tx.QueryInt(ctx, `SELECT pg_backend_pid()`)
			if err != nil {
				return err
			}
			if err := door.RunFenced(ctx, tok, func(w frontdoor.Tx) error {
				return w.Exec(ctx, `INSERT INTO `+tbl+` (id, balance) VALUES (1, 100), (2, 200), (3, 300), (9, 900)`)
			}); err != nil {
				return err
			}
			paused <- pause{tok, pid}
			select { // the pause: GC, SIGSTOP, a slow network...
			case <-resume:
			case <-ctx.Done():
				return ctx.Err()
			}
			late = lateWrites(ctx, door, admin, tbl, key, tok)
			return nil
		}, pgadvisory.WithFencing())
	}()

	var a pause
	select {
	case a = <-paused:
	case err := <-aDone:
		t.Fatalf("A ended before its pause: %v", err)
	}
	// A's first write went through and is stamped with A's token.
	before := fencing.Rows(t, admin, tbl)
	require.Len(t, before, 4)
	if fenced {
		for id, r := range before {
			require.Equal(t, a.token, r.Token, "row %d", id)
		}
	}
	require.Equal(t, a.token, fencing.Published(t, admin, key))

	// A loses its lock without knowing it.
	if loss == "terminate" {
		var ok bool
		require.NoError(t, admin.QueryRow(`SELECT pg_terminate_backend($1)`, a.pid).Scan(&ok))
		require.True(t, ok)
	}

	// B takes the lock (as soon as the server released A's), gets a newer
	// token, publishes it, and writes through its lock transaction and
	// through another connection.
	var tokB int64
	var bErr error
	require.Eventually(t, func() bool {
		err := door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
			tokB, _ = tx.FencingToken()
			if err := tx.Exec(ctx, `UPDATE `+tbl+` SET balance = balance + 1000 WHERE id IN (1, 2, 3)`); err != nil {
				return err
			}
			return door.RunFenced(ctx, tokB, func(w frontdoor.Tx) error {
				return w.Exec(ctx, `INSERT INTO `+tbl+` (id, balance) VALUES (10, 1000)`)
			})
		}, pgadvisory.WithFencing())
		if err == pgadvisory.ErrLocked {
			return false
		}
		bErr = err
		return true
	}, 60*time.Second, 20*time.Millisecond, "B never got the lock after A lost it")
	require.NoError(t, bErr)
	require.Greater(t, tokB, a.token)
	require.Equal(t, tokB, fencing.Published(t, admin, key))
	afterB := fencing.Rows(t, admin, tbl)

	// A resumes and writes with its old token.
	resumeA()
	aErr := frontdoor.Await(t, aDone, "A to return")
	require.True(t, errors.Is(aErr, pgadvisory.ErrConnLost) || errors.Is(aErr, pgadvisory.ErrCommitUnknown),
		"A's own lock transaction is gone: %v", aErr)
	require.Len(t, late, 8)

	final := fencing.Rows(t, admin, tbl)
	if !fenced {
		// CONTROL: every late write lands; B's update of row 1 is lost.
		for _, w := range late {
			require.NoError(t, w.err, w.name)
		}
		require.Equal(t, int64(1100), afterB[1].Balance)
		require.Equal(t, int64(-1), final[1].Balance, "lost update: A's late write overwrote B's")
		require.NotContains(t, final, int64(2), "A's late DELETE removed B's row")
		require.Equal(t, int64(-3), final[3].Balance)
		require.Contains(t, final, int64(4))
		return
	}
	for _, w := range late {
		switch w.name {
		case "republish":
			require.NoError(t, w.err)
			require.Zero(t, w.rows, "A's re-publish must not replace B's token")
		case "column_token":
			sqlstate.Require(t, w.err, "LF001")
		default:
			sqlstate.RequireKind(t, w.err, pgadvisory.ErrStaleToken, "LF001")
			var pe *pgadvisory.Error
			require.ErrorAs(t, w.err, &pe, w.name)
		}
	}
	require.Equal(t, tokB, fencing.Published(t, admin, key))
	require.Equal(t, afterB, final, "A's late writes changed nothing")
	require.Equal(t, map[int64]fencing.Row{
		1:  {Balance: 1100, Token: tokB},
		2:  {Balance: 1200, Token: tokB},
		3:  {Balance: 1300, Token: tokB},
		9:  {Balance: 900, Token: a.token}, // written by A while it held the lock; B did not touch it
		10: {Balance: 1000, Token: tokB},
	}, final)
}

func TestFencingStaleWriterUnderPause(t *testing.T) {
	admin := migrated.DB(t)
	for _, loss := range []string{"terminate", "idle_timeout"} {
		t.Run(loss, func(t *testing.T) {
			var params map[string]string
			if loss == "idle_timeout" {
				params = map[string]string{"idle_in_transaction_session_timeout": "200ms"}
			}
			for _, door := range fencing.Doors(t, params) {
				t.Run(door.Label(), func(t *testing.T) { staleWriterSequence(t, admin, door, loss, true) })
			}
		})
	}
}

// TestFencingStaleWriterControl runs the same sequence on a table without
// the trigger: A's late writes overwrite B's.
func TestFencingStaleWriterControl(t *testing.T) {
	admin := migrated.DB(t)
	for _, door := range fencing.Doors(t, nil) {
		t.Run(door.Label(), func(t *testing.T) { staleWriterSequence(t, admin, door, "terminate", false) })
	}
}

// ---- 2. Publish ordering -----------------------------------------------------

func TestFencingPublishOrdering(t *testing.T) {
	admin := migrated.DB(t)
	doors := fencing.Doors(t, nil)

	// (a) The next holder's publish waits for the write in flight with the
	// old token, and completes once it ends; no T1 write commits after it.
	for _, door := range doors {
		t.Run("waits_then_succeeds/"+door.Label(), func(t *testing.T) {
			ctx := testdb.Context(t)
			key := testdb.Key(t)
			tbl := fencing.Table(t, admin, testdb.Schema(t), "accounts", key, "strict")
			t1 := fencing.Holder(t, ctx, door, key, func(tx frontdoor.Tx) error {
				return tx.Exec(ctx, `INSERT INTO `+tbl+` (id, balance) VALUES (1, 0)`)
			})
			wPid, release, wDone := fencing.OpenWriter(t, ctx, door, tbl, t1, 2)

			var bRan atomic.Bool
			bDone := fencing.StartHolder(ctx, door, key, tbl, &bRan)
			require.Eventually(t, func() bool {
				return witness.Of(admin).BlockedBy(t, wPid, "%INSERT INTO pgadvisory.fence%") == 1
			}, 30*time.Second, 10*time.Millisecond, "B's publish must wait for the open T1 writer")
			time.Sleep(200 * time.Millisecond) // the old writer stays open a while
			require.False(t, bRan.Load(), "B's fn must not run before its token is published")
			require.Equal(t, t1, fencing.Published(t, admin, key))
			require.Equal(t, int64(1), witness.Of(admin).BlockedBy(t, wPid, "%INSERT INTO pgadvisory.fence%"))

			release()
			require.NoError(t, frontdoor.Await(t, wDone, "the T1 writer"), "T1 was current until the writer ended")
			b := frontdoor.Await(t, bDone, "B")
			require.NoError(t, b.Err)
			require.Greater(t, b.Token, t1)
			require.Equal(t, b.Token, fencing.Published(t, admin, key))
			// B's fn ran after the T1 write committed: it updated row 2 too.
			require.Equal(t, map[int64]fencing.Row{1: {Balance: 1, Token: b.Token}, 2: {Balance: 1, Token: b.Token}}, fencing.Rows(t, admin, tbl))

			// Any T1 write attempted after the publish is rejected.
			err := door.RunFenced(ctx, t1, func(tx frontdoor.Tx) error {
				return tx.Exec(ctx, `INSERT INTO `+tbl+` (id, balance) VALUES (3, 0)`)
			})
			sqlstate.RequireKind(t, err, pgadvisory.ErrStaleToken, "LF001")
			require.Len(t, fencing.Rows(t, admin, tbl), 2)
		})
	}

	// (b) A publish with a short wait fails with 55P03 while the old writer
	// is open (the statement the runtime runs, with lock_timeout 200ms).
	t.Run("short_wait_times_out", func(t *testing.T) {
		ctx := testdb.Context(t)
		door := doors[1]
		key := testdb.Key(t)
		tbl := fencing.Table(t, admin, testdb.Schema(t), "accounts", key, "strict")
		t1 := fencing.Holder(t, ctx, door, key, nil)
		_, release, wDone := fencing.OpenWriter(t, ctx, door, tbl, t1, 1)

		conn, err := admin.Conn(ctx)
		require.NoError(t, err)
		defer conn.Close()
		tx, err := conn.BeginTx(ctx, nil)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }() // before conn.Close, which waits for tx
		_, err = tx.ExecContext(ctx, `SET LOCAL lock_timeout = '200ms'`)
		require.NoError(t, err)
		_, err = tx.ExecContext(ctx, fencing.PublishSQL, key, t1+1000)
		sqlstate.Require(t, err, "55P03")

		release()
		require.NoError(t, frontdoor.Await(t, wDone, "the T1 writer"))
		require.Equal(t, t1, fencing.Published(t, admin, key))
	})

	// (b') Through the runtime the wait is defaultPublishTimeout (5 s): a
	// writer that stays open longer makes the next holder fail with
	// ErrLockTimeout at the publish step, without calling fn. Its token is
	// never published; T1 stays current, and a later holder succeeds.
	for _, door := range doors {
		t.Run("runtime_publish_timeout/"+door.Label(), func(t *testing.T) {
			t.Parallel() // the two doors wait their 5 s together
			ctx := testdb.Context(t)
			key := testdb.Key(t)
			tbl := fencing.Table(t, admin, testdb.Schema(t), "accounts", key, "strict")
			t1 := fencing.Holder(t, ctx, door, key, nil)
			_, release, wDone := fencing.OpenWriter(t, ctx, door, tbl, t1, 1)

			var bRan atomic.Bool
			b := frontdoor.Await(t, fencing.StartHolder(ctx, door, key, tbl, &bRan), "B's publish to time out")
			require.False(t, b.Ran)
			require.ErrorIs(t, b.Err, pgadvisory.ErrLockTimeout)
			require.Equal(t, "55P03", pgadvisory.SQLState(b.Err))
			var pe *pgadvisory.Error
			require.ErrorAs(t, b.Err, &pe)
			require.Equal(t, "publish", pe.Op)
			require.Equal(t, []int64{key}, pe.LockIDs)
			require.Equal(t, t1, fencing.Published(t, admin, key))

			release()
			require.NoError(t, frontdoor.Await(t, wDone, "the T1 writer"), "B never published: T1 is still current")
			var cRan atomic.Bool
			c := frontdoor.Await(t, fencing.StartHolder(ctx, door, key, tbl, &cRan), "C")
			require.NoError(t, c.Err)
			require.Greater(t, c.Token, t1+1, "B's unpublished token is skipped, never reused")
			require.Equal(t, map[int64]fencing.Row{1: {Balance: 1, Token: c.Token}}, fencing.Rows(t, admin, tbl))
		})
	}

	// CONTROL: without the trigger nothing orders the publish after the old
	// writer: B publishes and finishes while the T1 writer is open, and the
	// T1 write then commits after the newer publish.
	for _, door := range doors {
		t.Run("control_no_trigger/"+door.Label(), func(t *testing.T) {
			ctx := testdb.Context(t)
			key := testdb.Key(t)
			tbl := fencing.Table(t, admin, testdb.Schema(t), "accounts", key, "")
			t1 := fencing.Holder(t, ctx, door, key, nil)
			_, release, wDone := fencing.OpenWriter(t, ctx, door, tbl, t1, 1)

			var bRan atomic.Bool
			b := frontdoor.Await(t, fencing.StartHolder(ctx, door, key, tbl, &bRan), "B")
			require.NoError(t, b.Err)
			require.Equal(t, b.Token, fencing.Published(t, admin, key), "B published while the T1 writer was open")
			release()
			require.NoError(t, frontdoor.Await(t, wDone, "the T1 writer"), "the T1 write committed after the newer publish")
			require.Contains(t, fencing.Rows(t, admin, tbl), int64(1))
		})
	}
}

// ---- 3. Writers with the same token --------------------------------------------

func TestFencingSameTokenWritersDoNotBlock(t *testing.T) {
	admin := migrated.DB(t)
	for _, door := range fencing.Doors(t, nil) {
		t.Run(door.Label(), func(t *testing.T) {
			ctx := testdb.Context(t)
			key := testdb.Key(t)
			tbl := fencing.Table(t, admin, testdb.Schema(t), "accounts", key, "strict")
			tok := fencing.Holder(t, ctx, door, key, nil)

			// Both writers have written (fencing.OpenWriter returns after the
			// INSERT) while the other is open.
			pid1, release1, done1 := fencing.OpenWriter(t, ctx, door, tbl, tok, 1)
			pid2, release2, done2 := fencing.OpenWriter(t, ctx, door, tbl, tok, 2)
			require.Zero(t, witness.Of(admin).BlockedBy(t, pid1, "%"))
			require.Zero(t, witness.Of(admin).BlockedBy(t, pid2, "%"))
			release2()
			require.NoError(t, frontdoor.Await(t, done2, "writer 2"))
			release1()
			require.NoError(t, frontdoor.Await(t, done1, "writer 1"))
			require.Equal(t, map[int64]fencing.Row{1: {Balance: 0, Token: tok}, 2: {Balance: 0, Token: tok}}, fencing.Rows(t, admin, tbl))
		})
	}
}

// TestFencingSameTokenControl shows that the check above detects blocking:
// two same-token writers of the same row do block (the row lock), and the
// second one's write is not done while the first is open.
func TestFencingSameTokenControl(t *testing.T) {
	admin := migrated.DB(t)
	door := fencing.Doors(t, nil)[1]
	ctx := testdb.Context(t)
	key := testdb.Key(t)
	tbl := fencing.Table(t, admin, testdb.Schema(t), "accounts", key, "strict")
	tok := fencing.Holder(t, ctx, door, key, func(tx frontdoor.Tx) error {
		return tx.Exec(ctx, `INSERT INTO `+tbl+` (id, balance) VALUES (1, 0)`)
	})

	pids := make(chan int64, 1)
	rel := make(chan struct{})
	release := sync.OnceFunc(func() { close(rel) })
	t.Cleanup(release)
	done1 := make(chan error, 1)
	go func() {
		done1 <- door.RunFenced(ctx, tok, func(tx frontdoor.Tx) error {
			pid, err := tx.QueryInt(ctx, `SELECT pg_backend_pid()`)
			if err != nil {
				return err
			}
			if err := tx.Exec(ctx, `UPDATE `+tbl+` SET balance = balance + 1 WHERE id = 1`); err != nil {
				return err
			}
			pids <- pid
			<-rel
			return nil
		})
	}()
	pid1 := frontdoor.Await(t, pids, "writer 1")

	var updated atomic.Bool
	done2 := make(chan error, 1)
	go func() {
		done2 <- door.RunFenced(ctx, tok, func(tx frontdoor.Tx) error {
			err := tx.Exec(ctx, `UPDATE `+tbl+` SET balance = balance + 1 WHERE id = 1`)
			updated.Store(true)
			return err
		})
	}()
	require.Eventually(t, func() bool {
		return witness.Of(admin).BlockedBy(t, pid1, "%UPDATE%") == 1
	}, 30*time.Second, 10*time.Millisecond, "a writer of the same row must block")
	require.False(t, updated.Load(), "the blocked write is not done while the other writer is open")
	release()
	require.NoError(t, frontdoor.Await(t, done1, "writer 1"))
	require.NoError(t, frontdoor.Await(t, done2, "writer 2"))
	require.True(t, updated.Load())
	require.Equal(t, int64(2), fencing.Rows(t, admin, tbl)[1].Balance)
}

// ---- 4. Writes without a token -----------------------------------------------

func TestFencingMissingToken(t *testing.T) {
	admin := migrated.DB(t)
	for _, door := range fencing.Doors(t, nil) {
		t.Run(door.Label(), func(t *testing.T) {
			ctx := testdb.Context(t)
			key := testdb.Key(t)
			schema := testdb.Schema(t)
			strict := fencing.Table(t, admin, schema, "strict_t", key, "strict")
			permissive := fencing.Table(t, admin, schema, "permissive_t", key, "permissive")
			tok := fencing.Holder(t, ctx, door, key, func(tx frontdoor.Tx) error {
				return tx.Exec(ctx, `INSERT INTO `+strict+` (id, balance) VALUES (1, 10)`)
			})
			unfenced := func(tbl, query string) error {
				return door.RunExclusive(ctx, testdb.Key(t), func(tx frontdoor.Tx) error {
					if _, ok := tx.FencingToken(); ok {
						return errors.New("fencing test: token in an unfenced call")
					}
					return tx.Exec(ctx, fmt.Sprintf(query, tbl))
				})
			}

			// Strict: a write that carries no token is refused, through
			// the runtime (typed) and from plain code (SQLSTATE).
			for _, q := range []string{
				`INSERT INTO %s (id, balance) VALUES (2, 20)`,
				`DELETE FROM %s WHERE id = 1`,
			} {
				sqlstate.RequireKind(t, unfenced(strict, q), pgadvisory.ErrMissingToken, "LF002")
				_, err := admin.ExecContext(ctx, fmt.Sprintf(q, strict))
				sqlstate.Require(t, err, "LF002")
			}
			// A legacy UPDATE that does not set the column inherits the
			// row's token: accepted while that token is current...
			require.NoError(t, unfenced(strict, `UPDATE %s SET balance = balance + 1 WHERE id = 1`))
			// ...and refused once a newer holder published.
			tok2 := fencing.Holder(t, ctx, door, key, nil)
			require.Greater(t, tok2, tok)
			sqlstate.RequireKind(t, unfenced(strict, `UPDATE %s SET balance = balance + 1 WHERE id = 1`), pgadvisory.ErrStaleToken, "LF001")
			require.Equal(t, map[int64]fencing.Row{1: {Balance: 11, Token: tok}}, fencing.Rows(t, admin, strict))

			// Permissive: the same token-less writes are accepted and left
			// unstamped; a stale token is still refused.
			require.NoError(t, unfenced(permissive, `INSERT INTO %s (id, balance) VALUES (2, 20)`))
			_, err := admin.ExecContext(ctx, `INSERT INTO `+permissive+` (id, balance) VALUES (3, 30)`)
			require.NoError(t, err)
			_, err = admin.ExecContext(ctx, `DELETE FROM `+permissive+` WHERE id = 3`)
			require.NoError(t, err)
			require.Equal(t, map[int64]fencing.Row{2: {Balance: 20, Token: 0}}, fencing.Rows(t, admin, permissive))
			err = door.RunFenced(ctx, tok, func(tx frontdoor.Tx) error {
				return tx.Exec(ctx, `INSERT INTO `+permissive+` (id, balance) VALUES (4, 40)`)
			})
			sqlstate.RequireKind(t, err, pgadvisory.ErrStaleToken, "LF001")
			require.NoError(t, door.RunFenced(ctx, tok2, func(tx frontdoor.Tx) error {
				return tx.Exec(ctx, `INSERT INTO `+permissive+` (id, balance) VALUES (4, 40)`)
			}))
			require.Equal(t, map[int64]fencing.Row{2: {Balance: 20, Token: 0}, 4: {Balance: 40, Token: tok2}}, fencing.Rows(t, admin, permissive))
		})
	}
}

// TestFencingTruncateGuard: TRUNCATE fires no row trigger; the statement
// guard refuses it without the current token (strict), like a DELETE.
func TestFencingTruncateGuard(t *testing.T) {
	admin := migrated.DB(t)
	door := fencing.Doors(t, nil)[0]
	ctx := testdb.Context(t)
	key := testdb.Key(t)
	schema := testdb.Schema(t)
	guard := func(tbl, policy string) {
		_, err := admin.Exec(fmt.Sprintf(`CREATE TRIGGER fence_truncate BEFORE TRUNCATE ON %s
			FOR EACH STATEMENT EXECUTE FUNCTION pgadvisory.fence_truncate_guard('%d', '%s')`, tbl, key, policy))
		require.NoError(t, err)
	}
	strict := fencing.Table(t, admin, schema, "strict_t", key, "strict")
	guard(strict, "strict")
	permissive := fencing.Table(t, admin, schema, "permissive_t", key, "permissive")
	guard(permissive, "permissive")
	unguarded := fencing.Table(t, admin, schema, "unguarded_t", key, "strict")
	tok := fencing.Holder(t, ctx, door, key, func(tx frontdoor.Tx) error {
		for _, tbl := range []string{strict, permissive, unguarded} {
			if err := tx.Exec(ctx, `INSERT INTO `+tbl+` (id, balance) VALUES (1, 10)`); err != nil {
				return err
			}
		}
		return nil
	})

	_, err := admin.ExecContext(ctx, `TRUNCATE `+strict)
	sqlstate.Require(t, err, "LF002")
	// CONTROL: the row trigger alone does not see TRUNCATE.
	_, err = admin.ExecContext(ctx, `TRUNCATE `+unguarded)
	require.NoError(t, err)
	require.Empty(t, fencing.Rows(t, admin, unguarded))
	_, err = admin.ExecContext(ctx, `TRUNCATE `+permissive)
	require.NoError(t, err)

	tok2 := fencing.Holder(t, ctx, door, key, nil)
	err = door.RunFenced(ctx, tok, func(tx frontdoor.Tx) error {
		return tx.Exec(ctx, `TRUNCATE `+strict)
	})
	sqlstate.RequireKind(t, err, pgadvisory.ErrStaleToken, "LF001")
	require.Len(t, fencing.Rows(t, admin, strict), 1)
	require.NoError(t, door.RunFenced(ctx, tok2, func(tx frontdoor.Tx) error {
		return tx.Exec(ctx, `TRUNCATE `+strict)
	}))
	require.Empty(t, fencing.Rows(t, admin, strict))
}

// ---- 5. Tokens -------------------------------------------------------------------

func TestFencingTokens(t *testing.T) {
	admin := migrated.DB(t)
	doors := fencing.Doors(t, nil)

	t.Run("increase_across_holders", func(t *testing.T) {
		ctx := testdb.Context(t)
		key := testdb.Key(t)
		var prev int64
		for i := range 6 {
			door := doors[i%2]
			tok := fencing.Holder(t, ctx, door, key, nil)
			require.Greater(t, tok, prev, "holder %d (%s)", i, door.Label())
			require.Equal(t, tok, fencing.Published(t, admin, key))
			prev = tok
		}
	})

	for _, door := range doors {
		t.Run("inside_fn/"+door.Label(), func(t *testing.T) {
			ctx := testdb.Context(t)
			key := testdb.Key(t)
			tbl := fencing.Table(t, admin, testdb.Schema(t), "accounts", key, "strict")
			var inside frontdoor.Tx
			var tok, setting int64
			var ok bool
			require.NoError(t, door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
				inside = tx
				tok, ok = tx.FencingToken()
				var err error
				setting, err = tx.QueryInt(ctx, `SELECT current_setting('pgadvisory.fencing_token')::bigint`)
				if err != nil {
					return err
				}
				// The lock transaction's own writes carry the token.
				err = tx.Exec(ctx, `INSERT INTO `+tbl+` (id, balance) VALUES (1, 10)`)
				return err
			}, pgadvisory.WithFencing()))
			require.True(t, ok)
			require.Positive(t, tok)
			require.Equal(t, tok, setting)
			require.Equal(t, map[int64]fencing.Row{1: {Balance: 10, Token: tok}}, fencing.Rows(t, admin, tbl))
			_, ok = inside.FencingToken()
			require.False(t, ok, "no token once fn has returned")

			// An unfenced call has no token and sets none.
			require.NoError(t, door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
				_, ok = tx.FencingToken()
				setting, err := tx.QueryInt(ctx, `SELECT count(*) FROM (SELECT NULLIF(current_setting('pgadvisory.fencing_token', true), '') AS s) x WHERE s IS NOT NULL`)
				if err == nil && setting != 0 {
					err = errors.New("fencing test: unfenced transaction carries a token")
				}
				return err
			}))
			require.False(t, ok)
			tokNil, okNil := pgadvisory.FencingToken(nil)
			require.False(t, okNil)
			require.Zero(t, tokNil)
			_, okNil = pgadvisory.FencingTokenPgx(nil)
			require.False(t, okNil)
		})
	}

	for _, door := range doors {
		t.Run("contended_draws_nothing/"+door.Label(), func(t *testing.T) {
			ctx := testdb.Context(t)
			key := testdb.Key(t)
			entered := make(chan int64, 1)
			rel := make(chan struct{})
			release := sync.OnceFunc(func() { close(rel) })
			t.Cleanup(release)
			done := make(chan error, 1)
			go func() {
				done <- door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
					tok, _ := tx.FencingToken()
					entered <- tok
					<-rel
					return nil
				}, pgadvisory.WithFencing())
			}()
			held := frontdoor.Await(t, entered, "the holder")
			seq := fencing.LastToken(t, admin)
			called := false
			for range 3 {
				err := door.RunExclusive(ctx, key, func(frontdoor.Tx) error { called = true; return nil }, pgadvisory.WithFencing())
				require.Equal(t, pgadvisory.ErrLocked, err)
			}
			require.False(t, called)
			require.Equal(t, seq, fencing.LastToken(t, admin), "a contended call must not draw a token")
			require.Equal(t, held, fencing.Published(t, admin, key), "nor publish one")
			// CONTROL: the sequence check sees a call that draws.
			fencing.Holder(t, ctx, door, testdb.Key(t), nil)
			require.Greater(t, fencing.LastToken(t, admin), seq)
			release()
			require.NoError(t, frontdoor.Await(t, done, "the holder"))
		})
	}

	for _, door := range doors {
		t.Run("session_lock_refused/"+door.Label(), func(t *testing.T) {
			err := door.RunSession(testdb.Context(t), testdb.Key(t), func(context.Context) error { return nil }, pgadvisory.WithFencing())
			require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument)
		})
	}

	t.Run("invalid_run_fenced", func(t *testing.T) {
		ctx := testdb.Context(t)
		noop := func(*sql.Tx) error { return nil }
		require.ErrorIs(t, pgadvisory.RunFenced(ctx, nil, 1, noop), pgadvisory.ErrInvalidArgument)
		require.ErrorIs(t, pgadvisory.RunFenced(ctx, admin, 1, nil), pgadvisory.ErrInvalidArgument)
		require.ErrorIs(t, pgadvisory.RunFencedPgx(ctx, nil, 1, func(pgx.Tx) error { return nil }), pgadvisory.ErrInvalidArgument)
	})

	t.Run("not_migrated", func(t *testing.T) {
		ctx := testdb.Context(t)
		name, _ := testdb.EmptyDatabase(t)
		onEmpty := frontdoor.Configure(func(c *pgx.ConnConfig) { c.Database = name })
		// Opened after the database, so closed before it is dropped
		// (cleanups run last-in first-out).
		for _, door := range frontdoor.OpenAll(t, frontdoor.MaxConns(2), onEmpty) {
			called := false
			fn := func(frontdoor.Tx) error { called = true; return nil }
			err := door.RunExclusive(ctx, testdb.Key(t), fn, pgadvisory.WithFencing())
			require.ErrorIs(t, err, pgadvisory.ErrNotMigrated, door.Label())
			err = door.RunOnce(ctx, testdb.Key(t), "2026-12-02", fn)
			require.ErrorIs(t, err, pgadvisory.ErrNotMigrated, door.Label())
			require.False(t, called)
			// CONTROL: an unfenced call works there.
			require.NoError(t, door.RunExclusive(ctx, testdb.Key(t), fn))
			require.True(t, called)
		}
	})
}
