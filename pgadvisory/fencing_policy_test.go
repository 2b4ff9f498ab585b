package pgadvisory_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/fencegen"
	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Writes that carry no token. The token is only what the writer set for its
// transaction, so a plain RunExclusive (without WithFencing) carries none:
// a strict table refuses all its writes, the UPDATE of a row the current
// holder stamped included, with ErrMissingToken and advice that fits (take
// the lock WithFencing(), fencing: true); a permissive table lets them
// through and stamps their rows NULL (a stale token is refused by both).
// TRUNCATE, which fires no row trigger, is refused by the statement guard.

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
				for _, tbl := range []string{strict, permissive} {
					if err := tx.Exec(ctx, `INSERT INTO `+tbl+` (id, balance) VALUES (1, 10)`); err != nil {
						return err
					}
				}
				return nil
			})
			unfenced := func(tbl, query string) error {
				return door.RunExclusive(ctx, testdb.Key(t), func(tx frontdoor.Tx) error {
					if _, ok := tx.FencingToken(); ok {
						return errors.New("fencing test: token in an unfenced call")
					}
					return tx.Exec(ctx, fmt.Sprintf(query, tbl))
				})
			}

			// Strict: a write that carries no token is refused, through the
			// runtime (typed) and from plain code (SQLSTATE), even the
			// UPDATE of a row the current holder stamped, and even with
			// the current token in the column.
			for _, q := range []string{
				`INSERT INTO %s (id, balance) VALUES (2, 20)`,
				`DELETE FROM %s WHERE id = 1`,
				`UPDATE %s SET balance = balance + 1 WHERE id = 1`,
				fmt.Sprintf(`UPDATE %%s SET balance = balance + 1, fencing_token = %d WHERE id = 1`, tok),
			} {
				err := unfenced(strict, q)
				sqlstate.RequireKind(t, err, pgadvisory.ErrMissingToken, "LF002", q)
				require.ErrorContains(t, err, "take the lock with pgadvisory.WithFencing() (fencing: true in locks.yaml)", q)
				_, err = admin.ExecContext(ctx, fmt.Sprintf(q, strict))
				sqlstate.Require(t, err, "LF002", q)
			}
			require.Equal(t, map[int64]fencing.Row{1: {Balance: 10, Token: tok}}, fencing.Rows(t, admin, strict))
			// A newer holder's token is the only one that writes now.
			tok2 := fencing.Holder(t, ctx, door, key, nil)
			require.Greater(t, tok2, tok)
			err := door.RunFenced(ctx, tok, func(tx frontdoor.Tx) error {
				return tx.Exec(ctx, `UPDATE `+strict+` SET balance = balance + 1 WHERE id = 1`)
			})
			sqlstate.RequireKind(t, err, pgadvisory.ErrStaleToken, "LF001")
			require.NoError(t, door.RunFenced(ctx, tok2, func(tx frontdoor.Tx) error {
				return tx.Exec(ctx, `UPDATE `+strict+` SET balance = balance + 1 WHERE id = 1`)
			}))
			require.Equal(t, map[int64]fencing.Row{1: {Balance: 11, Token: tok2}}, fencing.Rows(t, admin, strict))

			// Permissive: the same token-less writes are accepted, whatever
			// the row's stamp, and leave their rows stamped NULL; a stale
			// token is still refused.
			require.NoError(t, unfenced(permissive, `INSERT INTO %s (id, balance) VALUES (2, 20)`))
			require.NoError(t, unfenced(permissive, `UPDATE %s SET balance = balance + 1 WHERE id = 1`), "a row stamped by an older holder")
			_, err = admin.ExecContext(ctx, `INSERT INTO `+permissive+` (id, balance) VALUES (3, 30)`)
			require.NoError(t, err)
			_, err = admin.ExecContext(ctx, `DELETE FROM `+permissive+` WHERE id = 3`)
			require.NoError(t, err)
			require.Equal(t, map[int64]fencing.Row{1: {Balance: 11, Token: 0}, 2: {Balance: 20, Token: 0}}, fencing.Rows(t, admin, permissive))
			err = door.RunFenced(ctx, tok, func(tx frontdoor.Tx) error {
				return tx.Exec(ctx, `INSERT INTO `+permissive+` (id, balance) VALUES (4, 40)`)
			})
			sqlstate.RequireKind(t, err, pgadvisory.ErrStaleToken, "LF001")
			require.NoError(t, door.RunFenced(ctx, tok2, func(tx frontdoor.Tx) error {
				return tx.Exec(ctx, `INSERT INTO `+permissive+` (id, balance) VALUES (4, 40)`)
			}))
			require.Equal(t, map[int64]fencing.Row{1: {Balance: 11}, 2: {Balance: 20}, 4: {Balance: 40, Token: tok2}}, fencing.Rows(t, admin, permissive))
		})
	}
}

// TestFencingTruncateGuard: TRUNCATE fires no row or statement trigger of
// the writes; the TRUNCATE guard refuses it without the current token
// (strict), like a DELETE. The control is the same table without the guard.
func TestFencingTruncateGuard(t *testing.T) {
	admin := migrated.DB(t)
	door := fencing.Doors(t, nil)[0]
	ctx := testdb.Context(t)
	key := testdb.Key(t)
	schema := testdb.Schema(t)
	strict := fencing.Table(t, admin, schema, "strict_t", key, "strict")
	permissive := fencing.Table(t, admin, schema, "permissive_t", key, "permissive")
	unguarded := fencing.Table(t, admin, schema, "unguarded_t", key, "strict")
	_, err := admin.Exec(`DROP TRIGGER ` + fencegen.TruncateTrigger + ` ON ` + unguarded)
	require.NoError(t, err)
	tok := fencing.Holder(t, ctx, door, key, func(tx frontdoor.Tx) error {
		for _, tbl := range []string{strict, permissive, unguarded} {
			if err := tx.Exec(ctx, `INSERT INTO `+tbl+` (id, balance) VALUES (1, 10)`); err != nil {
				return err
			}
		}
		return nil
	})

	_, err = admin.ExecContext(ctx, `TRUNCATE `+strict)
	sqlstate.Require(t, err, "LF002")
	// CONTROL: the write triggers alone do not see TRUNCATE.
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
