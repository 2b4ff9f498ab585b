package pgadvisory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/lockgen/lockgen/migrations"
)

// MigrationTable is the goose version table that records lockgen's
// migrations (package migrations). It is lockgen's own, so an application's
// goose_db_version is never touched, and it lives in schema public, outside
// the pgadvisory schema the migrations create, so it exists before the first
// migration and survives Down. Pass it to goose as -table or
// goose.WithTableName when applying the migrations yourself.
const MigrationTable = "public.pgadvisory_db_version"

// MigrationLockID is the session advisory lock [Migrate] holds while it
// applies migrations: keyspace.ID("lockgen.migrate"). Use it with
// lock.WithLockID when driving goose yourself, so that your runs and Migrate
// exclude each other.
const MigrationLockID int64 = 7946592368616403100

// migrateLockTimeout is how Migrate waits for another migrator: a try every
// second, for up to five minutes (or until ctx ends).
const (
	migrateLockPeriod   = 1   // seconds between tries
	migrateLockAttempts = 300 // tries
)

// Migrate applies lockgen's SQL migrations (package migrations: the schema
// pgadvisory with the lock ID function, fencing, the run-once ledger, the
// lock registry and the status view) to db, with goose, recording them in
// [MigrationTable].
//
// It is idempotent: when everything is applied it only reads the version
// table and takes no lock. Concurrent callers (every replica at start-up) are
// safe: pending migrations are applied under the session advisory lock
// [MigrationLockID], which Migrate waits for up to five minutes or until ctx
// ends, and each migration runs in its own transaction.
//
// The session lock needs a direct connection to PostgreSQL: through PgBouncer
// in pool_mode=transaction it would leak to other clients. With the pgx stdlib
// driver Migrate detects a pooler the way [RunSession] does and returns an
// error wrapping [ErrTransactionPooler] before taking any lock.
//
// pgx users wrap their pool: Migrate(ctx, stdlib.OpenDBFromPool(pool)).
//
// Errors are an [*Error] with Op "migrate" (the message starts with
// "pgadvisory: migrate:") that wraps the cause: goose's, the driver's, or
// ctx.Err(). Its Kind is [ErrInvalidArgument] for a nil db,
// [ErrTransactionPooler] for a pooler, and nil otherwise.
func Migrate(ctx context.Context, db *sql.DB) error {
	if db == nil {
		return migrateError(ErrInvalidArgument, errors.New("nil *sql.DB"))
	}
	if err := refusePooler(ctx, db); err != nil {
		return err
	}
	p, err := newMigrationProvider(db)
	if err != nil {
		return migrateError(nil, err)
	}
	if _, err := p.Up(ctx); err != nil {
		return migrateError(nil, err)
	}
	return nil
}

// migrateError is the error of a failed Migrate; kind is nil for a cause
// with no dedicated kind.
func migrateError(kind, err error) error {
	return &Error{Op: "migrate", SQLState: SQLState(err), Kind: kind, Err: err}
}

// newMigrationProvider is the goose provider Migrate runs. Its Close would
// close db, which belongs to the caller, so it is never closed.
func newMigrationProvider(db *sql.DB) (*goose.Provider, error) {
	locker, err := lock.NewPostgresSessionLocker(
		lock.WithLockID(MigrationLockID),
		lock.WithLockTimeout(migrateLockPeriod, migrateLockAttempts),
	)
	if err != nil {
		return nil, err
	}
	return goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithTableName(MigrationTable),
		goose.WithDisableGlobalRegistry(true),
		goose.WithSessionLocker(locker),
		goose.WithLogger(goose.NopLogger()),
	)
}

// refusePooler returns Migrate's error of kind ErrTransactionPooler when db's
// connections go through a pooler, detected as in RunSession. Drivers other
// than pgx stdlib are not checked.
func refusePooler(ctx context.Context, db *sql.DB) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return migrateError(nil, err)
	}
	defer conn.Close()
	var pid int32
	if err := conn.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		return migrateError(nil, err)
	}
	s := &databaseSQLSession{conn: conn}
	if announced, ok := s.announcedPID(); ok && announced != uint32(pid) {
		return migrateError(ErrTransactionPooler, fmt.Errorf("server pid %d, announced pid %d: the migration lock is a session lock", pid, announced))
	}
	return nil
}
