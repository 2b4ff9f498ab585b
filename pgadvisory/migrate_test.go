package pgadvisory_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/keyspace"
	"github.com/lockgen/lockgen/migrations"
	"github.com/lockgen/lockgen/pgadvisory"
)

// The migration tests change the package database's pgadvisory schema, so
// none of them runs in parallel; each starts from a database without it.

// freshMigrationState removes everything the migrations and their version
// table left in the package database.
func freshMigrationState(t *testing.T, db *sql.DB) {
	t.Helper()
	_, err := db.Exec(`DROP SCHEMA IF EXISTS pgadvisory CASCADE; DROP TABLE IF EXISTS ` + pgadvisory.MigrationTable)
	require.NoError(t, err)
}

// migrationRow is one row of the version table.
type migrationRow struct {
	ID      int64
	Version int64
	Applied bool
	At      time.Time
}

// migrationState is what a no-op Migrate must leave unchanged: the version
// table's rows and the identity (OID) of the functions.
type migrationState struct {
	Rows         []migrationRow
	LockIDOID    uint32
	ValidNameOID uint32
}

func readMigrationState(t *testing.T, db *sql.DB) migrationState {
	t.Helper()
	var s migrationState
	rows, err := db.Query(`SELECT id, version_id, is_applied, tstamp FROM ` + pgadvisory.MigrationTable + ` ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var r migrationRow
		require.NoError(t, rows.Scan(&r.ID, &r.Version, &r.Applied, &r.At))
		s.Rows = append(s.Rows, r)
	}
	require.NoError(t, rows.Err())
	require.NoError(t, db.QueryRow(`SELECT 'pgadvisory.lock_id(text,text[])'::regprocedure::oid,
		'pgadvisory.valid_lock_name(text)'::regprocedure::oid`).Scan(&s.LockIDOID, &s.ValidNameOID))
	return s
}

// appliedVersions counts version rows per version_id.
func appliedVersions(t *testing.T, db *sql.DB) map[int64]int {
	t.Helper()
	rows, err := db.Query(`SELECT version_id, count(*) FROM ` + pgadvisory.MigrationTable + ` WHERE is_applied GROUP BY version_id`)
	require.NoError(t, err)
	defer rows.Close()
	got := map[int64]int{}
	for rows.Next() {
		var v int64
		var n int
		require.NoError(t, rows.Scan(&v, &n))
		got[v] = n
	}
	require.NoError(t, rows.Err())
	return got
}

func schemaExists(t *testing.T, db *sql.DB) bool {
	t.Helper()
	var ok bool
	require.NoError(t, db.QueryRow(`SELECT to_regnamespace('pgadvisory') IS NOT NULL`).Scan(&ok))
	return ok
}

// requireMigrated checks that the schema is there, lock_id computes the
// issue's example, and every migration is applied once.
func requireMigrated(t *testing.T, db *sql.DB) {
	t.Helper()
	var id int64
	require.NoError(t, db.QueryRow(`SELECT pgadvisory.lock_id('reports.daily_email')`).Scan(&id))
	require.Equal(t, int64(-6078806957557529815), id)
	require.Equal(t, map[int64]int{0: 1, 1: 1, 2: 1, 3: 1}, appliedVersions(t, db))
}

// gooseProvider drives the same migrations the way README shows.
func gooseProvider(t *testing.T, db *sql.DB) *goose.Provider {
	t.Helper()
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithTableName(pgadvisory.MigrationTable),
		goose.WithDisableGlobalRegistry(true),
		goose.WithLogger(goose.NopLogger()),
	)
	require.NoError(t, err)
	return p
}

func TestMigrateIsIdempotent(t *testing.T) {
	ctx := context.Background()
	db := testdb.DB(t)
	freshMigrationState(t, db)
	require.False(t, schemaExists(t, db))

	require.NoError(t, pgadvisory.Migrate(ctx, db))
	requireMigrated(t, db)
	before := readMigrationState(t, db)

	require.NoError(t, pgadvisory.Migrate(ctx, db))
	require.Equal(t, before, readMigrationState(t, db), "a second Migrate must change nothing")
	requireMigrated(t, db)

	// Migrate records only in lockgen's own table, never in goose's default.
	var gooseDefault bool
	require.NoError(t, db.QueryRow(`SELECT to_regclass('goose_db_version') IS NOT NULL`).Scan(&gooseDefault))
	require.False(t, gooseDefault)
}

func TestMigrateArguments(t *testing.T) {
	err := pgadvisory.Migrate(context.Background(), nil)
	require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument)
	require.True(t, strings.HasPrefix(err.Error(), "pgadvisory: migrate: "), err.Error())

	require.Equal(t, keyspace.ID("lockgen.migrate"), pgadvisory.MigrationLockID)
}

func TestMigrateConcurrent(t *testing.T) {
	ctx := context.Background()
	db := testdb.DB(t)
	freshMigrationState(t, db)

	const migrators = 4
	errs := make([]error, migrators)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range migrators {
		wg.Go(func() {
			<-start
			errs[i] = pgadvisory.Migrate(ctx, db)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "migrator %d", i)
	}
	// Applied exactly once: one row per version (and goose's version 0).
	requireMigrated(t, db)
}

// TestMigrateWaitsForTheMigrationLock is the control for TestMigrateConcurrent:
// Migrate really serializes on MigrationLockID. While another session holds
// it, Migrate applies nothing and gives up when its context ends.
func TestMigrateWaitsForTheMigrationLock(t *testing.T) {
	ctx := context.Background()
	db := testdb.DB(t)
	freshMigrationState(t, db)

	holder, err := db.Conn(ctx)
	require.NoError(t, err)
	defer holder.Close()
	_, err = holder.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, pgadvisory.MigrationLockID)
	require.NoError(t, err)

	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err = pgadvisory.Migrate(short, db)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.True(t, strings.HasPrefix(err.Error(), "pgadvisory: migrate: "), err.Error())
	require.False(t, schemaExists(t, db), "nothing may be applied without the lock")

	_, err = holder.ExecContext(ctx, `SELECT pg_advisory_unlock($1)`, pgadvisory.MigrationLockID)
	require.NoError(t, err)
	require.NoError(t, pgadvisory.Migrate(ctx, db))
	requireMigrated(t, db)
}

func TestMigrateUpDownUp(t *testing.T) {
	ctx := context.Background()
	db := testdb.DB(t)
	freshMigrationState(t, db)

	require.NoError(t, pgadvisory.Migrate(ctx, db))
	first := readMigrationState(t, db)

	p := gooseProvider(t, db)
	res, err := p.DownTo(ctx, 0)
	require.NoError(t, err)
	require.Len(t, res, 3)
	require.Equal(t, int64(3), res[0].Source.Version)
	require.Equal(t, int64(2), res[1].Source.Version)
	require.Equal(t, int64(1), res[2].Source.Version)
	require.False(t, schemaExists(t, db), "Down drops the schema")
	v, err := p.GetDBVersion(ctx)
	require.NoError(t, err)
	require.Zero(t, v)

	require.NoError(t, pgadvisory.Migrate(ctx, db))
	requireMigrated(t, db)
	// The control for TestMigrateIsIdempotent: re-applying is visible in
	// the state that a no-op must leave unchanged.
	require.NotEqual(t, first, readMigrationState(t, db))

	// The goose Provider sees lockgen's table as fully applied.
	pending, err := p.HasPending(ctx)
	require.NoError(t, err)
	require.False(t, pending)
}

// TestMigrateDownKeepsForeignObjects: Down drops the schema without CASCADE,
// so it refuses to destroy objects someone else put there.
func TestMigrateDownKeepsForeignObjects(t *testing.T) {
	ctx := context.Background()
	db := testdb.DB(t)
	freshMigrationState(t, db)
	require.NoError(t, pgadvisory.Migrate(ctx, db))
	_, err := db.Exec(`CREATE TABLE pgadvisory.not_lockgens (id int)`)
	require.NoError(t, err)

	// 00003 and 00002 go down; 00001 fails and its Down rolls back as a whole.
	_, err = gooseProvider(t, db).DownTo(ctx, 0)
	require.Error(t, err)
	require.True(t, schemaExists(t, db))
	require.Equal(t, map[int64]int{0: 1, 1: 1}, appliedVersions(t, db))
	require.NoError(t, pgadvisory.Migrate(ctx, db))
	requireMigrated(t, db)
	var kept bool
	require.NoError(t, db.QueryRow(`SELECT to_regclass('pgadvisory.not_lockgens') IS NOT NULL`).Scan(&kept))
	require.True(t, kept)

	_, err = db.Exec(`DROP TABLE pgadvisory.not_lockgens`)
	require.NoError(t, err)
}

// TestMigrateRefusesTransactionPooler: through PgBouncer in transaction mode
// the session lock would leak, so Migrate refuses before touching anything.
// The control is every other test here, which migrates over a direct
// connection with the same code.
func TestMigrateRefusesTransactionPooler(t *testing.T) {
	db := testdb.DB(t)
	freshMigrationState(t, db)
	url := pgcluster.StartPgBouncer(t, testdb.URL(t), "transaction")
	bounced, err := sql.Open("pgx", url+"&default_query_exec_mode=simple_protocol")
	require.NoError(t, err)
	defer bounced.Close()

	err = pgadvisory.Migrate(context.Background(), bounced)
	require.ErrorIs(t, err, pgadvisory.ErrTransactionPooler)
	require.True(t, strings.HasPrefix(err.Error(), "pgadvisory: migrate: "), err.Error())
	require.False(t, schemaExists(t, db))
	var table bool
	require.NoError(t, db.QueryRow(`SELECT to_regclass($1) IS NOT NULL`, pgadvisory.MigrationTable).Scan(&table))
	require.False(t, table, "not even the version table may be created")
}

// readVectors reads keyspace's published vectors, the same file its Go test
// checks.
func readVectors(t *testing.T) []struct {
	Name   string   `json:"name"`
	Params []string `json:"params"`
	ID     int64    `json:"id"`
} {
	t.Helper()
	raw, err := os.ReadFile("../keyspace/testdata/vectors.json")
	require.NoError(t, err)
	var file struct {
		Vectors []struct {
			Name   string   `json:"name"`
			Params []string `json:"params"`
			ID     int64    `json:"id"`
		} `json:"vectors"`
	}
	require.NoError(t, json.Unmarshal(raw, &file))
	require.GreaterOrEqual(t, len(file.Vectors), 10)
	return file.Vectors
}

// sqlLockID is pgadvisory.lock_id(name, VARIADIC params).
func sqlLockID(t *testing.T, db *sql.DB, name string, params []string) int64 {
	t.Helper()
	if params == nil {
		params = []string{}
	}
	var id int64
	require.NoError(t, db.QueryRow(`SELECT pgadvisory.lock_id($1, VARIADIC $2::text[])`, name, params).Scan(&id),
		"%q %q", name, params)
	return id
}

func TestSQLLockIDMatchesVectors(t *testing.T) {
	db := testdb.DB(t)
	freshMigrationState(t, db)
	require.NoError(t, pgadvisory.Migrate(context.Background(), db))

	for _, v := range readVectors(t) {
		require.Equal(t, v.ID, sqlLockID(t, db, v.Name, v.Params), "%q %q", v.Name, v.Params)
		require.Equal(t, v.ID, keyspace.ParamID(v.Name, v.Params...))
		if len(v.Params) == 0 {
			// The DEFAULT '{}' path: no VARIADIC argument at all.
			var id int64
			require.NoError(t, db.QueryRow(`SELECT pgadvisory.lock_id($1)`, v.Name).Scan(&id))
			require.Equal(t, v.ID, id)
		}
	}

	// The issue's examples, written as a person would in psql.
	var daily, invoice int64
	require.NoError(t, db.QueryRow(`SELECT pgadvisory.lock_id('reports.daily_email'),
		pgadvisory.lock_id('billing.invoice', '42')`).Scan(&daily, &invoice))
	require.Equal(t, int64(-6078806957557529815), daily)
	require.Equal(t, keyspace.ParamID("billing.invoice", keyspace.Int64Param(42)), invoice)
}

// TestSQLLockIDMatchesGoRandom holds the SQL twin to Go on random tuples of
// valid names and canonical int64, uuid, bool and Unicode string parameters.
func TestSQLLockIDMatchesGoRandom(t *testing.T) {
	db := testdb.DB(t)
	freshMigrationState(t, db)
	require.NoError(t, pgadvisory.Migrate(context.Background(), db))

	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 2))
	for range 300 {
		name := randomName(r)
		require.NoError(t, keyspace.ValidateName(name))
		params := make([]string, r.IntN(5))
		for i := range params {
			params[i] = randomParam(r)
		}
		require.Equal(t, keyspace.ParamID(name, params...), sqlLockID(t, db, name, params), "%q %q", name, params)
	}
}

// TestSQLLockIDCheckerDetectsMismatch is the control for the two tests above:
// the comparison fails for a tuple in the wrong order or a parameter glued to
// the name.
func TestSQLLockIDCheckerDetectsMismatch(t *testing.T) {
	db := testdb.DB(t)
	freshMigrationState(t, db)
	require.NoError(t, pgadvisory.Migrate(context.Background(), db))

	goID := keyspace.ParamID("exports.customer", "acme", "2026-12-02")
	require.NotEqual(t, goID, sqlLockID(t, db, "exports.customer", []string{"2026-12-02", "acme"}))
	require.NotEqual(t, goID, sqlLockID(t, db, "exports.customeracme", []string{"2026-12-02"}))
	require.NotEqual(t, keyspace.ID("a"), sqlLockID(t, db, "a", []string{""}))
}

// TestSQLLockIDNulls: a NULL name or parameter gives NULL, never an ID that
// equals another tuple's (string_agg would silently skip NULL elements).
func TestSQLLockIDNulls(t *testing.T) {
	db := testdb.DB(t)
	freshMigrationState(t, db)
	require.NoError(t, pgadvisory.Migrate(context.Background(), db))

	for _, q := range []string{
		`SELECT pgadvisory.lock_id(NULL)`,
		`SELECT pgadvisory.lock_id(NULL, 'x')`,
		`SELECT pgadvisory.lock_id('a', NULL)`,
		`SELECT pgadvisory.lock_id('a', 'x', NULL)`,
		`SELECT pgadvisory.lock_id('a', NULL, 'x')`,
		`SELECT pgadvisory.lock_id('a', VARIADIC NULL::text[])`,
		`SELECT pgadvisory.lock_id('a', VARIADIC '{{x,y},{z,w}}'::text[])`,
	} {
		var id sql.NullInt64
		require.NoError(t, db.QueryRow(q).Scan(&id), q)
		require.False(t, id.Valid, "%s gave %d", q, id.Int64)
	}
	// Control: the same shapes without NULL do give IDs.
	var id sql.NullInt64
	require.NoError(t, db.QueryRow(`SELECT pgadvisory.lock_id('a', '', 'x')`).Scan(&id))
	require.True(t, id.Valid)
	require.Equal(t, keyspace.ParamID("a", "", "x"), id.Int64)
}

func TestSQLValidLockNameMatchesGo(t *testing.T) {
	db := testdb.DB(t)
	freshMigrationState(t, db)
	require.NoError(t, pgadvisory.Migrate(context.Background(), db))

	names := []string{
		"a", "reports.daily_email", "billing.invoice", "a1_b.c2.d_", strings.Repeat("a", 128),
		"", strings.Repeat("a", 129), ".a", "a..b", "a.", "1a", "_a", "a.1b", "Abc", "billing.Invoice",
		"a-b", "a b", "a\n", "a\nb", "grüße", "é", "a.b/c", "a\\.b", "a.b$", "^a", "a|b", "a*", "ａ",
		"\u212a", // KELVIN SIGN, which some case-insensitive matchers fold to k
	}
	r := rand.New(rand.NewPCG(rand.Uint64(), 3))
	for range 200 {
		name := randomName(r)
		if r.IntN(2) == 0 { // damage it at a random place
			b := []rune(name)
			b[r.IntN(len(b))] = []rune("A._-9 é\nZ")[r.IntN(9)]
			name = string(b)
		}
		names = append(names, name)
	}
	valid := 0
	for _, name := range names {
		var got bool
		require.NoError(t, db.QueryRow(`SELECT pgadvisory.valid_lock_name($1)`, name).Scan(&got), "%q", name)
		want := keyspace.ValidateName(name) == nil
		require.Equal(t, want, got, "%q", name)
		if want {
			valid++
		}
	}
	// Both outcomes were exercised.
	require.Greater(t, valid, 20)
	require.Greater(t, len(names)-valid, 20)
}

const (
	nameStart = "abcdefghijklmnopqrstuvwxyz"
	nameRest  = "abcdefghijklmnopqrstuvwxyz0123456789_"
)

// randomName returns a valid lock name of one to four segments.
func randomName(r *rand.Rand) string {
	var b strings.Builder
	for s := range 1 + r.IntN(4) {
		if s > 0 {
			b.WriteByte('.')
		}
		b.WriteByte(nameStart[r.IntN(len(nameStart))])
		for range r.IntN(12) {
			b.WriteByte(nameRest[r.IntN(len(nameRest))])
		}
	}
	return b.String()
}

// randomParam returns the canonical text of a random int64, uuid, bool or
// Unicode string (valid UTF-8 without NUL, as SQL text requires).
func randomParam(r *rand.Rand) string {
	switch r.IntN(4) {
	case 0:
		switch r.IntN(4) {
		case 0:
			return keyspace.Int64Param(-1 << 63)
		case 1:
			return keyspace.Int64Param(r.Int64N(1000) - 500)
		}
		return keyspace.Int64Param(int64(r.Uint64()))
	case 1:
		var u [16]byte
		for i := range u {
			u[i] = byte(r.UintN(256))
		}
		return keyspace.UUIDParam(u)
	case 2:
		return keyspace.BoolParam(r.IntN(2) == 0)
	}
	pieces := []string{"", "a", "Z", " ", "-", "'", `"`, "\\", "\n", "\t", "\x01", "\x7f", "é", "ü", "ß",
		"世界", "😀", "\u00a0", "\u200b", "\ufeff", "Ω", "\U0010FFFF", "{", "}", ",", "NULL"}
	var b strings.Builder
	for range r.IntN(8) {
		b.WriteString(pieces[r.IntN(len(pieces))])
	}
	s := b.String()
	if c, err := keyspace.Canonical(keyspace.String, s); err != nil || c != s {
		panic(fmt.Sprintf("randomParam: %q is not a canonical string", s))
	}
	return s
}

// ExampleMigrate applies lockgen's migrations at start-up; every replica may
// call it at once.
func ExampleMigrate() {
	ctx := context.Background()
	db := exampleDB() // sql.Open("pgx", url) on the URL in LOCKGEN_DATABASE_URL
	defer db.Close()
	if err := pgadvisory.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	var id int64
	if err := db.QueryRowContext(ctx, `SELECT pgadvisory.lock_id('billing.invoice', $1)`, keyspace.Int64Param(42)).Scan(&id); err != nil {
		log.Fatal(err)
	}
	fmt.Println(id == keyspace.ParamID("billing.invoice", keyspace.Int64Param(42)))
	// Output: true
}

// ExampleMigrate_pgx: pgx users wrap their pool in a *sql.DB for Migrate.
func ExampleMigrate_pgx() {
	ctx := context.Background()
	pool := examplePool() // pgxpool.New(ctx, url)
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	if err := pgadvisory.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	fmt.Println("migrated")
	// Output: migrated
}
