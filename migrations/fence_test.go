package migrations_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/keyspace"
)

// The fencing tests drive the SQL contract of 00002_fencing.sql with raw
// SQL, as the runtime and the generated migrations use it: tokens from the
// sequence, a publish by INSERT .. ON CONFLICT on pgadvisory.fence, writes
// carrying the token in the transaction-local setting or in the column.

func TestMain(m *testing.M) { testdb.Main(m) }

// Stable SQLSTATEs of the contract.
const (
	codeStale       = "LF001"
	codeMissing     = "LF002"
	codeTruncate    = "LF003"
	codeLockTimeout = "55P03"
)

// queryInts returns the first column of q as int64s.
func queryInts(t *testing.T, db *sql.DB, q string, args ...any) []int64 {
	t.Helper()
	rows, err := db.Query(q, args...)
	require.NoError(t, err)
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var v sql.NullInt64
		require.NoError(t, rows.Scan(&v))
		if !v.Valid {
			v.Int64 = -1 // NULL
		}
		out = append(out, v.Int64)
	}
	require.NoError(t, rows.Err())
	return out
}

func TestFenceAcceptsCurrentTokenAndStamps(t *testing.T) {
	db := migrated.DB(t)
	lock := testdb.Key(t)
	table := fencing.GuardedTable(t, db, testdb.Schema(t), "account", lock, "strict")
	t1 := fencing.NextToken(t, db)
	require.True(t, fencing.Publish(t, db, lock, t1))

	// Token in the setting: INSERT, UPDATE, upsert and DELETE pass, and the
	// rows are stamped even when the column was left NULL.
	require.NoError(t, fencing.Write(db, t1,
		`INSERT INTO `+table+` (id, balance) VALUES (1, 100), (2, 200), (3, 300)`,
		`UPDATE `+table+` SET balance = balance + 1 WHERE id = 1`,
		`INSERT INTO `+table+` (id, balance) VALUES (2, 0) ON CONFLICT (id) DO UPDATE SET balance = 201`,
		`DELETE FROM `+table+` WHERE id = 3`))
	require.Equal(t, []int64{t1, t1}, queryInts(t, db, `SELECT fencing_token FROM `+table+` ORDER BY id`))
	require.Equal(t, []int64{101, 201}, queryInts(t, db, `SELECT balance FROM `+table+` ORDER BY id`))

	// Token in the column, without the setting.
	require.NoError(t, fencing.Write(db, 0, fmt.Sprintf(`INSERT INTO %s VALUES (4, 400, %d)`, table, t1)))
	// The setting wins over the column and is what gets stamped.
	require.NoError(t, fencing.Write(db, t1, fmt.Sprintf(`INSERT INTO %s VALUES (5, 500, %d)`, table, t1+1000)))
	require.Equal(t, []int64{t1}, queryInts(t, db, `SELECT fencing_token FROM `+table+` WHERE id = 5`))
	// An empty setting (what a finished set_config leaves behind) is no token.
	require.NoError(t, fencing.Write(db, 0, `SELECT set_config('pgadvisory.fencing_token', '', true)`,
		fmt.Sprintf(`INSERT INTO %s VALUES (6, 600, %d)`, table, t1)))
}

func TestFenceRejectsStaleToken(t *testing.T) {
	db := migrated.DB(t)
	lock := testdb.Key(t)
	schema := testdb.Schema(t)
	table := fencing.GuardedTable(t, db, schema, "account", lock, "strict")
	control := fencing.GuardedTable(t, db, schema, "control", lock, "")
	t1 := fencing.NextToken(t, db)
	require.True(t, fencing.Publish(t, db, lock, t1))
	seed := func(tbl string) {
		require.NoError(t, fencing.Write(db, t1, `INSERT INTO `+tbl+` (id, balance, fencing_token) VALUES (1, 100, 0), (2, 200, 0)`))
	}
	seed(table)
	seed(control)

	// A new holder publishes T2 and writes row 1.
	t2 := fencing.NextToken(t, db)
	require.Greater(t, t2, t1)
	require.True(t, fencing.Publish(t, db, lock, t2))
	require.False(t, fencing.Publish(t, db, lock, t1), "an older token never becomes current again")
	require.NoError(t, fencing.Write(db, t2, `UPDATE `+table+` SET balance = 150 WHERE id = 1`))
	require.NoError(t, fencing.Write(db, t2, `UPDATE `+control+` SET balance = 150 WHERE id = 1`))

	// The zombie with T1 is refused for every kind of write, in the setting
	// and in the column.
	stale := map[string]string{
		"insert":         `INSERT INTO ` + table + ` (id, balance) VALUES (3, 300)`,
		"multi-row":      `INSERT INTO ` + table + ` (id, balance) VALUES (3, 300), (4, 400), (5, 500)`,
		"update":         `UPDATE ` + table + ` SET balance = 0 WHERE id = 2`,
		"update all":     `UPDATE ` + table + ` SET balance = 0`,
		"delete":         `DELETE FROM ` + table + ` WHERE id = 2`,
		"upsert":         `INSERT INTO ` + table + ` (id, balance) VALUES (2, 0) ON CONFLICT (id) DO UPDATE SET balance = 0`,
		"upsert new row": `INSERT INTO ` + table + ` (id, balance) VALUES (9, 0) ON CONFLICT (id) DO UPDATE SET balance = 0`,
	}
	for what, stmt := range stale {
		e := sqlstate.Require(t, fencing.Write(db, t1, stmt), codeStale, what)
		require.Contains(t, e.Message, fmt.Sprintf("stale fencing token %d", t1), what)
	}
	e := sqlstate.Require(t, fencing.Write(db, t1, `UPDATE `+table+` SET balance = 0 WHERE id = 2`), codeStale)
	require.Equal(t, fmt.Sprintf("pgadvisory: stale fencing token %d for lock %d (current token %d)", t1, lock, t2), e.Message)
	// Row 1 carries T2 already: the per-row check refuses going back.
	e = sqlstate.Require(t, fencing.Write(db, 0, fmt.Sprintf(`UPDATE %s SET balance = 0, fencing_token = %d WHERE id = 1`, table, t1)), codeStale)
	require.Contains(t, e.Message, fmt.Sprintf("already carries token %d", t2))
	sqlstate.Require(t, fencing.Write(db, 0, fmt.Sprintf(`INSERT INTO %s VALUES (3, 300, %d)`, table, t1)), codeStale)
	// A legacy UPDATE that does not set the column inherits row 2's T1.
	sqlstate.Require(t, fencing.Write(db, 0, `UPDATE `+table+` SET balance = 0 WHERE id = 2`), codeStale)

	// Nothing of the zombie's landed.
	require.Equal(t, []int64{150, 200}, queryInts(t, db, `SELECT balance FROM `+table+` ORDER BY id`))
	require.Equal(t, []int64{t2, t1}, queryInts(t, db, `SELECT fencing_token FROM `+table+` ORDER BY id`))

	// The current holder still writes, including legacy UPDATEs of rows it
	// stamped.
	require.NoError(t, fencing.Write(db, t2, `UPDATE `+table+` SET balance = 250 WHERE id = 2`,
		`INSERT INTO `+table+` (id, balance) VALUES (3, 300), (4, 400)`))
	require.NoError(t, fencing.Write(db, 0, `UPDATE `+table+` SET balance = balance + 1 WHERE id = 2`))
	require.Equal(t, []int64{t2, t2, t2, t2}, queryInts(t, db, `SELECT fencing_token FROM `+table+` ORDER BY id`))

	// Control: without the trigger the zombie's write succeeds and
	// overwrites the new holder's (a lost update).
	require.NoError(t, fencing.Write(db, t1, `UPDATE `+control+` SET balance = 0 WHERE id = 1`))
	require.Equal(t, []int64{0}, queryInts(t, db, `SELECT balance FROM `+control+` WHERE id = 1`))
}

func TestFenceUnpublishedLock(t *testing.T) {
	db := migrated.DB(t)
	lock := testdb.Key(t)
	table := fencing.GuardedTable(t, db, testdb.Schema(t), "account", lock, "strict")
	tok := fencing.NextToken(t, db)
	e := sqlstate.Require(t, fencing.Write(db, tok, `INSERT INTO `+table+` (id, balance) VALUES (1, 1)`), codeStale)
	require.Contains(t, e.Message, "never published")
}

func TestFenceMissingToken(t *testing.T) {
	db := migrated.DB(t)
	lock := testdb.Key(t)
	schema := testdb.Schema(t)
	strict := fencing.GuardedTable(t, db, schema, "strict", lock, "strict")
	permissive := fencing.GuardedTable(t, db, schema, "permissive", lock, "permissive")
	tok := fencing.NextToken(t, db)
	require.True(t, fencing.Publish(t, db, lock, tok))
	for _, tbl := range []string{strict, permissive} {
		require.NoError(t, fencing.Write(db, tok, `INSERT INTO `+tbl+` (id, balance) VALUES (1, 100)`))
	}

	// Strict: writes without a token are refused.
	for what, stmt := range map[string]string{
		"insert":      `INSERT INTO ` + strict + ` (id, balance) VALUES (2, 200)`,
		"delete":      `DELETE FROM ` + strict + ` WHERE id = 1`,
		"update null": `UPDATE ` + strict + ` SET fencing_token = NULL WHERE id = 1`,
	} {
		e := sqlstate.Require(t, fencing.Write(db, 0, stmt), codeMissing, what)
		require.Contains(t, e.Message, "carries no fencing token", what)
		require.NotEmpty(t, e.Hint)
	}
	sqlstate.Require(t, fencing.Write(db, 0, `TRUNCATE `+strict), codeMissing)
	require.Equal(t, []int64{1}, queryInts(t, db, `SELECT id FROM `+strict))

	// Permissive: they pass untouched (no stamp), as does TRUNCATE.
	require.NoError(t, fencing.Write(db, 0, `INSERT INTO `+permissive+` (id, balance) VALUES (2, 200)`,
		`UPDATE `+permissive+` SET fencing_token = NULL WHERE id = 1`,
		`DELETE FROM `+permissive+` WHERE id = 2`))
	require.Equal(t, []int64{-1}, queryInts(t, db, `SELECT fencing_token FROM `+permissive))
	require.NoError(t, fencing.Write(db, 0, `TRUNCATE `+permissive))
	// A token, when carried, is still checked in permissive mode.
	sqlstate.Require(t, fencing.Write(db, tok+1000, `INSERT INTO `+permissive+` (id, balance) VALUES (3, 300)`), codeStale)
}

func TestFenceBadTriggerArguments(t *testing.T) {
	db := migrated.DB(t)
	schema := testdb.Schema(t)
	for _, args := range []string{`'1', 'lenient'`, `'1'`, ``} {
		_, err := db.Exec(`DROP TABLE IF EXISTS ` + schema + `.bad; CREATE TABLE ` + schema + `.bad (id int, fencing_token bigint);
			CREATE TRIGGER f BEFORE INSERT ON ` + schema + `.bad FOR EACH ROW EXECUTE FUNCTION pgadvisory.fence_check(` + args + `)`)
		require.NoError(t, err)
		sqlstate.Require(t, fencing.Write(db, 1, `INSERT INTO `+schema+`.bad VALUES (1, 1)`), "22023", args)
	}
	_, err := db.Exec(`CREATE TABLE ` + schema + `.badp (id int, fencing_token bigint);
		CREATE TRIGGER f BEFORE INSERT ON ` + schema + `.badp FOR EACH ROW EXECUTE FUNCTION pgadvisory.fence_check_param('a.b', 'strict', 'tenant_id')`)
	require.NoError(t, err)
	sqlstate.Require(t, fencing.Write(db, 1, `INSERT INTO `+schema+`.badp VALUES (1, 1)`), "42703")
}

// TestFenceSameTokenWritersDoNotBlock: two transactions with the same token
// write at once. The second runs and commits while the first is still open;
// had it waited for the first, its lock_timeout would have failed it.
func TestFenceSameTokenWritersDoNotBlock(t *testing.T) {
	ctx := context.Background()
	db := migrated.DB(t)
	lock := testdb.Key(t)
	table := fencing.GuardedTable(t, db, testdb.Schema(t), "account", lock, "strict")
	tok := fencing.NextToken(t, db)
	require.True(t, fencing.Publish(t, db, lock, tok))

	first, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer first.Rollback()
	_, err = first.Exec(`SELECT set_config('pgadvisory.fencing_token', $1, true)`, fmt.Sprint(tok))
	require.NoError(t, err)
	_, err = first.Exec(`INSERT INTO ` + table + ` (id, balance) VALUES (1, 100)`)
	require.NoError(t, err)

	require.NoError(t, fencing.Write(db, tok, `SET LOCAL lock_timeout = '10s'`,
		`INSERT INTO `+table+` (id, balance) VALUES (2, 200)`,
		`UPDATE `+table+` SET balance = 201 WHERE id = 2`))
	require.NoError(t, first.Commit())
	require.Equal(t, []int64{1, 2}, queryInts(t, db, `SELECT id FROM `+table+` ORDER BY id`))
}

// TestFencePublishWaitsForInFlightWrites: the next holder's publish waits
// while a write with the current token is open, and succeeds after it ends;
// from then on that token is refused.
func TestFencePublishWaitsForInFlightWrites(t *testing.T) {
	ctx := context.Background()
	db := migrated.DB(t)
	lock := testdb.Key(t)
	table := fencing.GuardedTable(t, db, testdb.Schema(t), "account", lock, "strict")
	t2 := fencing.NextToken(t, db)
	require.True(t, fencing.Publish(t, db, lock, t2))

	writer, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer writer.Rollback()
	_, err = writer.Exec(`SELECT set_config('pgadvisory.fencing_token', $1, true)`, fmt.Sprint(t2))
	require.NoError(t, err)
	_, err = writer.Exec(`INSERT INTO ` + table + ` (id, balance) VALUES (1, 100)`)
	require.NoError(t, err)

	t3 := fencing.NextToken(t, db)
	publishWithTimeout := func() error {
		return fencing.Write(db, 0, `SET LOCAL lock_timeout = '200ms'`,
			fmt.Sprintf(`INSERT INTO pgadvisory.fence AS f (lock_id, token) VALUES (%d, %d)
			ON CONFLICT (lock_id) DO UPDATE SET token = excluded.token WHERE f.token < excluded.token`, lock, t3))
	}
	sqlstate.Require(t, publishWithTimeout(), codeLockTimeout)

	// The writer commits with T2, still current.
	_, err = writer.Exec(`UPDATE ` + table + ` SET balance = 101 WHERE id = 1`)
	require.NoError(t, err)
	require.NoError(t, writer.Commit())

	require.NoError(t, publishWithTimeout())
	require.Equal(t, []int64{t3}, queryInts(t, db, `SELECT token FROM pgadvisory.fence WHERE lock_id = $1`, lock))
	sqlstate.Require(t, fencing.Write(db, t2, `UPDATE `+table+` SET balance = 0 WHERE id = 1`), codeStale)
	require.NoError(t, fencing.Write(db, t3, `UPDATE `+table+` SET balance = 102 WHERE id = 1`))
}

// TestFencePublishOrderedAfterWriter: a publish without a timeout blocks on
// the open writer and completes once it commits (the same as above, without
// relying on the timeout).
func TestFencePublishOrderedAfterWriter(t *testing.T) {
	ctx := context.Background()
	db := migrated.DB(t)
	lock := testdb.Key(t)
	table := fencing.GuardedTable(t, db, testdb.Schema(t), "account", lock, "strict")
	t2 := fencing.NextToken(t, db)
	require.True(t, fencing.Publish(t, db, lock, t2))

	writer, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer writer.Rollback()
	_, err = writer.Exec(`SELECT set_config('pgadvisory.fencing_token', $1, true)`, fmt.Sprint(t2))
	require.NoError(t, err)
	_, err = writer.Exec(`INSERT INTO ` + table + ` (id, balance) VALUES (1, 100)`)
	require.NoError(t, err)

	pubConn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer pubConn.Close()
	var pubPID int
	require.NoError(t, pubConn.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pubPID))
	t3 := fencing.NextToken(t, db)
	done := make(chan error, 1)
	go func() {
		_, err := pubConn.ExecContext(ctx, fencing.PublishSQL, lock, t3)
		done <- err
	}()
	// The publish waits on a lock held by the writer.
	require.Eventually(t, func() bool {
		var waiting bool
		err := db.QueryRow(`SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`, pubPID).Scan(&waiting)
		return err == nil && waiting
	}, 30*time.Second, 20*time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("publish finished while the writer was open: %v", err)
	default:
	}
	require.NoError(t, writer.Commit())
	require.NoError(t, <-done)
	require.Equal(t, []int64{t3}, queryInts(t, db, `SELECT token FROM pgadvisory.fence WHERE lock_id = $1`, lock))
}

func TestFenceTruncateGuard(t *testing.T) {
	db := migrated.DB(t)
	lock := testdb.Key(t)
	table := fencing.GuardedTable(t, db, testdb.Schema(t), "account", lock, "strict")
	t1 := fencing.NextToken(t, db)
	require.True(t, fencing.Publish(t, db, lock, t1))
	require.NoError(t, fencing.Write(db, t1, `INSERT INTO `+table+` (id, balance) VALUES (1, 100)`))
	t2 := fencing.NextToken(t, db)
	require.True(t, fencing.Publish(t, db, lock, t2))

	sqlstate.Require(t, fencing.Write(db, 0, `TRUNCATE `+table), codeMissing)
	sqlstate.Require(t, fencing.Write(db, t1, `TRUNCATE `+table), codeStale)
	require.Equal(t, []int64{1}, queryInts(t, db, `SELECT id FROM `+table))
	require.NoError(t, fencing.Write(db, t2, `TRUNCATE `+table))
	require.Empty(t, queryInts(t, db, `SELECT id FROM `+table))
}

// invoiceTable creates schema.invoice fenced by the parameterized lock
// billing.invoice(tenant_id int64).
func invoiceTable(t *testing.T, db *sql.DB, schema, policy string) string {
	t.Helper()
	table := schema + ".invoice"
	args := "'billing.invoice', '" + policy + "', 'tenant_id'"
	_, err := db.Exec(`CREATE TABLE ` + table + ` (id int PRIMARY KEY, tenant_id bigint NOT NULL, amount int NOT NULL, fencing_token bigint);
		CREATE TRIGGER zz_pgadvisory_fence BEFORE INSERT OR UPDATE OR DELETE ON ` + table + `
			FOR EACH ROW EXECUTE FUNCTION pgadvisory.fence_check_param(` + args + `);
		CREATE TRIGGER zz_pgadvisory_fence_truncate BEFORE TRUNCATE ON ` + table + `
			FOR EACH STATEMENT EXECUTE FUNCTION pgadvisory.fence_truncate_guard(` + args + `)`)
	require.NoError(t, err)
	return table
}

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

	a1, b1 := fencing.NextToken(t, db), fencing.NextToken(t, db)
	require.True(t, fencing.Publish(t, db, lock1, a1))
	require.True(t, fencing.Publish(t, db, lock2, b1))
	ins := func(id int, tenant int64) string {
		return fmt.Sprintf(`INSERT INTO %s (id, tenant_id, amount) VALUES (%d, %d, 1)`, table, id, tenant)
	}
	require.NoError(t, fencing.Write(db, a1, ins(1, ten1), ins(2, ten1)))
	require.NoError(t, fencing.Write(db, b1, ins(3, ten2)))
	// Each token writes only its own tenant's rows.
	e := sqlstate.Require(t, fencing.Write(db, a1, ins(4, ten2)), codeStale)
	require.Contains(t, e.Message, fmt.Sprintf("billing.invoice(%d) = %d", ten2, lock2))
	sqlstate.Require(t, fencing.Write(db, b1, `UPDATE `+table+` SET amount = 2 WHERE id = 1`), codeStale)

	// A new holder of tenant 1 publishes: tenant 1's old token is stale,
	// tenant 2's is not affected.
	a2 := fencing.NextToken(t, db)
	require.True(t, fencing.Publish(t, db, lock1, a2))
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
	b2 := fencing.NextToken(t, db)
	require.True(t, fencing.Publish(t, db, lock2, b2))
	e = sqlstate.Require(t, fencing.Write(db, b2, fmt.Sprintf(`UPDATE %s SET tenant_id = %d WHERE id = 1`, table, ten2)), codeStale)
	require.Contains(t, e.Message, fmt.Sprintf("billing.invoice(%d) = %d (current token %d)", ten1, lock1, a2))
	// Control: staying within tenant 2 passes with the same token.
	require.NoError(t, fencing.Write(db, b2, fmt.Sprintf(`UPDATE %s SET tenant_id = %d WHERE id = 3`, table, ten2)))

	// Missing token, and TRUNCATE.
	sqlstate.Require(t, fencing.Write(db, 0, ins(7, ten1)), codeMissing)
	e = sqlstate.Require(t, fencing.Write(db, a2, `TRUNCATE `+table), codeTruncate)
	require.Contains(t, e.Message, "DELETE rows instead")
	sqlstate.Require(t, fencing.Write(db, 0, `TRUNCATE `+table), codeTruncate)
}

func TestFenceParameterizedPermissiveTruncate(t *testing.T) {
	db := migrated.DB(t)
	table := invoiceTable(t, db, testdb.Schema(t), "permissive")
	require.NoError(t, fencing.Write(db, 0, `INSERT INTO `+table+` (id, tenant_id, amount) VALUES (1, 1, 1)`))
	sqlstate.Require(t, fencing.Write(db, 1, `TRUNCATE `+table), codeTruncate)
	require.NoError(t, fencing.Write(db, 0, `TRUNCATE `+table))
}

// TestFenceParameterCanonicalText: the trigger derives the same lock ID as
// Go's keyspace.ParamID from int64, uuid, bool and string columns, whatever
// spelling the values were written in.
func TestFenceParameterCanonicalText(t *testing.T) {
	db := migrated.DB(t)
	schema := testdb.Schema(t)
	table := schema + ".export"
	_, err := db.Exec(`CREATE TABLE ` + table + ` (n bigint, u uuid, b boolean, s text, i integer, v varchar(20), fencing_token bigint);
		CREATE TRIGGER zz_pgadvisory_fence BEFORE INSERT OR UPDATE OR DELETE ON ` + table + `
			FOR EACH ROW EXECUTE FUNCTION pgadvisory.fence_check_param('exports.archive', 'strict', 'n', 'u', 'b', 's', 'i', 'v')`)
	require.NoError(t, err)

	n := testdb.Key(t) * -1
	u := [16]byte{0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8, 0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38, 0x0a, 0x11}
	s := `it's "quoted" \ ünïcode 😀`
	lock := keyspace.ParamID("exports.archive", keyspace.Int64Param(n), keyspace.UUIDParam(u),
		keyspace.BoolParam(false), keyspace.StringParam(s), keyspace.Int64Param(-7), keyspace.StringParam("x y"))
	tok := fencing.NextToken(t, db)
	require.True(t, fencing.Publish(t, db, lock, tok))

	insert := func(tok int64, b string) error {
		ctx := context.Background()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.Exec(`INSERT INTO `+table+` VALUES ($1, '{A0EEBC999C0B4EF8BB6D6BB9BD380A11}', $2::boolean, $3, -7, 'x y', $4)`, n, b, s, tok); err != nil {
			return err
		}
		return tx.Commit()
	}
	require.NoError(t, insert(tok, "off"))
	require.NoError(t, insert(tok, "FALSE"))
	// Control: another parameter value is another lock, never published.
	sqlstate.Require(t, insert(tok, "true"), codeStale)
}

func TestFenceSequenceNeverReissues(t *testing.T) {
	ctx := context.Background()
	db := migrated.DB(t)
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	var aborted int64
	require.NoError(t, tx.QueryRow(`SELECT nextval('pgadvisory.fencing_token_seq')`).Scan(&aborted))
	require.NoError(t, tx.Rollback())
	require.Greater(t, fencing.NextToken(t, db), aborted)
}

func TestRunOnceLedgerPrimaryKey(t *testing.T) {
	db := migrated.DB(t)
	lock := testdb.Key(t)
	ins := `INSERT INTO pgadvisory.run_once (lock_id, window_key, token, holder, started_at, finished_at)
		VALUES ($1, $2, NULL, 'host-a', now(), clock_timestamp())`
	_, err := db.Exec(ins, lock, "2026-01-02")
	require.NoError(t, err)
	_, err = db.Exec(ins, lock, "2026-01-03")
	require.NoError(t, err)
	sqlstate.Require(t, func() error { _, err := db.Exec(ins, lock, "2026-01-02"); return err }(), "23505")
}
