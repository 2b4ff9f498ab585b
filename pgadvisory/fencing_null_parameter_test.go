package pgadvisory_test

import (
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/keyspace"
	"github.com/lockgen/lockgen/pgadvisory"
)

// A row whose parameter column is NULL belongs to no lock: deleting it
// with a holder's token fails with ErrNullParameter (SQLSTATE LF005), and
// the row stays. The table's owner dropped the NOT NULL that lockgen fence
// adds; a row without a token got in under the permissive policy.
func TestFencingNullParameterIsRefused(t *testing.T) {
	admin := migrated.DB(t)
	ctx := testdb.Context(t)
	table := testdb.Schema(t) + ".invoice"
	_, err := admin.Exec(`CREATE TABLE ` + table + ` (id int PRIMARY KEY, tenant_id bigint, amount int NOT NULL)`)
	require.NoError(t, err)
	lock := fencing.Declared(t, "  - name: billing.invoice\n    fencing: true\n    params:\n      - {name: tenant_id, type: int64}\n", "billing.invoice")
	fencing.Fence(t, admin, table, lock, []string{"tenant_id"}, "permissive")
	_, err = admin.Exec(`ALTER TABLE ` + table + ` ALTER COLUMN tenant_id DROP NOT NULL;
		INSERT INTO ` + table + ` (id, tenant_id, amount) VALUES (1, NULL, 1)`)
	require.NoError(t, err)

	tenant := testdb.Key(t)
	tok := fencing.Publish(t, admin, keyspace.ParamID("billing.invoice", keyspace.Int64Param(tenant)))
	err = pgadvisory.RunFenced(ctx, admin, tok, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM `+table+` WHERE tenant_id IS NULL`)
		return err
	})
	require.ErrorIs(t, err, pgadvisory.ErrNullParameter)
	var pe *pgadvisory.Error
	require.True(t, errors.As(err, &pe))
	require.Equal(t, "LF005", pe.SQLState)
	require.EqualValues(t, 1, countRows(t, admin, `SELECT count(*) FROM `+table), "the row stays")

	// Control: a row of the tenant whose token the write carries goes.
	_, err = admin.Exec(fmt.Sprintf(`UPDATE %s SET tenant_id = %d`, table, tenant))
	require.NoError(t, err)
	require.NoError(t, pgadvisory.RunFenced(ctx, admin, tok, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM `+table+` WHERE id = 1`)
		return err
	}))
	require.Zero(t, countRows(t, admin, `SELECT count(*) FROM `+table))
}
