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
	"github.com/pressly/goose/v3/database"

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
//     ledger row's finished_at when its transaction commits ([Locker.RunOnce]
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
//   - 00007_leader: leader election ([Locker.Lead]): pgadvisory.leader_elect
//     publishes a leader's term (a fencing token) for a caller that holds
//     the lock and records it in pgadvisory.leader;
//     pgadvisory.current_leader reports the leader only while its backend
//     holds the lock ([Locker.CurrentLeader]); the status view gains leader_holder,
//     leader_term and leader_since;
//   - 00008_security: no role gains anything through lockgen's schema:
//     every function pins its search_path, EXECUTE is PUBLIC only on what
//     applications call, the trigger functions that run as their owner
//     work only on tables listed in pgadvisory.fenced_table (written by
//     pgadvisory.fence_register, which lockgen fence's migrations call;
//     tables fenced before are listed by the migration), no error names a
//     lock's current token, and a NULL parameter of a fenced row raises
//     LF005;
//   - 00009_lease: leases ([WithLease]): pgadvisory.lease holds a
//     leadership as a row with an expiry on the database's clock;
//     pgadvisory.lease_acquire takes a vacant or expired lease with a term
//     that pgadvisory.leader_elect publishes as the lock's fencing token,
//     pgadvisory.lease_renew renews all of one owner's leases in one
//     statement, pgadvisory.lease_release vacates one at once;
//   - 00010_semaphore: limited locks ([Locker.RunLimited]):
//     pgadvisory.slot_id, the SQL twin of keyspace.SlotID;
//     the lock's limit is registered in pgadvisory.slot_limit, which
//     pgadvisory.slot_register writes and pgadvisory.slot_registered reads
//     with a fresh snapshot; the view pgadvisory.slot_status counts held
//     slots;
//   - 00011_waiting: waiting without a connection, in arrival order
//     ([WithWait] on transaction locks): pgadvisory.waiter queues the
//     waiting calls of each lock with an expiry on the database's clock;
//     pgadvisory.wait_try takes the locks (one or a set, all or none) for
//     a call first in each of their queues (or a first try when nobody
//     waits) and wakes the next waiters at commit (NOTIFY
//     pgadvisory_wait), pgadvisory.wait_leave removes a call's rows;
//     pgadvisory.fence_wait_try is wait_try for fenced calls, with
//     pgadvisory.fence_acquire at the head of the queue.
//
// It is idempotent: when everything is applied it only reads the version
// table and checks in the catalogs that the objects of the applied
// migrations exist, and takes no lock. Concurrent callers (every replica at start-up) are
// safe: pending migrations are applied under the session advisory lock
// [MigrationLockID], which Migrate waits for up to five minutes or until ctx
// ends, and each migration runs in its own transaction.
//
// The session lock needs a direct connection to PostgreSQL: through PgBouncer
// in pool_mode=transaction it would leak to other clients. With the pgx stdlib
// driver Migrate detects a pooler the way [Locker.RunSession] does and returns an
// error wrapping [ErrTransactionPooler] before taking any lock.
//
// It judges the schema by its objects, not only by the version table, and
// refuses, changing nothing, a version table that records migrations whose
// objects are gone (a restore that left the schema pgadvisory out) and a
// schema that another migration tool applied: the error says which
// ([MigrationStatus.Drift]) and [Migrator.Reconcile] repairs either. A hot
// standby is refused with [ErrStandby] before anything is sent.
//
// pgx users wrap their pool: Migrate(ctx, stdlib.OpenDBFromPool(pool)), or
// use [NewMigratorPgx]. [Migrator] also migrates to a version, rolls back
// and reports the status.
//
// Errors are an [*Error] with Op "migrate" (the message starts with
// "pgadvisory: migrate:") that wraps the cause: goose's, the driver's, or
// ctx.Err(). Its Kind is [ErrInvalidArgument] for a nil db,
// [ErrTransactionPooler] for a pooler, [ErrStandby] for a hot standby, and
// nil otherwise.
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
// Up, UpTo, Down, DownTo and Reconcile take the session advisory lock
// [MigrationLockID] (waiting as [WithMigrationLockWait] says, reporting the
// holder as [WithMigrationLockReport] asks), so they exclude each other and
// Migrate across processes, and refuse a hot standby with [ErrStandby] and
// a pooler with [ErrTransactionPooler] first. Up, UpTo, Down and DownTo
// refuse a version table that disagrees with the schema's objects (see
// [MigrationStatus.Drift]). When a migration fails, the results of those
// that ran before it are returned with the error. Each migration runs in its own
// transaction. Status takes no lock and changes nothing. Bad requests (an
// unknown version, a version below zero, rolling back a database without
// lockgen's schema) are refused before anything is sent that could change
// the database.
//
// A Migrator is safe for concurrent use.
type Migrator struct {
	db          *sql.DB
	closeDB     bool // db wraps a pgx pool for NewMigratorPgx
	list        []Migration
	lockWait    time.Duration
	reportEvery time.Duration // WithMigrationLockReport
	report      func(MigrationLockHolder)
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
	if m.report != nil && m.reportEvery < 100*time.Millisecond {
		return nil, migrateError(ErrInvalidArgument, fmt.Errorf("WithMigrationLockReport(%v, …): at least 100ms", m.reportEvery))
	}
	if m.report == nil {
		m.reportEvery = 0
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

// MigrationResult is one migration that Up, UpTo, Down, DownTo or
// Reconcile ran or recorded.
type MigrationResult struct {
	Migration Migration
	Up        bool          // applied (true) or rolled back (false)
	Duration  time.Duration // how long it took
	// Recorded is set by Reconcile for a migration it only recorded in the
	// version table (Up: its objects already existed) or removed from it
	// (not Up: its objects were gone); none of its SQL ran.
	Recorded bool
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
	if err := preflight(ctx, m.db); err != nil {
		return nil, err
	}
	// The objects, not only the version table: a version table that
	// claims migrations whose objects are gone would make Up a silent
	// no-op, and a schema another tool applied would fail at migration 1.
	st, err := m.settledStatus(ctx)
	if err != nil {
		return nil, err
	}
	if !st.InStep() {
		return nil, migrateError(nil, prefixed(step, errors.New(st.Drift())))
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
		return m.results(res, err), migrateError(nil, prefixed(step, err))
	}
	return m.results(res, nil), nil
}

// Reconcile makes the version table agree with the schema's objects, then
// applies the pending migrations like Up. It is for the two cases that Up
// refuses (see [MigrationStatus.Drift]):
//
//   - another migration tool applied lockgen's schema, so the version table
//     is missing or records nothing: the migrations whose objects exist are
//     recorded as applied;
//   - the version table records migrations whose objects are gone (a
//     restore that left the schema pgadvisory out): those records are
//     removed, and Up creates the objects again. The fencing token sequence
//     then starts again at 1 (see docs/operations.md, Replicas and failover, on advancing it).
//
// It works only when the objects are exactly those of the migrations up to
// one version ([MigrationStatus.Reconcilable]); otherwise it changes
// nothing and its error says what is missing. Records are changed in one
// transaction under the migration lock. A database already in step is
// only brought up to date.
func (m *Migrator) Reconcile(ctx context.Context) ([]MigrationResult, error) {
	if err := preflight(ctx, m.db); err != nil {
		return nil, err
	}
	recorded, err := m.reconcileRecords(ctx)
	if err != nil {
		return recorded, err
	}
	res, err := m.up(ctx, math.MaxInt64, "reconcile: ")
	return append(recorded, res...), err
}

// settledStatus is Status, read again under the migration lock when the
// version table and the objects disagree: Status reads them one after the
// other, so a migrator committing in between looks like drift.
func (m *Migrator) settledStatus(ctx context.Context) (*MigrationStatus, error) {
	st, err := m.Status(ctx)
	if err != nil || st.InStep() {
		return st, err
	}
	conn, err := m.db.Conn(ctx)
	if err != nil {
		return nil, migrateError(nil, err)
	}
	defer conn.Close()
	locker := &migrationLocker{wait: m.lockWait, every: m.reportEvery, report: m.report}
	if err := locker.SessionLock(ctx, conn); err != nil {
		return nil, migrateError(nil, err)
	}
	defer func() { _ = locker.SessionUnlock(context.WithoutCancel(ctx), conn) }()
	return m.Status(ctx)
}

// reconcileRecords changes the version table's records under the
// migration lock.
func (m *Migrator) reconcileRecords(ctx context.Context) ([]MigrationResult, error) {
	conn, err := m.db.Conn(ctx)
	if err != nil {
		return nil, migrateError(nil, err)
	}
	defer conn.Close()
	locker := &migrationLocker{wait: m.lockWait, every: m.reportEvery, report: m.report}
	if err := locker.SessionLock(ctx, conn); err != nil {
		return nil, migrateError(nil, fmt.Errorf("reconcile: %w", err))
	}
	defer func() { _ = locker.SessionUnlock(context.WithoutCancel(ctx), conn) }()
	st, err := m.Status(ctx)
	if err != nil {
		return nil, err
	}
	if st.InStep() {
		return nil, nil
	}
	if len(st.Unknown) > 0 {
		return nil, migrateError(nil, fmt.Errorf("reconcile: the version table records migrations %v, which this lockgen does not know: reconcile with the lockgen that applied them", st.Unknown))
	}
	if !st.Reconcilable {
		return nil, migrateError(nil, fmt.Errorf("reconcile: %s", st.Drift()))
	}
	store, err := database.NewStore(database.DialectPostgres, MigrationTable)
	if err != nil {
		return nil, migrateError(nil, err)
	}
	var out []MigrationResult
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return nil, migrateError(nil, err)
	}
	defer tx.Rollback()
	if !st.Tracked {
		if err := store.CreateVersionTable(ctx, tx); err != nil {
			return nil, migrateError(nil, fmt.Errorf("reconcile: creating %s: %w", MigrationTable, err))
		}
		if err := store.Insert(ctx, tx, database.InsertRequest{Version: 0}); err != nil {
			return nil, migrateError(nil, fmt.Errorf("reconcile: %w", err))
		}
	}
	for _, s := range st.Migrations {
		began := time.Now()
		switch {
		case s.Applied && s.Version > st.SchemaVersion:
			if err := store.Delete(ctx, tx, s.Version); err != nil {
				return nil, migrateError(nil, fmt.Errorf("reconcile: %w", err))
			}
			out = append(out, MigrationResult{Migration: s.Migration, Up: false, Recorded: true, Duration: time.Since(began)})
		case !s.Applied && s.Version <= st.SchemaVersion:
			if err := store.Insert(ctx, tx, database.InsertRequest{Version: s.Version}); err != nil {
				return nil, migrateError(nil, fmt.Errorf("reconcile: %w", err))
			}
			out = append(out, MigrationResult{Migration: s.Migration, Up: true, Recorded: true, Duration: time.Since(began)})
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, migrateError(nil, fmt.Errorf("reconcile: %w", err))
	}
	return out, nil
}

// Down rolls back the most recently applied migration. A database without
// lockgen's version table, or with nothing applied, is refused with
// [ErrNotMigrated].
func (m *Migrator) Down(ctx context.Context) ([]MigrationResult, error) {
	st, err := m.settledStatus(ctx)
	if err != nil {
		return nil, err
	}
	if !st.InStep() {
		return nil, migrateError(nil, fmt.Errorf("down: %s", st.Drift()))
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
	st, err := m.settledStatus(ctx)
	if err != nil {
		return nil, err
	}
	if !st.InStep() {
		// A standby (or a pooler) is refused as such: a standby shows
		// drift while it replays a migration the primary is applying.
		if err := preflight(ctx, m.db); err != nil {
			return nil, err
		}
		return nil, migrateError(nil, fmt.Errorf("%s: %s", step, st.Drift()))
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
	if err := preflight(ctx, m.db); err != nil {
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
		return m.results(res, err), migrateError(nil, prefixed(step+": ", err))
	}
	return m.results(res, nil), nil
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

// results converts goose's results. goose reports the migrations that ran
// before a failure only in its PartialError, so err's are added: what ran
// is reported also when a later migration failed.
func (m *Migrator) results(res []*goose.MigrationResult, err error) []MigrationResult {
	var partial *goose.PartialError
	if errors.As(err, &partial) && len(res) == 0 {
		res = partial.Applied
	}
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
	locker := &migrationLocker{wait: m.lockWait, every: m.reportEvery, report: m.report}
	return goose.NewProvider(goose.DialectPostgres, m.db, migrations.FS,
		goose.WithTableName(MigrationTable),
		goose.WithDisableGlobalRegistry(true),
		goose.WithSessionLocker(locker),
		goose.WithLogger(goose.NopLogger()),
	)
}

// preflight refuses, before any lock or change, a hot standby (kind
// ErrStandby: it is read-only, and its advisory locks exclude nobody on the
// primary) and a connection through a pooler (kind ErrTransactionPooler,
// detected as in RunSession; drivers other than pgx stdlib are not
// checked for it).
func preflight(ctx context.Context, db *sql.DB) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return migrateError(nil, err)
	}
	defer conn.Close()
	var pid int32
	var standby bool
	if err := conn.QueryRowContext(ctx, "SELECT pg_catalog.pg_backend_pid(), pg_catalog.pg_is_in_recovery()").Scan(&pid, &standby); err != nil {
		return migrateError(nil, err)
	}
	if standby {
		return migrateError(ErrStandby, errors.New("the server is a hot standby (pg_is_in_recovery() = true), which is read-only: migrate on the primary (with several hosts in the URL, add target_session_attrs=read-write)"))
	}
	s := &databaseSQLSession{conn: conn}
	if announced, ok := s.announcedPID(); ok && announced != uint32(pid) {
		return migrateError(ErrTransactionPooler, fmt.Errorf("server pid %d, announced pid %d: the migration lock is a session lock", pid, announced))
	}
	return nil
}
