package fencegen_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/decl"
	"github.com/lockgen/lockgen/internal/fencegen"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/keyspace"
	"github.com/lockgen/lockgen/pgadvisory"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// The migration tests apply generated migrations with goose to tables in a
// private schema, with the version table in that schema too, and drive
// them with raw SQL the way the runtime writes: a published token in
// pgadvisory.fence, the token in the transaction-local setting.

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

func exec(db *sql.DB, token int64, stmts ...string) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if token != 0 {
		if _, err := tx.Exec(`SELECT set_config('pgadvisory.fencing_token', $1, true)`, fmt.Sprint(token)); err != nil {
			return err
		}
	}
	for _, s := range stmts {
		if _, err := tx.Exec(s); err != nil {
			return err
		}
	}
	return tx.Commit()
}

func sqlstate(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

func publish(t *testing.T, db *sql.DB, lock int64) int64 {
	t.Helper()
	var tok int64
	require.NoError(t, db.QueryRow(`INSERT INTO pgadvisory.fence AS f (lock_id, token)
		VALUES ($1, nextval('pgadvisory.fencing_token_seq'))
		ON CONFLICT (lock_id) DO UPDATE SET token = excluded.token, published_at = now()
		WHERE f.token < excluded.token RETURNING token`, lock).Scan(&tok))
	return tok
}

// fenceState is what the migration adds: the two triggers and the column.
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
			require.Equal(t, []string{fencegen.RowTrigger, fencegen.TruncateTrigger}, triggers, tbl)
			require.True(t, column, tbl)
		}
	}
	up()

	// Plain lock: the pinned ID is what the trigger checks.
	tok := publish(t, db, pin)
	require.NoError(t, exec(db, tok, `INSERT INTO `+order+` (id, total) VALUES (1, 10)`))
	var stamped int64
	require.NoError(t, db.QueryRow(`SELECT fencing_token FROM `+order+` WHERE id = 1`).Scan(&stamped))
	require.Equal(t, tok, stamped)
	newer := publish(t, db, pin)
	require.Equal(t, "LF001", sqlstate(exec(db, tok, `UPDATE `+order+` SET total = 0`)))
	require.Equal(t, "LF002", sqlstate(exec(db, 0, `INSERT INTO `+order+` (id, total) VALUES (2, 20)`)))
	require.Equal(t, "LF002", sqlstate(exec(db, 0, `TRUNCATE `+order)))
	require.NoError(t, exec(db, newer, `UPDATE `+order+` SET total = 11`))

	// Parameterized lock: the row's tenant and region pick the lock.
	tenant := testdb.Key(t)
	lock := keyspace.ParamID("billing.invoice", keyspace.Int64Param(tenant), keyspace.StringParam("eu-west"))
	other := keyspace.ParamID("billing.invoice", keyspace.Int64Param(tenant), keyspace.StringParam("us-east"))
	itok, otok := publish(t, db, lock), publish(t, db, other)
	ins := func(id int, region string) string {
		return fmt.Sprintf(`INSERT INTO %s (id, tenant_id, region, amount) VALUES (%d, %d, '%s', 1)`, invoice, id, tenant, region)
	}
	require.NoError(t, exec(db, itok, ins(1, "eu-west")))
	require.NoError(t, exec(db, otok, ins(2, "us-east")))
	require.Equal(t, "LF001", sqlstate(exec(db, otok, ins(3, "eu-west"))))
	require.Equal(t, "LF002", sqlstate(exec(db, 0, ins(3, "eu-west"))))
	require.Equal(t, "LF003", sqlstate(exec(db, itok, `TRUNCATE `+invoice)))

	// Down removes the triggers and the column: the same writes pass.
	res, err := p.DownTo(ctx, 0)
	require.NoError(t, err)
	require.Len(t, res, 2)
	for _, tbl := range []string{order, invoice} {
		triggers, column := fenceState(t, db, tbl)
		require.Empty(t, triggers, tbl)
		require.False(t, column, tbl)
	}
	require.NoError(t, exec(db, 0, `INSERT INTO `+order+` (id, total) VALUES (2, 20)`))
	require.NoError(t, exec(db, otok, ins(3, "eu-west")))

	// And Up again.
	up()
	require.Equal(t, "LF002", sqlstate(exec(db, 0, `INSERT INTO `+order+` (id, total) VALUES (3, 30)`)))
	require.Equal(t, "LF001", sqlstate(exec(db, otok, ins(4, "eu-west"))))
	require.NoError(t, exec(db, itok, ins(4, "eu-west")))

	// lockgen's 00002 cannot go down while a table uses its triggers (later
	// migrations go down first and are re-applied after).
	lockgenGoose, err := goose.NewProvider(goose.DialectPostgres, db, migrationsFS(),
		goose.WithTableName(pgadvisory.MigrationTable), goose.WithDisableGlobalRegistry(true), goose.WithLogger(goose.NopLogger()))
	require.NoError(t, err)
	_, err = lockgenGoose.DownTo(ctx, 1)
	require.Error(t, err)
	require.Contains(t, err.Error(), "version:2")
	require.Equal(t, "2BP01", sqlstate(err), "dependent objects still exist")
	require.NoError(t, pgadvisory.Migrate(ctx, db))
	require.NoError(t, exec(db, itok, ins(5, "eu-west")), "the failed Down changed nothing of 00002")
}

// TestGeneratedMigrationPermissive: without a token, writes pass untouched.
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

	require.NoError(t, exec(db, 0, `INSERT INTO `+table+` VALUES (1)`, `DELETE FROM `+table, `TRUNCATE `+table))
	tok := publish(t, db, pin)
	require.Equal(t, "LF001", sqlstate(exec(db, tok+1, `INSERT INTO `+table+` VALUES (2)`)))
	require.NoError(t, exec(db, tok, `INSERT INTO `+table+` VALUES (2)`))
}
