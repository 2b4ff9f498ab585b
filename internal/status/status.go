// Package status reads the advisory locks held and awaited in a database, by
// declared name, from the view pgadvisory.status (migration 00003), and
// formats them for people (a table) and for tools (JSON). It is the body of
// lockgen status; the SQL lives in the view, so psql users see the same rows.
// Without the view, or without the right to read it, the locks come from
// pg_locks and pg_stat_activity with raw keys; on a hot standby, whose locks
// are not the primary's, it refuses.
package status

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lockgen/lockgen/pgadvisory"
)

// Lock is one row of pgadvisory.status: one backend holding or awaiting one
// advisory lock (bigint key) in one mode.
type Lock struct {
	// LockID is the bigint key; zero for a lock taken with two int4 keys
	// (Int4).
	LockID int64
	// Int4 reports a lock taken with two int4 keys (pg_advisory_lock(int,
	// int)), a key space of its own that lockgen does not use: Key1 and
	// Key2 hold the keys, and there is no LockID and no name.
	Int4       bool
	Key1, Key2 int32
	// Name is the registered name of LockID; "" when the ID is not in
	// pgadvisory.registry (an unregistered instance of a parameterized lock,
	// or a key lockgen did not declare).
	Name string
	// Params are a registered instance's parameters in declaration order;
	// nil for plain and unregistered locks.
	Params []Param

	Mode    string // "exclusive" or "shared" (pg_locks' mode otherwise)
	Granted bool   // false: waiting for the lock

	PID        int       // backend holding or awaiting the lock; 0 when unknown
	AppName    string    // application_name
	ClientAddr string    // client address; "" for Unix sockets or when not visible
	XactStart  time.Time // start of the backend's transaction; zero outside one (an idle session-level holder) or when not visible
	XactAge    time.Duration
	State      string // backend state: active, idle in transaction, idle, …
	WaitEvent  string // e.g. "advisory" while waiting for an advisory lock
	BlockedBy  []int  // pg_blocking_pids(pid): the backends this one waits for

	// Leader is set on the row of a backend that leads its lock now (a
	// pgadvisory.Lead leadership, confirmed by pgadvisory.current_leader),
	// and on the line of a lease (Mode "lease": pgadvisory.WithLease, no
	// backend); nil otherwise, and on databases migrated before lockgen's
	// 00007.
	Leader *Leadership

	// Limited is set on the one line of a limited lock (Mode "limited"),
	// which stands for the rows of its slots' keys; nil otherwise.
	Limited *Limited

	// Queue is set on the line of a lock's waiters in lockgen's queue
	// (Mode "queued": they hold no connection, no backend); nil otherwise.
	Queue *Queue
}

// Leadership is who leads a lock, as the status view reports it.
type Leadership struct {
	Holder string    // the leader's name (pgadvisory.WithHolder)
	Term   int64     // its term: the lock's published fencing token
	Since  time.Time // when it was elected, or took its lease (server clock)
	// Expires is when a lease expires unless renewed (server clock); zero
	// for a session-lock leader, whose leadership ends with its session.
	Expires time.Time
}

// Param is one parameter of a registered instance.
type Param struct {
	Name  string
	Value string // canonical text
}

// Waiting reports whether the backend is waiting for the lock.
func (l Lock) Waiting() bool { return !l.Granted }

// Label is the name, or the raw key in decimal when the lock is not
// registered. Names never start with a digit or '-', so the two cannot be
// confused.
func (l Lock) Label() string {
	switch {
	case l.Name != "":
		return l.Name
	case l.Int4:
		return fmt.Sprintf("int4(%d,%d)", l.Key1, l.Key2)
	}
	return strconv.FormatInt(l.LockID, 10)
}

// querySQL reads the view. host() gives the client address without a
// netmask; blocked_by goes through text so that any driver can scan it.
// The leader columns came with migration 00007; legacyQuerySQL reads a
// view from before it.
const querySQL = `SELECT lock_id, name, params::text, declared_params::text, mode, granted, pid,
       application_name, pg_catalog.host(client_addr), xact_start,
       pg_catalog.date_part('epoch', xact_age), state, wait_event,
       pg_catalog.array_to_string(blocked_by, ','),
       leader_holder, leader_term, leader_since
FROM pgadvisory.status
WHERE $1 = '' OR pg_catalog.starts_with(name, $1)`

const legacyQuerySQL = `SELECT lock_id, name, params::text, declared_params::text, mode, granted, pid,
       application_name, pg_catalog.host(client_addr), xact_start,
       pg_catalog.date_part('epoch', xact_age), state, wait_event,
       pg_catalog.array_to_string(blocked_by, ','),
       NULL::text, NULL::bigint, NULL::timestamptz
FROM pgadvisory.status
WHERE $1 = '' OR pg_catalog.starts_with(name, $1)`

// int4KeysSQL counts the advisory locks in this database taken with two int4
// keys (pg_advisory_lock(int, int)): a key space of its own (objsubid = 2)
// that lockgen never uses and the view does not list.
const int4KeysSQL = `SELECT count(*) FROM pg_catalog.pg_locks
WHERE locktype = 'advisory' AND objsubid = 2
  AND database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = pg_catalog.current_database())`

// Int4KeyLocks returns how many advisory locks held or awaited in db's
// database use the two-int4 key space, which [Query] does not list, so that
// a caller can say they exist.
func Int4KeyLocks(ctx context.Context, db *sql.DB) (int, error) {
	var n int
	if err := db.QueryRowContext(ctx, int4KeysSQL).Scan(&n); err != nil {
		return 0, fmt.Errorf("status: counting two-int4-key advisory locks: %w", err)
	}
	return n, nil
}

// rawSQL reads the advisory locks of this database from pg_locks and
// pg_stat_activity directly, in both key spaces (objsubid 1: one bigint
// key; 2: two int4 keys), for a database without lockgen's schema and for
// the two-int4-key locks that the view does not list. classid and objid
// are oids (unsigned): the keys are rebuilt in Go.
const rawSQL = `SELECT l.objsubid, l.classid::bigint, l.objid::bigint, l.mode, l.granted, l.pid,
       a.application_name, pg_catalog.host(a.client_addr), a.xact_start,
       pg_catalog.date_part('epoch', pg_catalog.now() - a.xact_start), a.state, a.wait_event,
       pg_catalog.array_to_string(pg_catalog.pg_blocking_pids(l.pid), ',')
FROM pg_catalog.pg_locks AS l
LEFT JOIN pg_catalog.pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.objsubid = ANY($1::int[])
  AND l.database = (SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname = pg_catalog.current_database())`

// Snapshot is what [Read] found.
type Snapshot struct {
	Locks []Lock
	// Named is false when the view pgadvisory.status could not be read
	// (lockgen's schema is missing, or the role may not read the view):
	// the locks then come from pg_locks with raw keys, and no name or
	// parameters.
	Named bool
	// Unnamed says why Named is false and what gives names; "" when Named.
	Unnamed string
}

// ErrStandby is Read's error on a hot standby: advisory locks are local to
// a server, so the locks that matter are on the primary, invisible here.
var ErrStandby = errors.New("status: the server is a hot standby (pg_is_in_recovery() = true): advisory locks are local to a server, so the primary's locks are not visible here; " +
	"run lockgen status against the primary (with several hosts in the URL, add target_session_attrs=read-write)")

// noSchema is Unnamed for a database without lockgen's schema.
const noSchema = "this database has no lockgen schema (the view pgadvisory.status), so locks show raw keys from pg_locks: " +
	"names need the schema and the registry (lockgen migrate up, then lockgen register)"

// Read returns every advisory lock held and awaited in db's database,
// sorted by [Sort]: the view's rows (names from the registry) and the
// locks taken with two int4 keys, which the view does not list. On a
// database without lockgen's schema it still lists them all from pg_locks
// and pg_stat_activity, with raw keys (Named false): in an incident the
// schema may be missing. prefix keeps the names that start with it (""
// keeps everything; any other prefix drops unnamed locks).
//
// On a hot standby it returns [ErrStandby]. A role that may not read the
// view (a monitoring role with pg_monitor) gets the locks from pg_locks too,
// and Unnamed names the GRANT that gives it names.
func Read(ctx context.Context, db *sql.DB, prefix string) (Snapshot, error) {
	var standby bool
	if err := db.QueryRowContext(ctx, `SELECT pg_catalog.pg_is_in_recovery()`).Scan(&standby); err != nil {
		return Snapshot{}, fmt.Errorf("status: %w", err)
	}
	if standby {
		return Snapshot{}, ErrStandby
	}
	named, err := Query(ctx, db, prefix)
	unnamed := noSchema
	if pgadvisory.SQLState(err) == "42501" { // insufficient_privilege
		unnamed = viewGrant(ctx, db)
		err = fmt.Errorf("%w: %w", errNoView, err)
	}
	if err == nil {
		named, err = foldLimited(ctx, db, named, prefix)
		if err != nil {
			return Snapshot{}, err
		}
		named, err = addLeases(ctx, db, named, prefix)
		if err != nil {
			return Snapshot{}, err
		}
		named, err = addQueues(ctx, db, named, prefix)
		if err != nil {
			return Snapshot{}, err
		}
	}
	switch {
	case err == nil:
		if prefix != "" {
			return Snapshot{Locks: named, Named: true}, nil
		}
		int4, err := readRaw(ctx, db, 2)
		if err != nil {
			return Snapshot{}, err
		}
		locks := append(named, int4...)
		Sort(locks)
		return Snapshot{Locks: locks, Named: true}, nil
	case !errors.Is(err, errNoView):
		return Snapshot{}, err
	}
	if prefix != "" {
		return Snapshot{Unnamed: unnamed}, nil
	}
	locks, err := readRaw(ctx, db, 1, 2)
	if err != nil {
		return Snapshot{}, err
	}
	Sort(locks)
	return Snapshot{Locks: locks, Unnamed: unnamed}, nil
}

// viewGrant says that the role may not read the view, and the GRANT that
// lets it.
func viewGrant(ctx context.Context, db *sql.DB) string {
	role, owner := "<role>", "its owner"
	var r, o string
	if err := db.QueryRowContext(ctx, `SELECT pg_catalog.quote_ident(current_user), pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(c.relowner))
		FROM pg_catalog.pg_class AS c WHERE c.oid = pg_catalog.to_regclass('pgadvisory.status')`).Scan(&r, &o); err == nil {
		role, owner = r, o
	}
	return fmt.Sprintf("the role %s may not read the view pgadvisory.status (permission denied), so locks show raw keys from pg_locks: "+
		"names need GRANT SELECT ON pgadvisory.status TO %s (run as %s or a superuser; the view reads the registry with its owner's rights)", role, role, owner)
}

// readRaw reads the advisory locks of the key spaces given by objsubid.
func readRaw(ctx context.Context, db *sql.DB, objsubids ...int) ([]Lock, error) {
	rows, err := db.QueryContext(ctx, rawSQL, objsubids)
	if err != nil {
		return nil, fmt.Errorf("status: reading pg_locks: %w", err)
	}
	defer rows.Close()
	var locks []Lock
	for rows.Next() {
		var (
			l                                  Lock
			subid                              int
			classid, objid                     int64
			app, client, state, waitEvent, bby sql.NullString
			pid                                sql.NullInt64
			start                              sql.NullTime
			age                                sql.NullFloat64
		)
		if err := rows.Scan(&subid, &classid, &objid, &l.Mode, &l.Granted, &pid, &app, &client, &start, &age, &state, &waitEvent, &bby); err != nil {
			return nil, fmt.Errorf("status: reading pg_locks: %w", err)
		}
		if subid == 2 {
			l.Int4, l.Key1, l.Key2 = true, int32(uint32(classid)), int32(uint32(objid))
		} else {
			l.LockID = int64(uint64(classid)<<32 | uint64(uint32(objid)))
		}
		l.AppName, l.ClientAddr, l.State, l.WaitEvent = app.String, client.String, state.String, waitEvent.String
		l.PID = int(pid.Int64)
		if start.Valid {
			l.XactStart = start.Time
		}
		if age.Valid {
			l.XactAge = time.Duration(age.Float64 * float64(time.Second))
		}
		l.Mode = modeName(l.Mode)
		if l.BlockedBy, err = parsePIDs(bby.String); err != nil {
			return nil, fmt.Errorf("status: lock %s: %w", l.Label(), err)
		}
		locks = append(locks, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("status: reading pg_locks: %w", err)
	}
	return locks, nil
}

// parsePIDs reads pg_blocking_pids as array_to_string gives it.
func parsePIDs(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, p := range strings.Split(s, ",") {
		pid, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("blocked_by %q: %w", s, err)
		}
		out = append(out, pid)
	}
	return out, nil
}

// errNoView marks Query's error for a database without the view.
var errNoView = errors.New("the view pgadvisory.status is missing: run pgadvisory.Migrate or goose up first")

// Query returns the advisory locks held and awaited in db's database whose
// names start with prefix ("" for all, including unregistered keys), sorted
// by [Sort]. The view is created by the migrations; without it the error
// says to run them.
func Query(ctx context.Context, db *sql.DB, prefix string) ([]Lock, error) {
	rows, err := db.QueryContext(ctx, querySQL, prefix)
	if pgadvisory.SQLState(err) == "42703" { // a view from before migration 00007
		rows, err = db.QueryContext(ctx, legacyQuerySQL, prefix)
	}
	if err != nil {
		switch pgadvisory.SQLState(err) {
		case "42P01", "3F000": // undefined table, schema
			return nil, fmt.Errorf("status: %w: %w", errNoView, err)
		}
		return nil, fmt.Errorf("status: %w", err)
	}
	defer rows.Close()
	var locks []Lock
	for rows.Next() {
		l, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("status: %w", err)
		}
		locks = append(locks, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	Sort(locks)
	return locks, nil
}

func scan(rows *sql.Rows) (Lock, error) {
	var (
		l                                  Lock
		name, params, declared, app        sql.NullString
		client, state, waitEvent, blockers sql.NullString
		pid                                sql.NullInt64
		start                              sql.NullTime
		age                                sql.NullFloat64
		leader                             sql.NullString
		term                               sql.NullInt64
		since                              sql.NullTime
	)
	if err := rows.Scan(&l.LockID, &name, &params, &declared, &l.Mode, &l.Granted, &pid,
		&app, &client, &start, &age, &state, &waitEvent, &blockers, &leader, &term, &since); err != nil {
		return l, err
	}
	if term.Valid {
		l.Leader = &Leadership{Holder: leader.String, Term: term.Int64, Since: since.Time}
	}
	l.Name, l.AppName, l.ClientAddr = name.String, app.String, client.String
	l.State, l.WaitEvent = state.String, waitEvent.String
	l.PID = int(pid.Int64)
	if start.Valid {
		l.XactStart = start.Time
	}
	if age.Valid {
		l.XactAge = time.Duration(age.Float64 * float64(time.Second))
	}
	l.Mode = modeName(l.Mode)
	var err error
	if l.Params, err = decodeParams(params.String, declared.String); err != nil {
		return l, fmt.Errorf("lock %d: %w", l.LockID, err)
	}
	if l.BlockedBy, err = parsePIDs(blockers.String); err != nil {
		return l, fmt.Errorf("lock %d: %w", l.LockID, err)
	}
	return l, nil
}

// modeName maps pg_locks' modes of advisory locks to their lockgen names.
func modeName(m string) string {
	switch m {
	case "ExclusiveLock":
		return "exclusive"
	case "ShareLock":
		return "shared"
	}
	return m
}

// decodeParams orders the params object by declared_params; names not in
// the declaration follow in name order.
func decodeParams(params, declared string) ([]Param, error) {
	if params == "" {
		return nil, nil
	}
	var values map[string]string
	if err := json.Unmarshal([]byte(params), &values); err != nil {
		return nil, fmt.Errorf("params %s: %w", params, err)
	}
	var decl []struct{ Name string }
	if declared != "" {
		if err := json.Unmarshal([]byte(declared), &decl); err != nil {
			return nil, fmt.Errorf("declared_params %s: %w", declared, err)
		}
	}
	out := make([]Param, 0, len(values))
	for _, d := range decl {
		if v, ok := values[d.Name]; ok {
			out = append(out, Param{d.Name, v})
			delete(values, d.Name)
		}
	}
	rest := make([]Param, 0, len(values))
	for k, v := range values {
		rest = append(rest, Param{k, v})
	}
	slices.SortFunc(rest, func(a, b Param) int { return cmp.Compare(a.Name, b.Name) })
	return append(out, rest...), nil
}

// Sort orders locks for reading: registered names first, by name, then
// unregistered keys, then locks taken with two int4 keys; within one lock
// the holders before the waiters, each by pid.
func Sort(locks []Lock) {
	rank := func(l Lock) int {
		switch {
		case l.Name != "":
			return 0
		case !l.Int4:
			return 1
		}
		return 2
	}
	slices.SortStableFunc(locks, func(a, b Lock) int {
		if c := cmp.Compare(rank(a), rank(b)); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		if c := cmp.Compare(a.LockID, b.LockID); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Key1, b.Key1); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Key2, b.Key2); c != 0 {
			return c
		}
		if a.Granted != b.Granted {
			if a.Granted {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.PID, b.PID)
	})
}
