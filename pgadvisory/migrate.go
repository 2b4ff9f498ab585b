package pgadvisory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
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

// defaultMigrationLockWait is how long Migrate waits for another migrator.
const defaultMigrationLockWait = 5 * time.Minute

// Migrate applies every pending lockgen migration to db, with goose,
// recording them in [MigrationTable]. The migrations (package migrations;
// [Migrations] lists them with their SQL) are:
//
//   - 00001_lock_id: the schema pgadvisory with pgadvisory.lock_id(name,
//     params...), the SQL twin of keyspace.ParamID, and
//     pgadvisory.valid_lock_name(name);
//   - 00002_fencing: fencing tokens (the sequence
//     pgadvisory.fencing_token_seq, the published token per lock in
//     pgadvisory.fence, the trigger functions that lockgen fence attaches to
//     tables) and the run-once ledger pgadvisory.run_once;
//   - 00003_registry: the lock registry (pgadvisory.registry_declaration,
//     pgadvisory.registry, pgadvisory.register_instance) that [Register]
//     fills, and the view pgadvisory.status that lockgen status reads;
//   - 00004_run_once_finish: the deferred trigger that sets a run-once
//     ledger row's finished_at when its transaction commits ([RunOnce]
//     claims its window before fn runs);
//   - 00005_fencing_acquire: the fenced acquisition that [WithFencing]
//     runs on the lock's own connection (pgadvisory.fence_acquire takes the
//     locks at session level and publishes the token durably,
//     pgadvisory.fence_handover hands the locks to fn's transaction), and
//     00002's per-lock check made SECURITY DEFINER;
//   - 00006_fencing_statement_check: the trigger functions of the tables
//     lockgen fence fences (a row stamp and one check per statement and
//     lock, on the rows as written), and 00002's trigger functions reading
//     the token only from the transaction's setting;
//   - 00007_leader: leader election ([Lead]): pgadvisory.leader_elect
//     publishes a leader's term (a fencing token) for a caller that holds
//     the lock and records it in pgadvisory.leader;
//     pgadvisory.current_leader reports the leader only while its backend
//     holds the lock ([CurrentLeader]); the status view gains leader_holder,
//     leader_term and leader_since.
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
// pgx users wrap their pool: Migrate(ctx, stdlib.OpenDBFromPool(pool)), or
// use [NewMigratorPgx]. [Migrator] also migrates to a version, rolls back
// and reports the status.
//
// Errors are an [*Error] with Op "migrate" (the message starts with
// "pgadvisory: migrate:") that wraps the cause: goose's, the driver's, or
// ctx.Err(). Its Kind is [ErrInvalidArgument] for a nil db,
// [ErrTransactionPooler] for a pooler, and nil otherwise.
func Migrate(ctx context.Context, db *sql.DB) error {
	m, err := NewMigrator(db)
	if err != nil {
		return err
	}
	_, err = m.Up(ctx)
	return err
}

// Migrator applies, rolls back and reports lockgen's migrations on one
// database, like a goose Provider on migrations.FS with lockgen's version
// table and lock. [Migrate] is Migrator.Up.
//
// Up, UpTo, Down and DownTo take the session advisory lock
// [MigrationLockID] (waiting as [WithMigrationLockWait] says), so they
// exclude each other and Migrate across processes, and refuse a pooler
// with [ErrTransactionPooler] first. Each migration runs in its own
// transaction. Status takes no lock and changes nothing. Bad requests (an
// unknown version, a version below zero, rolling back a database without
// lockgen's schema) are refused before anything is sent that could change
// the database.
//
// A Migrator is safe for concurrent use.
type Migrator struct {
	db       *sql.DB
	closeDB  bool // db wraps a pgx pool for NewMigratorPgx
	list     []Migration
	lockWait time.Duration
}

// MigratorOption configures a [Migrator].
type MigratorOption func(*Migrator)

// WithMigrationLockWait sets how long Up, UpTo, Down and DownTo wait for the
// migration lock that another migrator holds: five minutes by default, at
// least one second; ctx ending also stops the wait.
func WithMigrationLockWait(d time.Duration) MigratorOption {
	return func(m *Migrator) { m.lockWait = d }
}

// NewMigrator returns a Migrator on db. It does not connect.
func NewMigrator(db *sql.DB, opts ...MigratorOption) (*Migrator, error) {
	if db == nil {
		return nil, migrateError(ErrInvalidArgument, errors.New("nil *sql.DB"))
	}
	return newMigrator(db, false, opts)
}

// NewMigratorPgx returns a Migrator on a pgx pool (through
// stdlib.OpenDBFromPool). Close releases the wrapper, never the pool.
func NewMigratorPgx(pool *pgxpool.Pool, opts ...MigratorOption) (*Migrator, error) {
	if pool == nil {
		return nil, migrateError(ErrInvalidArgument, errors.New("nil *pgxpool.Pool"))
	}
	return newMigrator(stdlib.OpenDBFromPool(pool), true, opts)
}

func newMigrator(db *sql.DB, closeDB bool, opts []MigratorOption) (*Migrator, error) {
	list, err := Migrations()
	if err != nil {
		return nil, err
	}
	m := &Migrator{db: db, closeDB: closeDB, list: list, lockWait: defaultMigrationLockWait}
	for _, o := range opts {
		if o != nil {
			o(m)
		}
	}
	if m.lockWait < time.Second {
		return nil, migrateError(ErrInvalidArgument, fmt.Errorf("WithMigrationLockWait(%v): at least 1s", m.lockWait))
	}
	return m, nil
}

// Close releases what NewMigratorPgx opened; the caller's *sql.DB or pool
// stays open.
func (m *Migrator) Close() error {
	if m.closeDB {
		return m.db.Close()
	}
	return nil
}

// Migrations returns the migrations m applies, in ascending version order.
func (m *Migrator) Migrations() []Migration { return append([]Migration(nil), m.list...) }

// Latest is the highest version m knows.
func (m *Migrator) Latest() int64 { return m.list[len(m.list)-1].Version }

// MigrationResult is one migration that Up, UpTo, Down or DownTo ran.
type MigrationResult struct {
	Migration Migration
	Up        bool          // applied (true) or rolled back (false)
	Duration  time.Duration // how long it took
}

// Up applies every pending migration; with nothing pending it returns no
// results, takes no lock and changes nothing.
func (m *Migrator) Up(ctx context.Context) ([]MigrationResult, error) {
	return m.up(ctx, math.MaxInt64, "")
}

// UpTo applies the pending migrations up to and including version, which
// must be one of [Migrator.Migrations]. A database already at or above it is
// left as it is (no results).
func (m *Migrator) UpTo(ctx context.Context, version int64) ([]MigrationResult, error) {
	step := fmt.Sprintf("up to %d", version)
	if _, ok := m.find(version); !ok {
		return nil, migrateError(ErrInvalidArgument, fmt.Errorf("%s: unknown version %d; this lockgen's migrations are %s", step, version, m.versions()))
	}
	return m.up(ctx, version, step+": ")
}

func (m *Migrator) up(ctx context.Context, version int64, step string) ([]MigrationResult, error) {
	if err := refusePooler(ctx, m.db); err != nil {
		return nil, err
	}
	p, err := m.provider()
	if err != nil {
		return nil, migrateError(nil, err)
	}
	var res []*goose.MigrationResult
	if version == math.MaxInt64 {
		res, err = p.Up(ctx)
	} else {
		res, err = p.UpTo(ctx, version)
	}
	if err != nil {
		return m.results(res), migrateError(nil, prefixed(step, err))
	}
	return m.results(res), nil
}

// Down rolls back the most recently applied migration. A database without
// lockgen's version table, or with nothing applied, is refused with
// [ErrNotMigrated].
func (m *Migrator) Down(ctx context.Context) ([]MigrationResult, error) {
	st, err := m.Status(ctx)
	if err != nil {
		return nil, err
	}
	if st.Current == 0 {
		return nil, migrateError(ErrNotMigrated, fmt.Errorf("down: nothing to roll back: %s", st.emptyReason()))
	}
	return m.down(ctx, st, -1, "down")
}

// DownTo rolls back every applied migration above version: DownTo(ctx, 0)
// removes lockgen's schema (the version table stays). version must be 0 or
// one of [Migrator.Migrations]; a negative version is refused with
// [ErrInvalidArgument], a database without lockgen's schema with
// [ErrNotMigrated]. A database at or below version is left as it is.
func (m *Migrator) DownTo(ctx context.Context, version int64) ([]MigrationResult, error) {
	step := fmt.Sprintf("down to %d", version)
	switch _, ok := m.find(version); {
	case version < 0:
		return nil, migrateError(ErrInvalidArgument, fmt.Errorf("%s: below zero: a version is 0 (no migration) or more", step))
	case version > 0 && !ok:
		return nil, migrateError(ErrInvalidArgument, fmt.Errorf("%s: unknown version %d; this lockgen's migrations are %s (0 removes them all)", step, version, m.versions()))
	}
	st, err := m.Status(ctx)
	if err != nil {
		return nil, err
	}
	if st.Current == 0 {
		return nil, migrateError(ErrNotMigrated, fmt.Errorf("%s: nothing to roll back: %s", step, st.emptyReason()))
	}
	if st.Current <= version {
		return nil, nil
	}
	return m.down(ctx, st, version, step)
}

// down rolls back to version, or the last applied migration when version
// is -1.
func (m *Migrator) down(ctx context.Context, st *MigrationStatus, version int64, step string) ([]MigrationResult, error) {
	floor := version
	if version < 0 {
		floor = st.Current - 1
	}
	for _, v := range st.Unknown {
		if v > floor {
			return nil, migrateError(nil, fmt.Errorf("%s: the database has migration %d applied, which this lockgen does not know (its migrations are %s): roll it back with the lockgen version that applied it", step, v, m.versions()))
		}
	}
	if err := refusePooler(ctx, m.db); err != nil {
		return nil, err
	}
	p, err := m.provider()
	if err != nil {
		return nil, migrateError(nil, err)
	}
	var res []*goose.MigrationResult
	if version < 0 {
		var r *goose.MigrationResult
		if r, err = p.Down(ctx); r != nil {
			res = append(res, r)
		}
	} else {
		res, err = p.DownTo(ctx, version)
	}
	if err != nil {
		return m.results(res), migrateError(nil, prefixed(step+": ", err))
	}
	return m.results(res), nil
}

// find returns the migration of version.
func (m *Migrator) find(version int64) (Migration, bool) {
	for _, mg := range m.list {
		if mg.Version == version {
			return mg, true
		}
	}
	return Migration{}, false
}

// versions lists m's versions for messages: "1, 2, 3".
func (m *Migrator) versions() string {
	s := ""
	for i, mg := range m.list {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprint(mg.Version)
	}
	return s
}

func (m *Migrator) results(res []*goose.MigrationResult) []MigrationResult {
	out := make([]MigrationResult, 0, len(res))
	for _, r := range res {
		if r == nil || r.Source == nil || r.Error != nil {
			continue
		}
		mg, _ := m.find(r.Source.Version)
		out = append(out, MigrationResult{Migration: mg, Up: r.Direction == "up", Duration: r.Duration})
	}
	return out
}

func prefixed(step string, err error) error {
	if step == "" {
		return err
	}
	return fmt.Errorf("%s%w", step, err)
}

// migrateError is the error of a failed migration call; kind is nil for a
// cause with no dedicated kind.
func migrateError(kind, err error) error {
	return &Error{Op: "migrate", SQLState: SQLState(err), Kind: kind, Err: err}
}

// provider is the goose provider that Up and Down run. Its Close would close
// db, which belongs to the caller, so it is never closed.
func (m *Migrator) provider() (*goose.Provider, error) {
	attempts := uint64((m.lockWait + time.Second - 1) / time.Second)
	locker, err := lock.NewPostgresSessionLocker(
		lock.WithLockID(MigrationLockID),
		lock.WithLockTimeout(1, attempts), // a try every second
	)
	if err != nil {
		return nil, err
	}
	return goose.NewProvider(goose.DialectPostgres, m.db, migrations.FS,
		goose.WithTableName(MigrationTable),
		goose.WithDisableGlobalRegistry(true),
		goose.WithSessionLocker(locker),
		goose.WithLogger(goose.NopLogger()),
	)
}

// refusePooler returns the migration error of kind ErrTransactionPooler when
// db's connections go through a pooler, detected as in RunSession. Drivers
// other than pgx stdlib are not checked.
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
