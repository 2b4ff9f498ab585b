package pgadvisory_test

// Fencing tests, against a
// real PostgreSQL, over both front doors, one story per fencing_*_test.go
// file. Every guarantee has a control that runs the same sequence with
// fencing off (a table without the trigger, or a write pattern that must
// block) and shows the failure the checker detects.
//
// This file: the stale writer. Holder A pauses while it holds the lock,
// loses it (its backend is terminated, or idle_in_transaction_session_timeout
// ends it), B takes the lock and writes, and A wakes up and writes with its
// old token, through every kind of write. The fenced table refuses all of
// them; the control table without the trigger loses B's update.
//
// The tests share the package database's pgadvisory schema with the
// migration tests, which drop it; each test therefore asks for migrated.DB
// first (Migrate is idempotent), and none of them is parallel at the top
// level.

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

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

// lateWrite is one of the late writes of a paused holder, and its outcome.
type lateWrite struct {
	name string
	rows int64
	err  error
}

// lateWrites are the writes a paused holder with token tok attempts after
// it lost its lock: every kind of write through RunFenced, and a write
// carrying the token in the column only (which is never a token).
func lateWrites(ctx context.Context, door frontdoor.Door, raw *sql.DB, tbl string, tok int64) []lateWrite {
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
		through("merge", `MERGE INTO `+tbl+` AS a USING (VALUES (10, -10)) AS s(id, b) ON a.id = s.id
			WHEN MATCHED THEN UPDATE SET balance = s.b`),
	}
	w := lateWrite{name: "column_token"}
	res, err := raw.ExecContext(ctx, `INSERT INTO `+tbl+` (id, balance, fencing_token) VALUES (7, 700, $1)`, tok)
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
			late = lateWrites(ctx, door, admin, tbl, tok)
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
		if errors.Is(err, pgadvisory.ErrLocked) {
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
		case "column_token":
			// The column is a stamp, never a token: the write carries none.
			sqlstate.Require(t, w.err, "LF002")
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
