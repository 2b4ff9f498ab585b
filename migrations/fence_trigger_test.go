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
)

// The fencing tests drive the SQL contract of 00002_fencing.sql with raw
// SQL (internal/testkit/fencing), as the runtime and the generated
// migrations use it: tokens from the sequence, a publish by INSERT .. ON
// CONFLICT on pgadvisory.fence, writes carrying the token in the
// transaction-local setting or in the column. This file: the row trigger
// and the TRUNCATE guard accept the current token and stamp it, and refuse a
// stale, unpublished or missing one with lockgen's SQLSTATEs. The other
// stories: fence_publish_test.go, fence_parameterized_test.go.

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
