package migrations_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/migrations"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestRegistryUpDownUp: 00003 goes down (after the migrations that follow
// it), leaving 00002's objects, and comes back up with the migration lock
// registered again.
func TestRegistryUpDownUp(t *testing.T) {
	ctx := context.Background()
	db := migrated.DB(t)
	all := map[string]bool{"pgadvisory.registry": true, "pgadvisory.registry_declaration": true,
		"pgadvisory.status": true, "pgadvisory.register_instance": true, "pgadvisory.fence": true}
	require.Equal(t, all, registryObjects(t, db))

	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithTableName(pgadvisory.MigrationTable),
		goose.WithDisableGlobalRegistry(true),
		goose.WithLogger(goose.NopLogger()))
	require.NoError(t, err)
	res, err := p.DownTo(ctx, 2)
	require.NoError(t, err)
	require.NotEmpty(t, res)
	require.Equal(t, int64(3), res[len(res)-1].Source.Version, "00003 goes down last")
	require.Equal(t, map[string]bool{"pgadvisory.registry": false, "pgadvisory.registry_declaration": false,
		"pgadvisory.status": false, "pgadvisory.register_instance": false, "pgadvisory.fence": true}, registryObjects(t, db))

	_, err = p.UpTo(ctx, 3)
	require.NoError(t, err)
	require.Equal(t, all, registryObjects(t, db))
	_, err = p.Up(ctx) // the migrations after 00003, for the other tests
	require.NoError(t, err)
	var name string
	require.NoError(t, db.QueryRow(`SELECT name FROM pgadvisory.registry WHERE lock_id = $1`, pgadvisory.MigrationLockID).Scan(&name))
	require.Equal(t, "lockgen.migrate", name)
}

// TestStatusViewNamesTheMigrationLock: while a migrator holds the
// migration lock, the view shows it by name, held at session level by an
// idle session.
func TestStatusViewNamesTheMigrationLock(t *testing.T) {
	ctx := context.Background()
	db := migrated.DB(t)
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	var pid int
	require.NoError(t, conn.QueryRowContext(ctx, `SELECT pg_backend_pid() FROM pg_advisory_lock($1)`, pgadvisory.MigrationLockID).Scan(&pid))

	var (
		name, mode, state string
		granted, waiting  bool
		xactStart         sql.NullTime
		blockedBy         string
	)
	require.NoError(t, db.QueryRow(`SELECT name, mode, granted, waiting, state, xact_start, blocked_by::text
		FROM pgadvisory.status WHERE lock_id = $1 AND pid = $2`, pgadvisory.MigrationLockID, pid).
		Scan(&name, &mode, &granted, &waiting, &state, &xactStart, &blockedBy))
	require.Equal(t, "lockgen.migrate", name)
	require.Equal(t, "ExclusiveLock", mode)
	require.True(t, granted)
	require.False(t, waiting)
	require.Equal(t, "idle", state)
	require.False(t, xactStart.Valid, "a session lock outside a transaction")
	require.Equal(t, "{}", blockedBy)

	// Control: released, the row is gone.
	_, err = conn.ExecContext(ctx, `SELECT pg_advisory_unlock($1)`, pgadvisory.MigrationLockID)
	require.NoError(t, err)
	var n int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM pgadvisory.status WHERE lock_id = $1`, pgadvisory.MigrationLockID).Scan(&n))
	require.Zero(t, n)
}

// TestStatusViewIsPerDatabase: a lock on the same key in another database is
// not this database's lock and is not listed.
func TestStatusViewIsPerDatabase(t *testing.T) {
	ctx := context.Background()
	db := migrated.DB(t)
	key := testdb.Key(t)
	other, err := sql.Open("pgx", testdb.ServerURL())
	require.NoError(t, err)
	defer other.Close()
	conn, err := other.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	var otherDB, ourDB string
	require.NoError(t, conn.QueryRowContext(ctx, `SELECT current_database() FROM pg_advisory_lock($1)`, key).Scan(&otherDB))
	require.NoError(t, db.QueryRow(`SELECT current_database()`).Scan(&ourDB))
	require.NotEqual(t, ourDB, otherDB)

	count := func() int {
		var n int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM pgadvisory.status WHERE lock_id = $1`, key).Scan(&n))
		return n
	}
	require.Zero(t, count())
	// Control: the same key taken in this database is listed.
	dbConn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer dbConn.Close()
	_, err = dbConn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, key)
	require.NoError(t, err)
	require.Equal(t, 1, count())
}

// registryObjects reports which of 00003's objects exist.
func registryObjects(t *testing.T, db *sql.DB) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, name := range []string{"pgadvisory.registry", "pgadvisory.registry_declaration", "pgadvisory.status", "pgadvisory.fence"} {
		var ok bool
		require.NoError(t, db.QueryRow(`SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok))
		out[name] = ok
	}
	var fn bool
	require.NoError(t, db.QueryRow(`SELECT to_regprocedure('pgadvisory.register_instance(text,text[])') IS NOT NULL`).Scan(&fn))
	out["pgadvisory.register_instance"] = fn
	return out
}
