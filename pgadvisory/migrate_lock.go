package pgadvisory

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// MigrationLockHolder is the session that holds the migration lock
// ([MigrationLockID]) while a [Migrator] waits for it, as pg_locks and
// pg_stat_activity show it.
type MigrationLockHolder struct {
	PID             int    // the holder's backend pid; 0 when the lock was released in the meantime
	ApplicationName string // its application_name; "" when not set or not visible to this role
	ClientAddr      string // its client address; "" for a Unix socket or when not visible
	// Waited is how long this Migrator has waited so far.
	Waited time.Duration
}

// String describes the holder for messages: "pid 123 (application_name
// "billing", client 10.0.0.7)".
func (h MigrationLockHolder) String() string {
	if h.PID == 0 {
		return "a session that has just released it"
	}
	s := fmt.Sprintf("pid %d (application_name %q", h.PID, h.ApplicationName)
	if h.ClientAddr != "" {
		s += ", client " + h.ClientAddr
	}
	return s + ")"
}

// WithMigrationLockReport calls report every interval (at least 100ms)
// while Up, UpTo, Down, DownTo or Reconcile waits for the migration lock
// that another session holds, with that session: lockgen migrate prints
// it, so that a wait is never silent.
func WithMigrationLockReport(interval time.Duration, report func(MigrationLockHolder)) MigratorOption {
	return func(m *Migrator) { m.reportEvery, m.report = interval, report }
}

// migrationLocker is the goose session locker of a Migrator: it tries the
// migration lock about once a second until lockWait has passed or ctx
// ends, reporting the holder as WithMigrationLockReport asks, and names the
// holder when it gives up.
type migrationLocker struct {
	wait   time.Duration
	every  time.Duration // 0: no reports
	report func(MigrationLockHolder)
}

// lockHolderSQL finds the session holding the migration lock in this
// database.
const lockHolderSQL = `SELECT l.pid, COALESCE(a.application_name, ''), COALESCE(pg_catalog.host(a.client_addr), '')
FROM pg_catalog.pg_locks AS l
LEFT JOIN pg_catalog.pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
  AND ((l.classid::bigint << 32) | l.objid::bigint) = $1
  AND l.database = (SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname = pg_catalog.current_database())
LIMIT 1`

func (l *migrationLocker) holder(ctx context.Context, conn *sql.Conn, began time.Time) MigrationLockHolder {
	h := MigrationLockHolder{Waited: time.Since(began)}
	_ = conn.QueryRowContext(ctx, lockHolderSQL, MigrationLockID).Scan(&h.PID, &h.ApplicationName, &h.ClientAddr)
	return h
}

func (l *migrationLocker) SessionLock(ctx context.Context, conn *sql.Conn) error {
	began := time.Now()
	poll := time.Second
	if l.every > 0 && l.every < poll {
		poll = l.every
	}
	lastReport := began
	for {
		var got bool
		if err := conn.QueryRowContext(ctx, `SELECT pg_catalog.pg_try_advisory_lock($1)`, MigrationLockID).Scan(&got); err != nil {
			return fmt.Errorf("taking the migration lock %d: %w", MigrationLockID, err)
		}
		if got {
			return nil
		}
		if l.every > 0 && time.Since(lastReport) >= l.every {
			lastReport = time.Now()
			l.report(l.holder(ctx, conn, began))
		}
		if time.Since(began) >= l.wait {
			return fmt.Errorf("the migration lock %d (another migrator) was not free within %v: held by %s",
				MigrationLockID, l.wait, l.holder(ctx, conn, began))
		}
		select {
		case <-ctx.Done():
			hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			h := l.holder(hctx, conn, began)
			cancel()
			return fmt.Errorf("waiting for the migration lock %d, held by %s: %w", MigrationLockID, h, ctx.Err())
		case <-time.After(poll):
		}
	}
}

func (l *migrationLocker) SessionUnlock(ctx context.Context, conn *sql.Conn) error {
	var released bool
	if err := conn.QueryRowContext(ctx, `SELECT pg_catalog.pg_advisory_unlock($1)`, MigrationLockID).Scan(&released); err != nil {
		return fmt.Errorf("releasing the migration lock %d: %w", MigrationLockID, err)
	}
	if !released {
		return fmt.Errorf("releasing the migration lock %d: this session did not hold it", MigrationLockID)
	}
	return nil
}
