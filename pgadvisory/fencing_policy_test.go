package pgadvisory_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Writes that carry no token: a strict table refuses them, a permissive one
// lets them through unstamped (a stale token is refused by both), and
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
