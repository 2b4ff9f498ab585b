package doctor

import (
	"context"
	"fmt"
	"strconv"
)

// The shares of the lock table's capacity in use at which lock_table warns
// and fails.
const (
	lockTableWarn = 0.5
	lockTableFail = 0.9
)

// lockUseSQL reads pg_locks once: the entries in the shared lock table (a
// fast-path lock takes none), the advisory ones among them, and the session
// holding most.
const lockUseSQL = `WITH l AS MATERIALIZED (
	SELECT pid, locktype FROM pg_catalog.pg_locks WHERE NOT fastpath
), top AS (
	SELECT pid, count(*) AS n FROM l GROUP BY pid ORDER BY n DESC LIMIT 1
)
SELECT (SELECT count(*) FROM l),
       (SELECT count(*) FROM l WHERE locktype = 'advisory'),
       COALESCE((SELECT pid FROM top), 0),
       COALESCE((SELECT n FROM top), 0)`

// lockTableSettings are the settings that size the shared lock table, in
// the order capacity reads them.
var lockTableSettings = []string{"max_locks_per_transaction", "max_connections", "autovacuum_max_workers",
	"max_worker_processes", "max_wal_senders", "max_prepared_transactions"}

// checkLockTable compares the shared lock table's capacity with the locks
// held now and, with declarations, with what they can take at once.
//
// PostgreSQL sizes the table for max_locks_per_transaction locks per
// backend slot and prepared transaction (lock.c: max_locks_per_xact ×
// (MaxBackends + max_prepared_xacts)), where MaxBackends counts every
// process that can take locks: max_connections + autovacuum_max_workers +
// 1 (the autovacuum launcher) + max_worker_processes + max_wal_senders
// (postinit.c, PostgreSQL 12 to 16; later versions reserve another special
// worker slot). The table can also grow into spare shared memory, so this
// capacity is a floor: a session may take more before SQLSTATE 53200.
func checkLockTable(ctx context.Context, e *env) Check {
	var v [6]int64
	for i, name := range lockTableSettings {
		s, _, err := e.setting(ctx, name)
		if err != nil {
			return unanswered(name, err)
		}
		v[i], _ = strconv.ParseInt(s.value, 10, 64)
	}
	perTx, conns, autovacuum, workers, walSenders, prepared := v[0], v[1], v[2], v[3], v[4], v[5]
	backends := conns + autovacuum + 1 + workers + walSenders
	capacity := perTx * (backends + prepared)
	var held, advisory, topN int64
	var topPID int32
	if err := e.DB.QueryRowContext(ctx, lockUseSQL).Scan(&held, &advisory, &topPID, &topN); err != nil {
		return unanswered("pg_locks", err)
	}
	used := float64(held) / float64(max(capacity, 1))
	detail := fmt.Sprintf("capacity max_locks_per_transaction × (max_connections + autovacuum_max_workers + 1 + max_worker_processes + max_wal_senders + max_prepared_transactions) = %d × (%d + %d + 1 + %d + %d + %d) = %d lock slots, as PostgreSQL sizes its shared lock table (every backend slot, autovacuum and background workers and WAL senders too; spare shared memory can add more); held now %d (%.0f%%), %d of them advisory",
		perTx, conns, autovacuum, workers, walSenders, prepared, capacity, held, 100*used, advisory)
	if topN > 0 {
		detail += fmt.Sprintf("; the session holding most is pid %d with %d", topPID, topN)
	}
	free := capacity - held
	overDeclared := false
	if e.Declared != nil {
		plain := 0
		for _, d := range e.Declared {
			if d.Params == nil {
				plain++
			}
		}
		detail += fmt.Sprintf(". %s declares %d lock(s) (%d plain, %d parameterized); locks.yaml declares one lock per call (a WithLocks set is built in code, not declared), so the widest declared set is 1 lock: one slot per call, %d slots if every plain lock were held at once, one per instance held of a parameterized lock",
			e.Source, len(e.Declared), plain, len(e.Declared)-plain, plain)
		overDeclared = int64(plain) > free
	}
	const fix = "find the session holding many locks (SELECT pid, count(*) FROM pg_locks GROUP BY 1 ORDER BY 2 DESC) or raise max_locks_per_transaction (restart needed)"
	switch {
	case used >= lockTableFail:
		return Check{Status: Fail, Detail: detail + fmt.Sprintf(": at %.0f%% a lock statement can fail with SQLSTATE 53200 (ErrLockTableFull) anywhere in the cluster", 100*used), Fix: fix}
	case used >= lockTableWarn || overDeclared:
		return Check{Status: Warn, Detail: detail + fmt.Sprintf(": %d slots left", free), Fix: fix}
	}
	return Check{Status: Pass, Detail: detail}
}
