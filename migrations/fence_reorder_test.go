package migrations_test

import (
	"database/sql"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/keyspace"
)

// The check sees the row as it will be written: a user's BEFORE trigger
// that sorts after lockgen's (PostgreSQL fires BEFORE ROW triggers in name
// order) can change a row after lockgen's row trigger ran, but not after
// the AFTER ... FOR EACH STATEMENT check, which reads the rows as written.
// The control is the first layout, whose BEFORE ROW check such a trigger
// gets past. The helpers are in fence_trigger_test.go and
// fence_parameterized_test.go.

func TestFenceReorderingTriggerMovesRow(t *testing.T) {
	db := migrated.DB(t)
	schema := testdb.Schema(t)
	ten1, ten2 := testdb.Key(t), testdb.Key(t)
	lock1 := keyspace.ParamID("billing.invoice", keyspace.Int64Param(ten1))
	lock2 := keyspace.ParamID("billing.invoice", keyspace.Int64Param(ten2))
	tok1 := fencing.Publish(t, db, lock1)
	tok2 := fencing.Publish(t, db, lock2)

	// Current layout: the user's trigger moves tenant 1's rows to tenant 2
	// after lockgen's row trigger; the statement check sees tenant 2.
	table := invoiceTable(t, db, schema, "strict")
	moveToTenant(t, db, table, ten1, ten2)
	insert := fmt.Sprintf(`INSERT INTO %s (id, tenant_id, amount) VALUES (1, %d, 1)`, table, ten1)
	e := sqlstate.Require(t, fencing.Write(db, tok1, insert), codeStale)
	require.Contains(t, e.Message, fmt.Sprintf("billing.invoice(%d) = %d: it is not the lock's current token", ten2, lock2))
	require.NotContains(t, e.Message, fmt.Sprintf("token %d", tok2), "the message names no current token")
	require.Equal(t, []int64{0}, queryInts(t, db, `SELECT count(*) FROM `+table))
	// Tenant 2's holder is the one that may write the row as written.
	require.NoError(t, fencing.Write(db, tok2, insert))
	require.Equal(t, []int64{ten2}, queryInts(t, db, `SELECT tenant_id FROM `+table))

	// CONTROL: the first layout checks the row before the user's trigger
	// moves it, so tenant 1's token writes a row of tenant 2.
	legacy := schema + ".legacy_invoice"
	_, err := db.Exec(`CREATE TABLE ` + legacy + ` (id int PRIMARY KEY, tenant_id bigint, amount int NOT NULL, fencing_token bigint);
		CREATE TRIGGER zz_pgadvisory_fence BEFORE INSERT OR UPDATE OR DELETE ON ` + legacy + `
			FOR EACH ROW EXECUTE FUNCTION pgadvisory.fence_check_param('billing.invoice', 'strict', 'tenant_id')`)
	require.NoError(t, err)
	fencing.ListAsFencedBefore(t, db, legacy, `'billing.invoice', 'strict', 'tenant_id'`)
	moveToTenant(t, db, legacy, ten1, ten2)
	require.NoError(t, fencing.Write(db, tok1, fmt.Sprintf(`INSERT INTO %s (id, tenant_id, amount) VALUES (1, %d, 1)`, legacy, ten1)))
	require.Equal(t, []int64{ten2}, queryInts(t, db, `SELECT tenant_id FROM `+legacy), "tenant 1's token wrote tenant 2's row")
}

// TestFenceReorderingTriggerChangesStamp: a trigger after lockgen's that
// rewrites fencing_token makes the write fail; the stamp is always the
// write's token.
func TestFenceReorderingTriggerChangesStamp(t *testing.T) {
	db := migrated.DB(t)
	lock := testdb.Key(t)
	schema := testdb.Schema(t)
	table := fencing.Table(t, db, schema, "account", lock, "strict")
	tok := fencing.Publish(t, db, lock)
	_, err := db.Exec(`CREATE FUNCTION ` + schema + `.restamp() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN NEW.fencing_token := -1; RETURN NEW; END $$;
		CREATE TRIGGER zzz_user_restamp BEFORE INSERT OR UPDATE ON ` + table + `
			FOR EACH ROW EXECUTE FUNCTION ` + schema + `.restamp()`)
	require.NoError(t, err)
	e := sqlstate.Require(t, fencing.Write(db, tok, `INSERT INTO `+table+` (id, balance) VALUES (1, 1)`), codeStale)
	require.Contains(t, e.Message, "a trigger that runs after zz_pgadvisory_fence changed fencing_token")
	// Control: without that trigger the same write passes.
	_, err = db.Exec(`DROP TRIGGER zzz_user_restamp ON ` + table)
	require.NoError(t, err)
	require.NoError(t, fencing.Write(db, tok, `INSERT INTO `+table+` (id, balance) VALUES (1, 1)`))
}

// TestFenceReorderingTriggerChangesStampOfLaterRow: in a statement that
// writes several rows, a trigger after lockgen's that rewrites the stamp of
// one row only, not the first written, makes the whole statement fail too:
// the check looks at every row as written, not at one. The control: the
// same statements with the trigger aimed at a row they do not write pass.
func TestFenceReorderingTriggerChangesStampOfLaterRow(t *testing.T) {
	db := migrated.DB(t)
	lock := testdb.Key(t)
	schema := testdb.Schema(t)
	table := fencing.Table(t, db, schema, "account", lock, "strict")
	tok := fencing.Publish(t, db, lock)
	restamp := func(id int) {
		t.Helper()
		_, err := db.Exec(fmt.Sprintf(`CREATE OR REPLACE FUNCTION %[1]s.restamp_one() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN IF NEW.id = %[2]d THEN NEW.fencing_token := -1; END IF; RETURN NEW; END $$;
			DROP TRIGGER IF EXISTS zzz_user_restamp ON %[3]s;
			CREATE TRIGGER zzz_user_restamp BEFORE INSERT OR UPDATE ON %[3]s
				FOR EACH ROW EXECUTE FUNCTION %[1]s.restamp_one()`, schema, id, table))
		require.NoError(t, err)
	}
	insert := `INSERT INTO ` + table + ` (id, balance) VALUES (1, 1), (2, 1), (3, 1)`
	update := `UPDATE ` + table + ` SET balance = balance + 1`

	for _, id := range []int{3, 2} {
		restamp(id)
		e := sqlstate.Require(t, fencing.Write(db, tok, insert), codeStale)
		require.Contains(t, e.Message, "wrote a row whose fencing_token is not the write's token")
		require.Equal(t, []int64{0}, queryInts(t, db, `SELECT count(*) FROM `+table), "no row of the statement was written")
	}

	restamp(4) // control: no row of these statements
	require.NoError(t, fencing.Write(db, tok, insert))
	require.NoError(t, fencing.Write(db, tok, update))

	restamp(3)
	e := sqlstate.Require(t, fencing.Write(db, tok, update), codeStale)
	require.Contains(t, e.Message, "wrote a row whose fencing_token is not the write's token")
	require.Equal(t, []int64{2, 2, 2}, queryInts(t, db, `SELECT balance FROM `+table+` ORDER BY id`), "the UPDATE changed no row")
}

// moveToTenant adds a user trigger to table, named to fire after lockgen's
// row trigger, that moves rows of tenant from to tenant to.
func moveToTenant(t *testing.T, db *sql.DB, table string, from, to int64) {
	t.Helper()
	fn := table + "_move"
	_, err := db.Exec(fmt.Sprintf(`CREATE FUNCTION %[1]s() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.tenant_id = %[2]d THEN NEW.tenant_id := %[3]d; END IF; RETURN NEW; END $$;
		CREATE TRIGGER zzz_user_moves BEFORE INSERT OR UPDATE ON %[4]s FOR EACH ROW EXECUTE FUNCTION %[1]s()`, fn, from, to, table))
	require.NoError(t, err)
}
