package pgadvisory_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestFailCommitRejected: the server rejects COMMIT with an ERROR (a
// deferred unique constraint checked at COMMIT). That is a definite answer:
// the transaction was rolled back, so the call reports the error with Op
// "commit" and its SQLSTATE, and not ErrCommitUnknown. The control: the
// same write without the conflicting row commits.
func TestFailCommitRejected(t *testing.T) {
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx := testdb.Context(t)
		w := witness.New(t)
		tbl := pgx.Identifier{testdb.Schema(t), "deferred_" + string(drv[:3])}.Sanitize()
		_, err := w.DB.ExecContext(ctx, `CREATE TABLE `+tbl+` (id int, CONSTRAINT one_id UNIQUE (id) DEFERRABLE INITIALLY DEFERRED)`)
		require.NoError(t, err)
		door := frontdoor.Open(t, drv, frontdoor.MaxConns(failurePoolSize))
		key := testdb.Key(t)
		err = door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
			if err := w.Mark(ctx, tx, "rejected"); err != nil {
				return err
			}
			return tx.Exec(ctx, `INSERT INTO `+tbl+` VALUES (1), (1)`) // checked at COMMIT
		})
		var pe *pgadvisory.Error
		require.True(t, errors.As(err, &pe), "%v", err)
		require.Equal(t, pgadvisory.OpCommit, pe.Op)
		require.Equal(t, "23505", pe.SQLState)
		require.Nil(t, pe.Kind, "rolled back: a definite answer")
		require.NotErrorIs(t, err, pgadvisory.ErrCommitUnknown)
		w.RequireClosing(t, door, witness.Closing{Mark: "rejected"}, key)

		// CONTROL: without the duplicate, the same call commits.
		require.NoError(t, door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
			if err := w.Mark(ctx, tx, "accepted"); err != nil {
				return err
			}
			return tx.Exec(ctx, `INSERT INTO `+tbl+` VALUES (2)`)
		}))
		require.True(t, w.Committed(t, "accepted"))
	})
}

// TestCommitNeverSent: fn's last statement ends its own backend (the
// connection fails before COMMIT is written) and fn returns nil anyway.
// COMMIT is then never sent, so nothing was committed, and the call says
// so: ErrConnLost with Op "commit", never ErrCommitUnknown ("it may have
// committed"); the row fn wrote is not there and the lock is free. The
// control: the same call without the failing statement commits its row.
//
// pgx only: the pgx front door sees that the connection is closed before
// it would send COMMIT. database/sql gives the transaction no view of its
// connection, and its COMMIT fails with pgx's "conn closed", which pgx
// also returns for a connection that broke while it read COMMIT's answer:
// there the outcome stays unknown (see commitSent).
func TestCommitNeverSent(t *testing.T) {
	ctx := testdb.Context(t)
	w := witness.New(t)
	door := frontdoor.Open(t, frontdoor.Pgx, frontdoor.MaxConns(failurePoolSize))
	key := testdb.Key(t)
	err := door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
		if err := w.Mark(ctx, tx, "never sent"); err != nil {
			return err
		}
		// FATAL 57P01: the server ends this session; fn ignores it.
		require.Error(t, tx.Exec(ctx, `SELECT pg_terminate_backend(pg_backend_pid())`))
		return nil
	})
	var pe *pgadvisory.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, pgadvisory.OpCommit, pe.Op, "%v", err)
	require.ErrorIs(t, err, pgadvisory.ErrConnLost)
	require.NotErrorIs(t, err, pgadvisory.ErrCommitUnknown)
	// The ended backend's lock is released when the server notices.
	w.RequireClosing(t, door, witness.Closing{Mark: "never sent", Late: true}, key)

	// CONTROL: without the failing statement, the same call commits.
	require.NoError(t, door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
		return w.Mark(ctx, tx, "sent")
	}))
	require.True(t, w.Committed(t, "sent"))
}
