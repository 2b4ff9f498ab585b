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
		require.False(t, w.Committed(t, "rejected"))
		require.True(t, w.LockFree(t, key))
		frontdoor.RequireIdle(t, door)

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
