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
	"github.com/lockgen/lockgen/pgadvisory"
)

// The trigger functions that run as their owner check their table in
// pgadvisory.fenced_table: a table works only once listed with the
// triggers' arguments, whoever owns it, a row trigger cloned to a partition
// through its listed parent, and a listing with other arguments does not
// count. The table's owner is an application role; the
// owner of lockgen's schema created the triggers (a role that may not
// execute the functions cannot).
func TestFencedTableListing(t *testing.T) {
	db := migrated.DB(t)
	role := fencing.AppRole(t, db)
	schema := testdb.Schema(t)
	lock := testdb.Key(t)
	parted := schema + ".parted"
	args := fmt.Sprintf("'%d', 'strict'", lock)
	_, err := db.Exec(`
		CREATE TABLE ` + parted + ` (id int NOT NULL, balance int NOT NULL, fencing_token bigint) PARTITION BY RANGE (id);
		CREATE TABLE ` + schema + `.part1 PARTITION OF ` + parted + ` FOR VALUES FROM (0) TO (100);
		CREATE TRIGGER zz_pgadvisory_fence BEFORE INSERT OR UPDATE OR DELETE ON ` + parted + `
			FOR EACH ROW EXECUTE FUNCTION pgadvisory.fence_check(` + args + `);
		ALTER TABLE ` + parted + ` OWNER TO ` + role + `;
		ALTER TABLE ` + schema + `.part1 OWNER TO ` + role)
	require.NoError(t, err)
	tok := fencing.Publish(t, db, lock)
	insert := `INSERT INTO ` + parted + ` (id, balance) VALUES (1, 100)`

	sqlstate.Require(t, fencing.Write(db, tok, insert), "42501", "not listed, and its owner may not execute fence_check")
	_, err = db.Exec(`SELECT pgadvisory.fence_register($1, $2, 'permissive', '{}')`, parted, fmt.Sprint(lock))
	require.NoError(t, err)
	sqlstate.Require(t, fencing.Write(db, tok, insert), "42501", "listed with another policy")
	_, err = db.Exec(`SELECT pgadvisory.fence_register($1, $2, 'strict', '{}')`, parted, fmt.Sprint(lock))
	require.NoError(t, err)
	require.NoError(t, fencing.Write(db, tok, insert), "the partition's cloned trigger finds its listed parent")
	sqlstate.Require(t, fencing.Write(db, 0, `DELETE FROM `+schema+`.part1`), codeMissing)

	_, err = db.Exec(`SELECT pgadvisory.fence_unregister($1)`, parted)
	require.NoError(t, err)
	sqlstate.Require(t, fencing.Write(db, tok, `UPDATE `+parted+` SET balance = 1`), "42501", "unlisted again")
	// No role's rights stand in for the listing: not EXECUTE on the
	// trigger function, not owning the table as the owner of lockgen's
	// schema.
	_, err = db.Exec(`GRANT EXECUTE ON FUNCTION pgadvisory.fence_check() TO ` + role)
	require.NoError(t, err)
	err = fencing.Write(db, tok, `UPDATE `+parted+` SET balance = 1`)
	sqlstate.Require(t, err, "42501", "unlisted, though its owner may execute fence_check")
	require.ErrorContains(t, err, schema+".part1", "the refusal names the table (the partition the row trigger fired on)")
	require.ErrorContains(t, err, "pgadvisory.fence_register", "and says how to list it")
	_, err = db.Exec(`ALTER TABLE ` + parted + ` OWNER TO CURRENT_USER; ALTER TABLE ` + schema + `.part1 OWNER TO CURRENT_USER`)
	require.NoError(t, err)
	sqlstate.Require(t, fencing.Write(db, tok, `UPDATE `+parted+` SET balance = 1`), "42501", "unlisted, owned by the owner of lockgen's schema")
}

// fence_register lists only tables whose columns the trigger functions can
// read as their owner: a fencing_token bigint, and parameter columns of the
// built-in types whose text no session setting changes, NOT NULL.
func TestFenceRegisterRefusals(t *testing.T) {
	db := migrated.DB(t)
	schema := testdb.Schema(t)
	_, err := db.Exec(`CREATE DOMAIN ` + schema + `.tok AS bigint;
		CREATE TABLE ` + schema + `.t (id int, tenant bigint NOT NULL, region text NOT NULL, maybe bigint, day date NOT NULL, f float8 NOT NULL, fencing_token bigint);
		CREATE TABLE ` + schema + `.nocol (id int);
		CREATE TABLE ` + schema + `.domained (id int, fencing_token ` + schema + `.tok)`)
	require.NoError(t, err)
	for _, tc := range []struct {
		table, lock, policy, columns, code string
	}{
		{"t", "1", "lenient", "{}", "22023"},
		{"t", "billing.invoice", "strict", "{}", "22023"},  // a plain lock is an ID
		{"t", "Not A Name", "strict", "{tenant}", "22023"}, // a parameterized lock is a name
		{"nocol", "1", "strict", "{}", "42804"},
		{"domained", "1", "strict", "{}", "42804"},
		{"t", "billing.invoice", "strict", "{nosuch}", "42703"},
		{"t", "billing.invoice", "strict", "{day}", "42804"},
		{"t", "billing.invoice", "strict", "{f}", "42804"},
		{"t", "billing.invoice", "strict", "{maybe}", "23502"},
	} {
		_, err := db.Exec(`SELECT pgadvisory.fence_register($1, $2, $3, $4)`, schema+"."+tc.table, tc.lock, tc.policy, tc.columns)
		sqlstate.Require(t, err, tc.code, "%+v", tc)
	}
	_, err = db.Exec(`SELECT pgadvisory.fence_register($1, 'billing.invoice', 'strict', '{tenant,region}')`, schema+".t")
	require.NoError(t, err, "the control: bigint and text NOT NULL")
}

// fence_check_statement, in a write of a plain lock's table that carries a
// token, finds the table's listing in the lock's fence row, which it reads
// FOR SHARE anyway (fenced_strict, fenced_permissive: pgadvisory.fenced_table's
// copy, kept in step by a trigger on fenced_table, whoever writes it). A
// table with the triggers of a listed table's lock, written with that
// lock's current token, works only while fenced_table lists it with that
// lock and policy: not before it is listed, not listed with another policy
// or lock, not after it is unlisted or fenced_table is emptied. The table's
// owner is an application role.
func TestFencedTableListingStatementTrigger(t *testing.T) {
	db := migrated.UpTo(t, 1<<30) // a database of its own: this test empties fenced_table
	role := fencing.AppRole(t, db)
	schema := "fsch"
	_, err := db.Exec(`CREATE SCHEMA ` + schema)
	require.NoError(t, err)
	lock, otherLock := testdb.Key(t), testdb.Key(t)
	listed := fencing.Table(t, db, schema, "listed", lock, "strict")
	other := schema + ".other"
	_, err = db.Exec(`CREATE TABLE ` + other + ` (id int PRIMARY KEY, balance int NOT NULL);
		INSERT INTO ` + other + ` VALUES (1, 0)`)
	require.NoError(t, err)
	args := fmt.Sprintf("'%d', 'strict'", lock)
	fenceTriggersByHand(t, db, other, args)
	_, err = db.Exec(`ALTER TABLE ` + other + ` OWNER TO ` + role)
	require.NoError(t, err)
	var token sql.NullInt64
	require.NoError(t, db.QueryRow(`SELECT token FROM pgadvisory.fence WHERE lock_id = $1`, lock).Scan(&token))
	require.False(t, token.Valid, "a listed lock's fence row exists before its first publish, with no token")
	tok := fencing.Publish(t, db, lock)
	update := func(table string) error { return fencing.Write(db, tok, `UPDATE `+table+` SET balance = balance + 1`) }
	register := func(lock int64, policy string) {
		t.Helper()
		_, err := db.Exec(`SELECT pgadvisory.fence_register($1, $2, $3, '{}')`, other, fmt.Sprint(lock), policy)
		require.NoError(t, err)
	}

	require.NoError(t, update(listed), "the control: a listed table")
	sqlstate.Require(t, update(other), "42501", "not listed, its lock's current token")
	register(lock, "permissive")
	sqlstate.Require(t, update(other), "42501", "listed with another policy")
	register(otherLock, "strict")
	sqlstate.Require(t, update(other), "42501", "listed with another lock")
	register(lock, "strict")
	require.NoError(t, update(other), "listed with its triggers' lock and policy")
	_, err = db.Exec(`SELECT pgadvisory.fence_unregister($1)`, other)
	require.NoError(t, err)
	sqlstate.Require(t, update(other), "42501", "unlisted again")
	register(lock, "strict")
	require.NoError(t, update(other), "listed again")
	_, err = db.Exec(`TRUNCATE pgadvisory.fenced_table`)
	require.NoError(t, err)
	sqlstate.Require(t, update(other), "42501", "fenced_table emptied")
	sqlstate.Require(t, update(listed), "42501", "fenced_table emptied")
}

// A database migrated from before 00008 gets the copy of its fenced tables'
// listing in the fence rows: the tables that 00008 lists (fenced by hand,
// as lockgen fence's earlier migrations did, token published before the
// migration) are in their lock's fence row.
func TestFenceRowListsTablesFencedBeforeMigrating(t *testing.T) {
	db := migrated.UpTo(t, 7)
	lock := testdb.Key(t)
	table := "fsch.accounts"
	_, err := db.Exec(`CREATE SCHEMA fsch; CREATE TABLE ` + table + ` (id int PRIMARY KEY, balance int NOT NULL)`)
	require.NoError(t, err)
	fenceByHand(t, db, table, fmt.Sprintf("'%d', 'strict'", lock))
	tok := publish(t, db, lock)
	require.NoError(t, pgadvisory.Migrate(testdb.Context(t), db))
	var listed bool
	require.NoError(t, db.QueryRow(`SELECT $2::regclass::oid = ANY (fenced_strict) FROM pgadvisory.fence WHERE lock_id = $1`, lock, table).Scan(&listed))
	require.True(t, listed, "the fence row lists the table")
	require.NoError(t, fencing.Write(db, tok, `INSERT INTO `+table+` (id, balance) VALUES (1, 0)`))
}
