package migrations_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// The fencing tests drive the SQL contract of lockgen's fencing migrations
// with raw SQL (internal/testkit/fencing), on tables fenced by the Up of
// the migration lockgen fence writes: tokens published the way a holder
// publishes them, writes carrying the token in the transaction-local
// setting. This file: a fenced table accepts the current token for every
// kind of write and stamps it, and refuses a stale, unpublished or missing
// one with lockgen's SQLSTATEs; the fencing_token column never counts as a
// token. The other stories: fence_publish_test.go (publishing against
// writes in flight), fence_parameterized_test.go, fence_reorder_test.go (the
// check sees the row as written), fence_partition_test.go,
// fence_legacy_test.go (tables fenced in the first layout),
// fence_privileges_test.go.

func TestFenceAcceptsCurrentTokenAndStamps(t *testing.T) {
	db := migrated.DB(t)
	lock := testdb.Key(t)
	table := fencing.Table(t, db, testdb.Schema(t), "account", lock, "strict")
	t1 := fencing.Publish(t, db, lock)

	// Every kind of write passes with the token in the setting, and the
	// rows are stamped with it, whatever the writer put in the column.
	require.NoError(t, fencing.Write(db, t1,
		`INSERT INTO `+table+` (id, balance) VALUES (1, 100), (2, 200), (3, 300)`,
		`UPDATE `+table+` SET balance = balance + 1 WHERE id = 1`,
		`INSERT INTO `+table+` (id, balance) VALUES (2, 0) ON CONFLICT (id) DO UPDATE SET balance = 201`,
		`DELETE FROM `+table+` WHERE id = 3`,
		`MERGE INTO `+table+` AS a USING (VALUES (1, 102), (4, 400)) AS s(id, b) ON a.id = s.id
		 WHEN MATCHED THEN UPDATE SET balance = s.b WHEN NOT MATCHED THEN INSERT (id, balance) VALUES (s.id, s.b)`,
		fmt.Sprintf(`INSERT INTO %s VALUES (5, 500, %d)`, table, t1+1000),
		fmt.Sprintf(`UPDATE %s SET fencing_token = %d WHERE id = 4`, table, t1-1),
		`UPDATE `+table+` SET balance = 0 WHERE id = 999`))
	require.Equal(t, map[int64]fencing.Row{
		1: {Balance: 102, Token: t1}, 2: {Balance: 201, Token: t1}, 4: {Balance: 400, Token: t1}, 5: {Balance: 500, Token: t1},
	}, fencing.Rows(t, db, table))

	// COPY FROM fires the statement triggers too.
	require.NoError(t, copyRows(db, t1, table, [][]any{{6, 600}}))
	require.Equal(t, fencing.Row{Balance: 600, Token: t1}, fencing.Rows(t, db, table)[6])
}

func TestFenceRejectsStaleToken(t *testing.T) {
	db := migrated.DB(t)
	lock := testdb.Key(t)
	schema := testdb.Schema(t)
	table := fencing.Table(t, db, schema, "account", lock, "strict")
	control := fencing.Table(t, db, schema, "control", lock, "")
	t1 := fencing.Publish(t, db, lock)
	seed := func(tbl string) {
		require.NoError(t, fencing.Write(db, t1, `INSERT INTO `+tbl+` (id, balance) VALUES (1, 100), (2, 200)`))
	}
	seed(table)
	seed(control)

	// A new holder publishes T2 and writes row 1.
	t2 := fencing.Publish(t, db, lock)
	require.Greater(t, t2, t1)
	require.NoError(t, fencing.Write(db, t2, `UPDATE `+table+` SET balance = 150 WHERE id = 1`))
	require.NoError(t, fencing.Write(db, t2, `UPDATE `+control+` SET balance = 150 WHERE id = 1`))

	// The zombie with T1 is refused for every kind of write.
	stale := map[string]string{
		"insert":         `INSERT INTO ` + table + ` (id, balance) VALUES (3, 300)`,
		"multi-row":      `INSERT INTO ` + table + ` (id, balance) VALUES (3, 300), (4, 400), (5, 500)`,
		"update":         `UPDATE ` + table + ` SET balance = 0 WHERE id = 2`,
		"update all":     `UPDATE ` + table + ` SET balance = 0`,
		"delete":         `DELETE FROM ` + table + ` WHERE id = 2`,
		"upsert":         `INSERT INTO ` + table + ` (id, balance) VALUES (2, 0) ON CONFLICT (id) DO UPDATE SET balance = 0`,
		"upsert new row": `INSERT INTO ` + table + ` (id, balance) VALUES (9, 0) ON CONFLICT (id) DO UPDATE SET balance = 0`,
		"merge update":   `MERGE INTO ` + table + ` AS a USING (VALUES (2)) AS s(id) ON a.id = s.id WHEN MATCHED THEN UPDATE SET balance = 0`,
		"merge insert":   `MERGE INTO ` + table + ` AS a USING (VALUES (9)) AS s(id) ON a.id = s.id WHEN NOT MATCHED THEN INSERT (id, balance) VALUES (9, 0)`,
		"merge delete":   `MERGE INTO ` + table + ` AS a USING (VALUES (2)) AS s(id) ON a.id = s.id WHEN MATCHED THEN DELETE`,
		"column token":   fmt.Sprintf(`INSERT INTO %s VALUES (3, 300, %d)`, table, t2),
	}
	for what, stmt := range stale {
		e := sqlstate.Require(t, fencing.Write(db, t1, stmt), codeStale, what)
		require.Contains(t, e.Message, fmt.Sprintf("stale fencing token %d", t1), what)
	}
	e := sqlstate.Require(t, fencing.Write(db, t1, `UPDATE `+table+` SET balance = 0 WHERE id = 2`), codeStale)
	require.Equal(t, fmt.Sprintf("pgadvisory: stale fencing token %d for lock %d: it is not the lock's current token", t1, lock), e.Message)
	require.NotContains(t, e.Message+e.Detail+e.Hint, fmt.Sprintf("token %d", t2), "no current token in the error")
	// Row 1 carries T2 already: the row check refuses going back to T1.
	e = sqlstate.Require(t, fencing.Write(db, t1, `UPDATE `+table+` SET balance = 0 WHERE id = 1`), codeStale)
	require.Contains(t, e.Message, "already carries a newer token")
	require.NotContains(t, e.Message, fmt.Sprintf("token %d", t2), "the row's stamp is the current token: not named")
	sqlstate.Require(t, copyRows(db, t1, table, [][]any{{7, 700}}), codeStale, "COPY")

	// Nothing of the zombie's landed.
	require.Equal(t, map[int64]fencing.Row{1: {Balance: 150, Token: t2}, 2: {Balance: 200, Token: t1}}, fencing.Rows(t, db, table))

	// The current holder still writes, rows stamped by T1 included.
	require.NoError(t, fencing.Write(db, t2, `UPDATE `+table+` SET balance = 250 WHERE id = 2`,
		`INSERT INTO `+table+` (id, balance) VALUES (3, 300), (4, 400)`))
	require.Equal(t, []int64{t2, t2, t2, t2}, queryInts(t, db, `SELECT fencing_token FROM `+table+` ORDER BY id`))

	// Control: without the triggers the zombie's write succeeds and
	// overwrites the new holder's (a lost update).
	require.NoError(t, fencing.Write(db, t1, `UPDATE `+control+` SET balance = 0 WHERE id = 1`))
	require.Equal(t, []int64{0}, queryInts(t, db, `SELECT balance FROM `+control+` WHERE id = 1`))
}

func TestFenceUnpublishedLock(t *testing.T) {
	db := migrated.DB(t)
	lock := testdb.Key(t)
	table := fencing.Table(t, db, testdb.Schema(t), "account", lock, "strict")
	tok := fencing.NextToken(t, db)
	e := sqlstate.Require(t, fencing.Write(db, tok, `INSERT INTO `+table+` (id, balance) VALUES (1, 1)`), codeStale)
	require.Contains(t, e.Message, "never published")
}

// TestFenceMissingToken: a write's token is only what the writer set for
// its transaction. Strict refuses every write without one, the UPDATE of a
// row the current holder stamped included (the first layout let it
// through: fence_legacy_test.go); permissive lets them all pass, stamped
// NULL, whatever the row's stamp was.
func TestFenceMissingToken(t *testing.T) {
	db := migrated.DB(t)
	lock := testdb.Key(t)
	schema := testdb.Schema(t)
	strict := fencing.Table(t, db, schema, "strict", lock, "strict")
	permissive := fencing.Table(t, db, schema, "permissive", lock, "permissive")
	tok := fencing.Publish(t, db, lock)
	for _, tbl := range []string{strict, permissive} {
		require.NoError(t, fencing.Write(db, tok, `INSERT INTO `+tbl+` (id, balance) VALUES (1, 100), (2, 200)`))
	}

	// Strict: writes without a token are refused, whatever the column says.
	for what, stmt := range map[string]string{
		"insert":               `INSERT INTO ` + strict + ` (id, balance) VALUES (3, 300)`,
		"insert, column token": fmt.Sprintf(`INSERT INTO %s VALUES (3, 300, %d)`, strict, tok),
		"update":               `UPDATE ` + strict + ` SET balance = 0 WHERE id = 1`,
		"update, column token": fmt.Sprintf(`UPDATE %s SET balance = 0, fencing_token = %d WHERE id = 1`, strict, tok),
		"update null":          `UPDATE ` + strict + ` SET fencing_token = NULL WHERE id = 1`,
		"delete":               `DELETE FROM ` + strict + ` WHERE id = 1`,
		"upsert":               `INSERT INTO ` + strict + ` (id, balance) VALUES (1, 0) ON CONFLICT (id) DO UPDATE SET balance = 0`,
		"merge":                `MERGE INTO ` + strict + ` AS a USING (VALUES (1)) AS s(id) ON a.id = s.id WHEN MATCHED THEN UPDATE SET balance = 0`,
		"truncate":             `TRUNCATE ` + strict,
	} {
		e := sqlstate.Require(t, fencing.Write(db, 0, stmt), codeMissing, what)
		require.Contains(t, e.Message, "carries no fencing token", what)
		require.Contains(t, e.Message, "pgadvisory.WithFencing() (fencing: true in locks.yaml)", what)
		require.NotEmpty(t, e.Hint, what)
	}
	sqlstate.Require(t, copyRows(db, 0, strict, [][]any{{3, 300}}), codeMissing, "COPY")
	// An empty setting (what a finished set_config leaves behind) is no token.
	sqlstate.Require(t, fencing.Write(db, 0, `SELECT set_config('pgadvisory.fencing_token', '', true)`,
		`UPDATE `+strict+` SET balance = 0 WHERE id = 1`), codeMissing)
	require.Equal(t, map[int64]fencing.Row{1: {Balance: 100, Token: tok}, 2: {Balance: 200, Token: tok}}, fencing.Rows(t, db, strict))

	// Permissive: they pass and leave their rows stamped NULL, also rows the
	// current holder stamped; TRUNCATE passes too.
	require.NoError(t, fencing.Write(db, 0,
		`INSERT INTO `+permissive+` (id, balance) VALUES (3, 300)`,
		fmt.Sprintf(`INSERT INTO %s VALUES (4, 400, %d)`, permissive, tok),
		`UPDATE `+permissive+` SET balance = 101 WHERE id = 1`,
		`DELETE FROM `+permissive+` WHERE id = 2`))
	require.Equal(t, map[int64]fencing.Row{1: {Balance: 101}, 3: {Balance: 300}, 4: {Balance: 400}}, fencing.Rows(t, db, permissive))
	require.Equal(t, []int64{-1, -1, -1}, queryInts(t, db, `SELECT fencing_token FROM `+permissive+` ORDER BY id`), "NULL stamps")
	// A token, when carried, is still checked in permissive mode.
	sqlstate.Require(t, fencing.Write(db, tok+1000, `INSERT INTO `+permissive+` (id, balance) VALUES (5, 500)`), codeStale)
	sqlstate.Require(t, fencing.Write(db, tok+1000, `TRUNCATE `+permissive), codeStale)
	require.NoError(t, fencing.Write(db, 0, `TRUNCATE `+permissive))
	require.Empty(t, fencing.Rows(t, db, permissive))
}

// TestFenceWritesOfNoRows: a statement that writes no row changes nothing,
// so it passes without a token (its statement triggers fire and see no
// rows); one row more and it is refused.
func TestFenceWritesOfNoRows(t *testing.T) {
	db := migrated.DB(t)
	lock := testdb.Key(t)
	table := fencing.Table(t, db, testdb.Schema(t), "account", lock, "strict")
	tok := fencing.Publish(t, db, lock)
	require.NoError(t, fencing.Write(db, tok, `INSERT INTO `+table+` (id, balance) VALUES (1, 100)`))
	require.NoError(t, fencing.Write(db, 0,
		`UPDATE `+table+` SET balance = 0 WHERE id = 2`,
		`DELETE FROM `+table+` WHERE id = 2`,
		`INSERT INTO `+table+` SELECT 2, 0, NULL WHERE false`,
		`MERGE INTO `+table+` AS a USING (VALUES (2)) AS s(id) ON a.id = s.id WHEN MATCHED THEN DELETE`))
	sqlstate.Require(t, fencing.Write(db, 0, `DELETE FROM `+table+` WHERE id = 1`), codeMissing)
}

func TestFenceBadTriggerArguments(t *testing.T) {
	db := migrated.DB(t)
	schema := testdb.Schema(t)
	for _, tc := range []struct{ fn, args, when string }{
		{"fence_check", `'1', 'lenient'`, "BEFORE INSERT ON %s FOR EACH ROW"},
		{"fence_check", `'1'`, "BEFORE INSERT ON %s FOR EACH ROW"},
		{"fence_check", ``, "BEFORE INSERT ON %s FOR EACH ROW"},
		{"fence_stamp", `'1', 'lenient'`, "BEFORE INSERT ON %s FOR EACH ROW"},
		{"fence_stamp", `'1'`, "BEFORE INSERT ON %s FOR EACH ROW"},
		{"fence_check_statement", `'1', 'lenient'`, "AFTER INSERT ON %s REFERENCING NEW TABLE AS fence_new FOR EACH STATEMENT"},
		{"fence_check_statement", `'1', 'strict'`, "BEFORE INSERT ON %s FOR EACH STATEMENT"},
	} {
		_, err := db.Exec(`DROP TABLE IF EXISTS ` + schema + `.bad; CREATE TABLE ` + schema + `.bad (id int, fencing_token bigint);
			CREATE TRIGGER f ` + fmt.Sprintf(tc.when, schema+".bad") + ` EXECUTE FUNCTION pgadvisory.` + tc.fn + `(` + tc.args + `)`)
		require.NoError(t, err)
		sqlstate.Require(t, fencing.Write(db, 1, `INSERT INTO `+schema+`.bad VALUES (1, 1)`), "22023", "%s(%s)", tc.fn, tc.args)
	}
	_, err := db.Exec(`CREATE TABLE ` + schema + `.badp (id int, fencing_token bigint);
		CREATE TRIGGER f BEFORE INSERT ON ` + schema + `.badp FOR EACH ROW EXECUTE FUNCTION pgadvisory.fence_check_param('a.b', 'strict', 'tenant_id')`)
	require.NoError(t, err)
	fencing.ListAsFencedBefore(t, db, schema+".badp", `'a.b', 'strict', 'tenant_id'`)
	sqlstate.Require(t, fencing.Write(db, 1, `INSERT INTO `+schema+`.badp VALUES (1, 1)`), "42804", "the parameter column does not exist")
}

func TestFenceTruncateGuard(t *testing.T) {
	db := migrated.DB(t)
	lock := testdb.Key(t)
	table := fencing.Table(t, db, testdb.Schema(t), "account", lock, "strict")
	t1 := fencing.Publish(t, db, lock)
	require.NoError(t, fencing.Write(db, t1, `INSERT INTO `+table+` (id, balance) VALUES (1, 100)`))
	t2 := fencing.Publish(t, db, lock)

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

// copyRows copies rows of (id, balance) into table with COPY FROM, in a
// transaction that carries token (0: none), and commits it.
func copyRows(db *sql.DB, token int64, table string, rows [][]any) error {
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		pc := dc.(interface{ Conn() *pgx.Conn }).Conn()
		tx, err := pc.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if token != 0 {
			if _, err := tx.Exec(ctx, `SELECT set_config('pgadvisory.fencing_token', $1, true)`, fmt.Sprint(token)); err != nil {
				return err
			}
		}
		schema, name, _ := strings.Cut(table, ".")
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{schema, name}, []string{"id", "balance"}, pgx.CopyFromRows(rows)); err != nil {
			return err
		}
		return tx.Commit(ctx)
	})
}
