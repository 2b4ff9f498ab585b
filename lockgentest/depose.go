package lockgentest

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockgen/lockgen/keyspace"
	"github.com/lockgen/lockgen/pgadvisory"
)

// deposeWait bounds how long Depose waits for the backends it ended to
// be gone.
const deposeWait = 10 * time.Second

// holdersSQL lists the other backends of the current database that hold
// an advisory lock of the keys $1 (the text of a bigint array: a lock's
// ID and the keys of the slots it has if limited), at session or
// transaction level.
const holdersSQL = `SELECT l.pid, COALESCE(a.application_name, ''), l.mode
FROM pg_catalog.pg_locks AS l
LEFT JOIN pg_catalog.pg_stat_activity AS a ON a.pid OPERATOR(pg_catalog.=) l.pid
WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory' AND l.objsubid OPERATOR(pg_catalog.=) 1 AND l.granted
  AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
  AND ((l.classid::bigint OPERATOR(pg_catalog.<<) 32) OPERATOR(pg_catalog.|) l.objid::bigint) OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.text::pg_catalog.int8[])
  AND l.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()
ORDER BY l.pid`

// vacateLeaseSQL ends the lease of lock $1 if one is held: the row is
// vacated as an expired lease is, so the holder's next renewal finds it
// gone and the next candidate may take it at once.
const vacateLeaseSQL = `WITH vacated AS (
  UPDATE pgadvisory.lease AS l SET owner_secret = NULL, expires_at = pg_catalog.clock_timestamp()
  WHERE l.lock_id OPERATOR(pg_catalog.=) $1 AND l.owner_secret IS NOT NULL
    AND l.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
  RETURNING l.holder, l.term)
SELECT count(*), COALESCE(string_agg(COALESCE(holder, '') || ' (term ' || term::text || ')', ', '), '') FROM vacated`

// Depose makes the current holders of lock lose it now, as they would in
// production when their connection dies or their lease is taken from
// them, so a test can check what its code does then. It fails t when
// nobody holds lock.
//
//   - A session lock ([pgadvisory.Locker.RunSession], a leader of
//     [pgadvisory.Locker.Lead] or [pgadvisory.Locker.Campaign]): the
//     backend holding it is terminated (pg_terminate_backend). The
//     holder's periodic check (pgadvisory.WithCheckInterval, a second by
//     default) finds its connection dead and cancels fn's context with a
//     cause matching pgadvisory.ErrLockLost, and the call returns an error
//     of that kind. Other session locks sharing that connection
//     (pgadvisory.WithSessionConns) are lost too, as in production.
//   - A lease (pgadvisory.WithLease): the lease is vacated in
//     pgadvisory.lease. The holder's next renewal, within a third of its
//     ttl, finds it gone and cancels fn's context with ErrLockLost; another
//     candidate may take the lease at once.
//   - A transaction lock ([pgadvisory.Locker.RunExclusive], RunOnce,
//     LockTx): the backend is terminated; fn's next statement and the
//     commit fail (pgadvisory.ErrConnLost), and the transaction rolls back.
//   - The slots of a limited lock ([pgadvisory.Locker.RunLimited],
//     RunSessionLimited): the backend of every holder of a slot is
//     terminated, with the outcome above for its kind (RunLimited's is a
//     transaction lock, RunSessionLimited's a session lock).
//
// Depose returns once the backends it terminated are gone (the lock is
// then free) and the lease is vacated. It runs on a connection of its
// own to db's database, like [Hold], and needs the right to terminate the
// holders' backends (the same role, pg_signal_backend or a superuser) and
// to update pgadvisory.lease (the schema's owner, as in a database of
// [NewDB]).
func Depose(t testing.TB, db *sql.DB, lock pgadvisory.Lock) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deposeWait)
	defer cancel()
	s := openSession(ctx, t, db, "lockgentest.Depose")
	defer s.close()
	deposed, err := depose(ctx, s, lock.ID)
	if err != nil {
		t.Fatalf("lockgentest: Depose %v: %v", lock, err)
	}
	if len(deposed) == 0 {
		t.Fatalf("lockgentest: Depose %v: nobody holds it (no backend holds its advisory lock and no lease of it is held); "+
			"wait until the code under test holds it before deposing it", lock)
	}
	t.Logf("lockgentest: Depose %v: %s", lock, strings.Join(deposed, "; "))
}

// depose terminates the backends holding id or one of its slots (as a
// limited lock's, whatever its limit) and vacates its lease, and describes
// each holder it deposed.
func depose(ctx context.Context, s *session, id int64) ([]string, error) {
	var deposed []string
	var pids []int32
	var pid int32
	var app, mode string
	keys := make([]int64, 0, 1+pgadvisory.MaxLimit)
	keys = append(keys, id)
	for slot := range int32(pgadvisory.MaxLimit) {
		keys = append(keys, keyspace.SlotID(id, slot))
	}
	err := s.query(ctx, holdersSQL, []any{arrayText(keys)}, func() error {
		if slices.Contains(pids, pid) { // it holds more than one of the keys
			return nil
		}
		pids = append(pids, pid)
		deposed = append(deposed, fmt.Sprintf("backend %d (application_name %q, %s) terminated", pid, app, mode))
		return nil
	}, &pid, &app, &mode)
	if err != nil {
		return nil, fmt.Errorf("listing the lock's holders: %w", err)
	}
	for _, p := range pids {
		var sent bool
		if err := s.queryRow(ctx, "SELECT pg_catalog.pg_terminate_backend($1)", []any{p}, &sent); err != nil {
			return nil, fmt.Errorf("terminating backend %d: %w", p, err)
		}
	}
	for _, p := range pids {
		if err := waitGone(ctx, s, p); err != nil {
			return nil, err
		}
	}
	var hasLease bool
	if err := s.queryRow(ctx, "SELECT pg_catalog.to_regclass('pgadvisory.lease') IS NOT NULL", nil, &hasLease); err != nil {
		return nil, fmt.Errorf("looking for pgadvisory.lease: %w", err)
	}
	if hasLease {
		var n int
		var holders string
		if err := s.queryRow(ctx, vacateLeaseSQL, []any{id}, &n, &holders); err != nil {
			return nil, fmt.Errorf("vacating the lease: %w", err)
		}
		if n > 0 {
			deposed = append(deposed, "lease of "+holders+" vacated")
		}
	}
	return deposed, nil
}

// waitGone waits until backend pid has exited and holds no lock.
func waitGone(ctx context.Context, s *session, pid int32) error {
	for {
		var alive bool
		err := s.queryRow(ctx, "SELECT EXISTS (SELECT FROM pg_catalog.pg_stat_activity WHERE pid OPERATOR(pg_catalog.=) $1) "+
			"OR EXISTS (SELECT FROM pg_catalog.pg_locks WHERE pid OPERATOR(pg_catalog.=) $1)", []any{pid}, &alive)
		if err != nil {
			return fmt.Errorf("waiting for backend %d to exit: %w", pid, err)
		}
		if !alive {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("backend %d was still running after %v: %w", pid, deposeWait, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}
