package pgadvisory_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Lock holders and writers need no privilege on lockgen's tables: an
// application role that is no superuser, owns nothing of lockgen's and has
// only its own table's privileges takes fenced locks (fence_acquire runs as
// its owner), writes the fenced table with its token (the per-lock check
// runs as its owner) and cannot forge or rewind a published token: it can
// neither write pgadvisory.fence nor lock its rows nor set the sequence.
// The control is lockgen's schema before 00005: the same role's fenced
// write fails for want of a privilege on pgadvisory.fence, and with the
// privilege 00002 asked writers to have, the role rewinds the token.

func TestFencingApplicationRole(t *testing.T) {
	admin := migrated.DB(t)
	role := fencing.AppRole(t, admin)
	schema := testdb.Schema(t)
	_, err := admin.Exec(`GRANT USAGE ON SCHEMA ` + schema + ` TO ` + role)
	require.NoError(t, err)
	var owned int
	require.NoError(t, admin.QueryRow(`SELECT (SELECT count(*) FROM pg_class WHERE relnamespace = 'pgadvisory'::regnamespace AND relowner = $1::regrole)
		+ (SELECT count(*) FROM pg_proc WHERE pronamespace = 'pgadvisory'::regnamespace AND proowner = $1::regrole)`, role).Scan(&owned))
	require.Zero(t, owned, "the role owns nothing of lockgen's")
	as := fencing.OpenAs(t, admin, role)

	for _, drv := range frontdoor.Drivers {
		t.Run(string(drv), func(t *testing.T) {
			ctx := testdb.Context(t)
			key := testdb.Key(t)
			tbl := fencing.Table(t, admin, schema, "accounts_"+strings.ReplaceAll(string(drv), "/", "_"), key, "strict")
			_, err := admin.Exec(`GRANT SELECT, INSERT, UPDATE, DELETE ON ` + tbl + ` TO ` + role)
			require.NoError(t, err)
			door := frontdoor.Open(t, drv, frontdoor.MaxConns(2), frontdoor.Configure(func(c *pgx.ConnConfig) { c.User = role }))

			// A fenced call as the role: published, and its writes carry
			// the token, through the lock transaction and on another
			// connection.
			tok := fencing.Holder(t, ctx, door, key, func(tx frontdoor.Tx) error {
				return tx.Exec(ctx, `INSERT INTO `+tbl+` (id, balance) VALUES (1, 10)`)
			})
			require.Equal(t, tok, fencing.Published(t, admin, key))
			require.NoError(t, door.RunFenced(ctx, tok, func(tx frontdoor.Tx) error {
				return tx.Exec(ctx, `UPDATE `+tbl+` SET balance = 11 WHERE id = 1`)
			}))
			require.Equal(t, map[int64]fencing.Row{1: {Balance: 11, Token: tok}}, fencing.Rows(t, admin, tbl))

			// It cannot forge or rewind the published token.
			for _, stmt := range []string{
				fmt.Sprintf(`UPDATE pgadvisory.fence SET token = %d WHERE lock_id = %d`, tok+1000, key),
				fmt.Sprintf(`DELETE FROM pgadvisory.fence WHERE lock_id = %d`, key),
				fmt.Sprintf(`INSERT INTO pgadvisory.fence (lock_id, token) VALUES (%d, 1)`, key+1_000_000),
				fmt.Sprintf(`SELECT token FROM pgadvisory.fence WHERE lock_id = %d FOR SHARE`, key),
				`SELECT setval('pgadvisory.fencing_token_seq', 1)`,
				`SELECT nextval('pgadvisory.fencing_token_seq')`,
			} {
				_, err := as.ExecContext(ctx, stmt)
				sqlstate.Require(t, err, "42501", stmt)
			}
			require.Equal(t, tok, fencing.Published(t, admin, key))

			// Once a newer holder published, the role's old token is stale.
			newer := fencing.Holder(t, ctx, door, key, nil)
			require.Greater(t, newer, tok)
			err = door.RunFenced(ctx, tok, func(tx frontdoor.Tx) error {
				return tx.Exec(ctx, `UPDATE `+tbl+` SET balance = 0 WHERE id = 1`)
			})
			sqlstate.RequireKind(t, err, pgadvisory.ErrStaleToken, "LF001")
		})
	}
}

func TestFencingApplicationRoleControl(t *testing.T) {
	admin := migrated.DB(t)
	old := migrated.UpTo(t, 4)
	role := fencing.AppRole(t, admin, old)
	_, err := old.Exec(`CREATE SCHEMA app; GRANT USAGE ON SCHEMA app TO ` + role)
	require.NoError(t, err)
	key := testdb.Key(t)
	tbl := fencing.LegacyTable(t, old, "app", "accounts", key, "strict")
	_, err = old.Exec(`GRANT SELECT, INSERT, UPDATE, DELETE ON ` + tbl + ` TO ` + role)
	require.NoError(t, err)
	t1 := fencing.NextToken(t, old)
	fencing.ForcePublished(t, old, key, t1)
	as := fencing.OpenAs(t, old, role)

	// Before 00005 the check reads the fence row FOR SHARE as the writer.
	err = fencing.Write(as, t1, `INSERT INTO `+tbl+` (id, balance) VALUES (1, 10)`)
	e := sqlstate.Require(t, err, "42501")
	require.Contains(t, e.Message, "permission denied for table fence")

	// With the privilege 00002 asked writers to have, the write works, and
	// so does rewinding the token: a stale writer makes itself current.
	_, err = old.Exec(`GRANT SELECT, UPDATE ON pgadvisory.fence TO ` + role)
	require.NoError(t, err)
	require.NoError(t, fencing.Write(as, t1, `INSERT INTO `+tbl+` (id, balance) VALUES (1, 10)`))
	t2 := fencing.NextToken(t, old)
	fencing.ForcePublished(t, old, key, t2) // a newer holder
	sqlstate.Require(t, fencing.Write(as, t1, `UPDATE `+tbl+` SET balance = 0 WHERE id = 1`), "LF001")
	_, err = as.Exec(fmt.Sprintf(`UPDATE pgadvisory.fence SET token = %d WHERE lock_id = %d`, t1, key))
	require.NoError(t, err, "the writer rewinds the published token")
	require.NoError(t, fencing.Write(as, t1, `UPDATE `+tbl+` SET balance = 0 WHERE id = 1`), "and its stale write is accepted")
}
