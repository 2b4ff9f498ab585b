package pgadvisory_test

import (
	"context"
	"database/sql"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

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
	all := embeddedVersions(t)
	require.Len(t, res, len(all))
	for i, r := range res { // newest first
		require.Equal(t, all[len(all)-1-i], r.Source.Version)
	}
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

	// Every migration after 00001 goes down; 00001 fails and its Down rolls
	// back as a whole.
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
	want := map[int64]int{0: 1} // goose's marker row
	for _, v := range embeddedVersions(t) {
		want[v] = 1
	}
	require.Equal(t, want, appliedVersions(t, db))
}

// embeddedVersions are the versions of migrations.FS, read from the files
// (other migrations may be added: no test counts them by hand).
func embeddedVersions(t *testing.T) []int64 {
	t.Helper()
	names, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, names)
	var vs []int64
	for _, n := range names {
		digits, _, _ := strings.Cut(n, "_")
		v, err := strconv.ParseInt(digits, 10, 64)
		require.NoError(t, err, n)
		vs = append(vs, v)
	}
	return vs
}

// gooseProvider drives the same migrations the way docs/migrations.md shows.
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

// TestMigrateDocNamesEveryMigration: go doc pgadvisory.Migrate describes
// every migration it applies, so a new migration needs its line there.
func TestMigrateDocNamesEveryMigration(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "migrate.go", nil, parser.ParseComments)
	require.NoError(t, err)
	var doc string
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "Migrate" && fn.Recv == nil {
			doc = fn.Doc.Text()
		}
	}
	require.NotEmpty(t, doc)
	list, err := pgadvisory.Migrations()
	require.NoError(t, err)
	for _, m := range list {
		require.Contains(t, doc, strings.TrimSuffix(m.File, ".sql"), "Migrate's doc comment must describe %s", m.File)
	}
}
