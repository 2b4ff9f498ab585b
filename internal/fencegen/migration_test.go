package fencegen_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/decl"
	"github.com/lockgen/lockgen/internal/fencegen"
	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/keyspace"
	"github.com/lockgen/lockgen/pgadvisory"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// The migration tests apply generated migrations with goose to tables in a
// private schema, with the version table in that schema too, and drive
// them the way the runtime writes: tokens published by fenced calls
// (internal/testkit/fencing), the token in the transaction-local setting.

// TestGeneratedMigrationsUpDownUp generates the migrations for a plain lock
// (pinned, on a table named with a reserved word) and a parameterized one,
// applies them with goose, checks that they fence, takes them down, checks
// that writes are no longer fenced (the control), and applies them again.
func TestGeneratedMigrationsUpDownUp(t *testing.T) {
	ctx := context.Background()
	db := testdb.DB(t)
	require.NoError(t, pgadvisory.Migrate(ctx, db))
	schema := testdb.Schema(t)
	order := schema + `."order"`
	invoice := schema + ".invoice"
	_, err := db.Exec(`CREATE TABLE ` + order + ` (id int PRIMARY KEY, total int NOT NULL);
		CREATE TABLE ` + invoice + ` (id int PRIMARY KEY, tenant_id bigint NOT NULL, region text NOT NULL, amount int NOT NULL)`)
	require.NoError(t, err)

	// A pin gives the plain lock a key unique to this test.
	pin := testdb.Key(t)
	plain := checkedLock(t, fmt.Sprintf("  - name: orders.close\n    id: %d\n    fencing: true\n", pin), "orders.close")
	param := checkedLock(t, "  - name: billing.invoice\n    fencing: true\n    params:\n      - {name: tenant_id, type: int64}\n      - {name: region, type: string}\n", "billing.invoice")

	dir := t.TempDir()
	p1, err := fencegen.Generate(fencegen.Request{Lock: plain, Table: schema + ".order", Policy: "strict", Dir: dir})
	require.NoError(t, err)
	p2, err := fencegen.Generate(fencegen.Request{Lock: param, Table: schema + ".invoice", Columns: "tenant_id,region", Policy: "strict", Dir: dir})
	require.NoError(t, err)
	t.Logf("generated %s and %s", p1, p2)

	p := provider(t, db, dir, schema)
	up := func() {
		res, err := p.Up(ctx)
		require.NoError(t, err)
		require.Len(t, res, 2)
		for _, tbl := range []string{order, invoice} {
			triggers, column := fenceState(t, db, tbl)
			require.Equal(t, currentTriggers, triggers, tbl)
			require.True(t, column, tbl)
		}
	}
	up()

	// Plain lock: the pinned ID is what the triggers check.
	tok := fencing.Publish(t, db, pin)
	require.NoError(t, fencing.Write(db, tok, `INSERT INTO `+order+` (id, total) VALUES (1, 10)`))
	var stamped int64
	require.NoError(t, db.QueryRow(`SELECT fencing_token FROM `+order+` WHERE id = 1`).Scan(&stamped))
	require.Equal(t, tok, stamped)
	newer := fencing.Publish(t, db, pin)
	sqlstate.Require(t, fencing.Write(db, tok, `UPDATE `+order+` SET total = 0`), "LF001")
	sqlstate.Require(t, fencing.Write(db, 0, `INSERT INTO `+order+` (id, total) VALUES (2, 20)`), "LF002")
	sqlstate.Require(t, fencing.Write(db, 0, `UPDATE `+order+` SET total = 0`), "LF002")
	sqlstate.Require(t, fencing.Write(db, 0, `TRUNCATE `+order), "LF002")
	require.NoError(t, fencing.Write(db, newer, `UPDATE `+order+` SET total = 11`))

	// Parameterized lock: the row's tenant and region pick the lock.
	tenant := testdb.Key(t)
	lock := keyspace.ParamID("billing.invoice", keyspace.Int64Param(tenant), keyspace.StringParam("eu-west"))
	other := keyspace.ParamID("billing.invoice", keyspace.Int64Param(tenant), keyspace.StringParam("us-east"))
	itok, otok := fencing.Publish(t, db, lock), fencing.Publish(t, db, other)
	ins := func(id int, region string) string {
		return fmt.Sprintf(`INSERT INTO %s (id, tenant_id, region, amount) VALUES (%d, %d, '%s', 1)`, invoice, id, tenant, region)
	}
	require.NoError(t, fencing.Write(db, itok, ins(1, "eu-west")))
	require.NoError(t, fencing.Write(db, otok, ins(2, "us-east")))
	sqlstate.Require(t, fencing.Write(db, otok, ins(3, "eu-west")), "LF001")
	sqlstate.Require(t, fencing.Write(db, 0, ins(3, "eu-west")), "LF002")
	sqlstate.Require(t, fencing.Write(db, itok, `TRUNCATE `+invoice), "LF003")

	// Down removes the triggers and the column: the same writes pass.
	res, err := p.DownTo(ctx, 0)
	require.NoError(t, err)
	require.Len(t, res, 2)
	for _, tbl := range []string{order, invoice} {
		triggers, column := fenceState(t, db, tbl)
		require.Empty(t, triggers, tbl)
		require.False(t, column, tbl)
	}
	require.NoError(t, fencing.Write(db, 0, `INSERT INTO `+order+` (id, total) VALUES (2, 20)`))
	require.NoError(t, fencing.Write(db, otok, ins(3, "eu-west")))

	// And Up again.
	up()
	sqlstate.Require(t, fencing.Write(db, 0, `INSERT INTO `+order+` (id, total) VALUES (3, 30)`), "LF002")
	sqlstate.Require(t, fencing.Write(db, otok, ins(4, "eu-west")), "LF001")
	require.NoError(t, fencing.Write(db, itok, ins(4, "eu-west")))

	// lockgen's 00006 cannot go down while a table uses its triggers (the
	// failed Down rolls back as a whole).
	lockgenGoose, err := goose.NewProvider(goose.DialectPostgres, db, migrationsFS(),
		goose.WithTableName(pgadvisory.MigrationTable), goose.WithDisableGlobalRegistry(true), goose.WithLogger(goose.NopLogger()))
	require.NoError(t, err)
	_, err = lockgenGoose.DownTo(ctx, 1)
	require.Error(t, err)
	require.Contains(t, err.Error(), "version:6")
	require.Equal(t, "2BP01", sqlstateOf(err), "dependent objects still exist")
	require.NoError(t, pgadvisory.Migrate(ctx, db))
	require.NoError(t, fencing.Write(db, itok, ins(5, "eu-west")), "the failed Down changed nothing of 00006")
}

// TestGeneratedMigrationPermissive: without a token, writes pass, stamped
// NULL; a token, when carried, is checked.
func TestGeneratedMigrationPermissive(t *testing.T) {
	ctx := context.Background()
	db := testdb.DB(t)
	require.NoError(t, pgadvisory.Migrate(ctx, db))
	schema := testdb.Schema(t)
	table := schema + ".entries"
	_, err := db.Exec(`CREATE TABLE ` + table + ` (id int PRIMARY KEY)`)
	require.NoError(t, err)
	pin := testdb.Key(t)
	l := checkedLock(t, fmt.Sprintf("  - name: ledger.post\n    id: %d\n", pin), "ledger.post")
	dir := t.TempDir()
	_, err = fencegen.Generate(fencegen.Request{Lock: l, Table: table, Policy: "permissive", Dir: dir})
	require.NoError(t, err)
	_, err = provider(t, db, dir, schema).Up(ctx)
	require.NoError(t, err)

	tok := fencing.Publish(t, db, pin)
	require.NoError(t, fencing.Write(db, tok, `INSERT INTO `+table+` VALUES (9)`))
	require.NoError(t, fencing.Write(db, 0, `INSERT INTO `+table+` VALUES (1)`, `UPDATE `+table+` SET id = 10 WHERE id = 9`))
	var nulls int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM `+table+` WHERE fencing_token IS NULL`).Scan(&nulls))
	require.Equal(t, 2, nulls)
	require.NoError(t, fencing.Write(db, 0, `DELETE FROM `+table, `TRUNCATE `+table))
	sqlstate.Require(t, fencing.Write(db, tok+1, `INSERT INTO `+table+` VALUES (2)`), "LF001")
	require.NoError(t, fencing.Write(db, tok, `INSERT INTO `+table+` VALUES (2)`))
}

// TestGeneratedMigrationNeedsLockgenSchema: applied to a database without
// lockgen's schema, the migration fails with a message that says what to
// do, not with a raw 3F000 from a CREATE TRIGGER.
func TestGeneratedMigrationNeedsLockgenSchema(t *testing.T) {
	ctx := context.Background()
	_, url := testdb.EmptyDatabase(t)
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec(`CREATE SCHEMA app; CREATE TABLE app.entries (id int PRIMARY KEY)`)
	require.NoError(t, err)
	dir := t.TempDir()
	_, err = fencegen.Generate(fencegen.Request{Lock: declared(t, "ledger.post"), Table: "app.entries", Policy: "strict", Dir: dir})
	require.NoError(t, err)
	_, err = provider(t, db, dir, "app").Up(ctx)
	require.Error(t, err)
	require.Contains(t, err.Error(), "lockgen fence: lockgen's schema (pgadvisory, migration 00008 or later) is missing: run pgadvisory.Migrate (or lockgen's migrations) first")
	require.Equal(t, "42883", sqlstateOf(err))
	var columns int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM pg_attribute WHERE attrelid = 'app.entries'::regclass AND attname = 'fencing_token'`).Scan(&columns))
	require.Zero(t, columns, "nothing applied")

	// Control: after lockgen's migrations the same migration applies.
	require.NoError(t, pgadvisory.Migrate(ctx, db))
	_, err = provider(t, db, dir, "app").Up(ctx)
	require.NoError(t, err)
}

// TestUpgradeMigration: a table fenced by a migration of the first layout
// (testdata/legacy, as lockgen fence wrote it before) moves to the current
// layout with the -upgrade migration; its Down goes back to the first
// layout, and Up again.
func TestUpgradeMigration(t *testing.T) {
	ctx := context.Background()
	db := testdb.DB(t)
	require.NoError(t, pgadvisory.Migrate(ctx, db))
	schema := testdb.Schema(t)
	_, err := db.Exec(`CREATE TABLE ` + schema + `.invoice (id int PRIMARY KEY, tenant_id bigint NOT NULL, amount int NOT NULL)`)
	require.NoError(t, err)
	legacy, err := os.ReadFile("testdata/legacy/param.sql")
	require.NoError(t, err)
	legacy = []byte(replaceAll(string(legacy), `"billing"."invoice"`, `"`+schema+`"."invoice"`, "-table billing.invoice", "-table "+schema+".invoice"))
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "00001_fence_invoice.sql"), legacy, 0o644))
	p := provider(t, db, dir, schema)
	_, err = p.Up(ctx)
	require.NoError(t, err)
	table := schema + ".invoice"
	triggers, _ := fenceState(t, db, table)
	require.Equal(t, []string{fencegen.RowTrigger, fencegen.TruncateTrigger}, triggers, "the first layout")

	path, err := fencegen.Generate(fencegen.Request{Lock: declared(t, "billing.invoice"), Table: table, Columns: "tenant_id", Policy: "strict", Dir: dir, Upgrade: true})
	require.NoError(t, err)
	require.Equal(t, "00002_fence_invoice_upgrade.sql", filepath.Base(path))
	p = provider(t, db, dir, schema)
	tenant := testdb.Key(t)
	lock := keyspace.ParamID("billing.invoice", keyspace.Int64Param(tenant))
	tok := fencing.Publish(t, db, lock)
	insert := fmt.Sprintf(`INSERT INTO %s (id, tenant_id, amount) VALUES (1, %d, 1)`, table, tenant)
	tokenless := `UPDATE ` + table + ` SET amount = 2 WHERE id = 1`
	// lockgen's migration 00008 lists the tables fenced before it; a fence
	// migration written before fence_register existed, applied to a
	// database that already has 00008, lists nothing: its table refuses
	// every write until it is listed (docs/fencing.md, the upgrade path).
	sqlstate.Require(t, fencing.Write(db, tok, insert), "42501")
	_, err = db.Exec(`SELECT pgadvisory.fence_register($1, 'billing.invoice', 'strict', '{tenant_id}')`, table)
	require.NoError(t, err)
	require.NoError(t, fencing.Write(db, tok, insert))

	upgraded := func() {
		_, err := p.Up(ctx)
		require.NoError(t, err)
		triggers, column := fenceState(t, db, table)
		require.Equal(t, currentTriggers, triggers)
		require.True(t, column)
		sqlstate.Require(t, fencing.Write(db, 0, tokenless), "LF002")
		require.NoError(t, fencing.Write(db, tok, tokenless))
		sqlstate.Require(t, fencing.Write(db, 0, `INSERT INTO `+table+` (id, tenant_id, amount) VALUES (2, 1, 1)`), "LF002")
	}
	upgraded()
	// The row's stamp is still there; the column's default stamps inserts.
	var stamp int64
	require.NoError(t, db.QueryRow(`SELECT fencing_token FROM `+table+` WHERE id = 1`).Scan(&stamp))
	require.Equal(t, tok, stamp)

	_, err = p.DownTo(ctx, 1)
	require.NoError(t, err)
	triggers, column := fenceState(t, db, table)
	require.Equal(t, []string{fencegen.RowTrigger, fencegen.TruncateTrigger}, triggers, "back to the first layout")
	require.True(t, column)
	var def sql.NullString
	require.NoError(t, db.QueryRow(`SELECT (SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
		WHERE d.adrelid = $1::regclass AND a.attname = 'fencing_token')`, table).Scan(&def))
	require.False(t, def.Valid, "no default left")
	upgraded()
}

// currentTriggers are the triggers of the current layout, by name.
var currentTriggers = []string{fencegen.RowTrigger, fencegen.DeleteTrigger, fencegen.InsertTrigger, fencegen.TruncateTrigger, fencegen.UpdateTrigger}

// checkedLock declares one lock from yaml and returns it checked.
func checkedLock(t *testing.T, yaml, name string) *decl.Lock {
	t.Helper()
	loaded, err := decl.LoadBytes("locks.yaml", []byte("version: \"1\"\npackage: locks\nlocks:\n"+yaml), nil)
	require.NoError(t, err)
	l := loaded.File.Lookup(name)
	require.NotNil(t, l)
	return l
}

// provider is a goose provider over the migrations in dir, recording them
// in schema.goose_db_version.
func provider(t *testing.T, db *sql.DB, dir, schema string) *goose.Provider {
	t.Helper()
	p, err := goose.NewProvider(goose.DialectPostgres, db, os.DirFS(dir),
		goose.WithTableName(schema+".goose_db_version"),
		goose.WithDisableGlobalRegistry(true),
		goose.WithLogger(goose.NopLogger()))
	require.NoError(t, err)
	return p
}

func sqlstateOf(err error) string { return pgadvisory.SQLState(err) }

// fenceState is what the migration adds: the triggers and the column.
func fenceState(t *testing.T, db *sql.DB, table string) (triggers []string, column bool) {
	t.Helper()
	rows, err := db.Query(`SELECT tgname FROM pg_trigger WHERE tgrelid = $1::regclass AND NOT tgisinternal ORDER BY tgname`, table)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		triggers = append(triggers, n)
	}
	require.NoError(t, rows.Err())
	require.NoError(t, db.QueryRow(`SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = $1::regclass
		AND attname = 'fencing_token' AND NOT attisdropped)`, table).Scan(&column))
	return triggers, column
}

// replaceAll applies old, new pairs to s in order.
func replaceAll(s string, oldNew ...string) string {
	for i := 0; i+1 < len(oldNew); i += 2 {
		s = strings.ReplaceAll(s, oldNew[i], oldNew[i+1])
	}
	return s
}
