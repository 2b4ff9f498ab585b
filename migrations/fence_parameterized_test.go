package migrations_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/decl"
	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/keyspace"
)

// Tables fenced by a parameterized lock: each parameter value is its own
// lock with its own token, derived from the row's columns in their canonical
// text exactly as keyspace.ParamID does, checked once per statement and
// distinct lock, and TRUNCATE is refused (LF003). The helpers are in
// fence_trigger_test.go.

func TestFenceParameterizedLocksAreIndependent(t *testing.T) {
	db := migrated.DB(t)
	table := invoiceTable(t, db, testdb.Schema(t), "strict")
	// Tenants unique to this run, as lock keys must be.
	ten1, ten2 := testdb.Key(t), testdb.Key(t)
	lock1 := keyspace.ParamID("billing.invoice", keyspace.Int64Param(ten1))
	lock2 := keyspace.ParamID("billing.invoice", keyspace.Int64Param(ten2))
	var sqlID int64
	require.NoError(t, db.QueryRow(`SELECT pgadvisory.lock_id('billing.invoice', $1::bigint::text)`, ten1).Scan(&sqlID))
	require.Equal(t, lock1, sqlID)

	a1, b1 := fencing.Publish(t, db, lock1), fencing.Publish(t, db, lock2)
	ins := func(id int, tenant int64) string {
		return fmt.Sprintf(`INSERT INTO %s (id, tenant_id, amount) VALUES (%d, %d, 1)`, table, id, tenant)
	}
	require.NoError(t, fencing.Write(db, a1, ins(1, ten1), ins(2, ten1)))
	require.NoError(t, fencing.Write(db, b1, ins(3, ten2)))
	// Each token writes only its own tenant's rows.
	e := sqlstate.Require(t, fencing.Write(db, a1, ins(4, ten2)), codeStale)
	require.Contains(t, e.Message, fmt.Sprintf("billing.invoice(%d) = %d", ten2, lock2))
	sqlstate.Require(t, fencing.Write(db, b1, `UPDATE `+table+` SET amount = 2 WHERE id = 1`), codeStale)
	// One statement over both tenants needs both tokens: one token is not enough.
	sqlstate.Require(t, fencing.Write(db, a1, fmt.Sprintf(`INSERT INTO %s (id, tenant_id, amount) VALUES (4, %d, 1), (5, %d, 1)`, table, ten1, ten2)), codeStale)

	// A new holder of tenant 1 publishes: tenant 1's old token is stale,
	// tenant 2's is not affected.
	a2 := fencing.Publish(t, db, lock1)
	sqlstate.Require(t, fencing.Write(db, a1, `UPDATE `+table+` SET amount = 0 WHERE id = 1`), codeStale)
	sqlstate.Require(t, fencing.Write(db, a1, `DELETE FROM `+table+` WHERE id = 2`), codeStale)
	sqlstate.Require(t, fencing.Write(db, a1, ins(5, ten1)), codeStale)
	require.NoError(t, fencing.Write(db, b1, `UPDATE `+table+` SET amount = 30 WHERE id = 3`, ins(6, ten2)))
	require.NoError(t, fencing.Write(db, a2, `UPDATE `+table+` SET amount = 10 WHERE id = 1`, `DELETE FROM `+table+` WHERE id = 2`))
	require.Equal(t, []int64{a2, b1, b1}, queryInts(t, db, `SELECT fencing_token FROM `+table+` ORDER BY id`))

	// Moving a row to another tenant needs the token of both locks.
	e = sqlstate.Require(t, fencing.Write(db, a2, fmt.Sprintf(`UPDATE %s SET tenant_id = %d WHERE id = 1`, table, ten2)), codeStale)
	require.Contains(t, e.Message, fmt.Sprintf("= %d", lock2))
	// Tenant 2's new holder (a token newer than the row's) passes the row
	// and its own lock, but not tenant 1's, which the row leaves.
	b2 := fencing.Publish(t, db, lock2)
	e = sqlstate.Require(t, fencing.Write(db, b2, fmt.Sprintf(`UPDATE %s SET tenant_id = %d WHERE id = 1`, table, ten2)), codeStale)
	require.Contains(t, e.Message, fmt.Sprintf("billing.invoice(%d) = %d: it is not the lock's current token", ten1, lock1))
	require.NotContains(t, e.Message, fmt.Sprintf("token %d", a2), "the message names no current token")
	// Control: staying within tenant 2 passes with the same token.
	require.NoError(t, fencing.Write(db, b2, fmt.Sprintf(`UPDATE %s SET tenant_id = %d WHERE id = 3`, table, ten2)))

	// Missing token, a NULL parameter, and TRUNCATE.
	sqlstate.Require(t, fencing.Write(db, 0, ins(7, ten1)), codeMissing)
	e = sqlstate.Require(t, fencing.Write(db, a2, `INSERT INTO `+table+` (id, tenant_id, amount) VALUES (8, NULL, 1)`), "23502")
	require.Contains(t, e.Message, `null value in column "tenant_id"`, "lockgen fence made the parameter column NOT NULL")
	e = sqlstate.Require(t, fencing.Write(db, a2, `TRUNCATE `+table), codeTruncate)
	require.Contains(t, e.Message, "DELETE rows instead")
	sqlstate.Require(t, fencing.Write(db, 0, `TRUNCATE `+table), codeTruncate)
}

// TestFenceParameterizedBulkWrites: a statement over many rows checks each
// distinct lock once; rows of a lock whose token is stale fail the whole
// statement, wherever they are among the rows.
func TestFenceParameterizedBulkWrites(t *testing.T) {
	db := migrated.DB(t)
	table := invoiceTable(t, db, testdb.Schema(t), "strict")
	ten1, ten2 := testdb.Key(t), testdb.Key(t)
	lock1 := keyspace.ParamID("billing.invoice", keyspace.Int64Param(ten1))
	lock2 := keyspace.ParamID("billing.invoice", keyspace.Int64Param(ten2))
	tok := fencing.Publish(t, db, lock1)
	bulk := fmt.Sprintf(`INSERT INTO %s (id, tenant_id, amount) SELECT g, %d, g FROM generate_series(1, 5000) AS g`, table, ten1)
	require.NoError(t, fencing.Write(db, tok, bulk))
	require.Equal(t, []int64{5000}, queryInts(t, db, `SELECT count(*) FROM `+table+` WHERE fencing_token = $1`, tok))

	// One row of another tenant, last of 5,000: the statement fails.
	mixed := fmt.Sprintf(`UPDATE %s SET amount = amount + 1, tenant_id = CASE WHEN id = 5000 THEN %d ELSE tenant_id END`, table, ten2)
	e := sqlstate.Require(t, fencing.Write(db, tok, mixed), codeStale)
	require.Contains(t, e.Message, fmt.Sprintf("= %d", lock2))
	require.Equal(t, []int64{0}, queryInts(t, db, `SELECT count(*) FROM `+table+` WHERE tenant_id = $1`, ten2))
}

func TestFenceParameterizedPermissiveTruncate(t *testing.T) {
	db := migrated.DB(t)
	table := invoiceTable(t, db, testdb.Schema(t), "permissive")
	require.NoError(t, fencing.Write(db, 0, `INSERT INTO `+table+` (id, tenant_id, amount) VALUES (1, 1, 1)`))
	sqlstate.Require(t, fencing.Write(db, 1, `TRUNCATE `+table), codeTruncate)
	require.NoError(t, fencing.Write(db, 0, `TRUNCATE `+table))
}

// TestFenceParameterCanonicalText: the triggers derive the same lock ID as
// Go's keyspace.ParamID from int64, uuid, bool and string columns, whatever
// spelling the values were written in.
func TestFenceParameterCanonicalText(t *testing.T) {
	db := migrated.DB(t)
	schema := testdb.Schema(t)
	table := schema + ".export"
	_, err := db.Exec(`CREATE TABLE ` + table + ` (n bigint, u uuid, b boolean, s text, i integer, v varchar(20))`)
	require.NoError(t, err)
	lockDecl := fencing.Declared(t, `  - name: exports.archive
    params:
      - {name: n, type: int64}
      - {name: u, type: uuid}
      - {name: b, type: bool}
      - {name: s, type: string}
      - {name: i, type: int64}
      - {name: v, type: string}
`, "exports.archive")
	fencing.Fence(t, db, table, lockDecl, []string{"n", "u", "b", "s", "i", "v"}, "strict")

	n := testdb.Key(t) * -1
	u := [16]byte{0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8, 0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38, 0x0a, 0x11}
	s := `it's "quoted" \ ünïcode 😀`
	lock := keyspace.ParamID("exports.archive", keyspace.Int64Param(n), keyspace.UUIDParam(u),
		keyspace.BoolParam(false), keyspace.StringParam(s), keyspace.Int64Param(-7), keyspace.StringParam("x y"))
	tok := fencing.Publish(t, db, lock)

	insert := func(tok int64, b string) error {
		ctx := context.Background()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.Exec(`SELECT set_config('pgadvisory.fencing_token', $1::bigint::text, true)`, tok); err != nil {
			return err
		}
		if _, err := tx.Exec(`INSERT INTO `+table+` VALUES ($1, '{A0EEBC999C0B4EF8BB6D6BB9BD380A11}', $2::boolean, $3, -7, 'x y')`, n, b, s); err != nil {
			return err
		}
		return tx.Commit()
	}
	require.NoError(t, insert(tok, "off"))
	require.NoError(t, insert(tok, "FALSE"))
	// Control: another parameter value is another lock, never published.
	sqlstate.Require(t, insert(tok, "true"), codeStale)
}

// invoiceTable creates schema.invoice fenced, as lockgen fence fences it,
// by the parameterized lock billing.invoice(tenant_id int64).
func invoiceTable(t *testing.T, db *sql.DB, schema, policy string) string {
	t.Helper()
	table := schema + ".invoice"
	_, err := db.Exec(`CREATE TABLE ` + table + ` (id int PRIMARY KEY, tenant_id bigint, amount int NOT NULL)`)
	require.NoError(t, err)
	fencing.Fence(t, db, table, invoiceLock(t), []string{"tenant_id"}, policy)
	return table
}

// invoiceLock declares billing.invoice(tenant_id int64).
func invoiceLock(t *testing.T) *decl.Lock {
	t.Helper()
	return fencing.Declared(t, "  - name: billing.invoice\n    fencing: true\n    params:\n      - {name: tenant_id, type: int64}\n", "billing.invoice")
}

// TestFenceParameterizedUnpublishedLock: a write to the rows of a
// parameterized lock that never published a token is refused (LF001), with
// any token; the control: once the lock publishes, its token writes.
func TestFenceParameterizedUnpublishedLock(t *testing.T) {
	db := migrated.DB(t)
	table := invoiceTable(t, db, testdb.Schema(t), "strict")
	tenant := testdb.Key(t)
	insert := fmt.Sprintf(`INSERT INTO %s (id, tenant_id, amount) VALUES (1, %d, 1)`, table, tenant)
	e := sqlstate.Require(t, fencing.Write(db, fencing.NextToken(t, db), insert), codeStale)
	require.Contains(t, e.Message, "never published")

	tok := fencing.Publish(t, db, keyspace.ParamID("billing.invoice", keyspace.Int64Param(tenant)))
	require.NoError(t, fencing.Write(db, tok, insert))
}

// TestFenceParameterizedPublishWaitsForWriter: an open write with the
// current token of a parameterized lock keeps that lock's fence row FOR
// SHARE: the next holder's publish (publish timeout 200ms) fails with 55P03
// while the write is open, and succeeds once it committed (the control).
func TestFenceParameterizedPublishWaitsForWriter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := migrated.DB(t)
	table := invoiceTable(t, db, testdb.Schema(t), "strict")
	tenant := testdb.Key(t)
	lock := keyspace.ParamID("billing.invoice", keyspace.Int64Param(tenant))
	tok := fencing.Publish(t, db, lock)
	writer := openWriter(t, db, tok, fmt.Sprintf(`INSERT INTO %s (id, tenant_id, amount) VALUES (1, %d, 1)`, table, tenant))

	publish := func() error {
		c := conn(t, db)
		tx, err := c.BeginTx(ctx, nil)
		require.NoError(t, err)
		var granted bool
		err = tx.QueryRowContext(ctx, `SELECT granted FROM pgadvisory.fence_acquire(ARRAY[$1]::bigint[], false, NULL, '200ms')`, lock).Scan(&granted)
		_ = tx.Rollback()
		_, unlockErr := c.ExecContext(ctx, `SELECT pg_advisory_unlock_all()`)
		require.NoError(t, unlockErr)
		return err
	}
	e := sqlstate.Require(t, publish(), codeLockTimeout)
	require.Contains(t, e.Message, "waited 200ms for writes still in flight with the previous token")

	require.NoError(t, writer.tx.Commit())
	require.NoError(t, publish())
}
