// Package pglock is the design source's PostgreSQL lock, the baseline that
// lockgen's benchmarks and fault tests measure pgadvisory against: package
// pglock from the blog post "Distributed Locking: Redis, PostgreSQL và những
// trade-off" (000_820481cf010be46d.txt), copied verbatim, comments included.
// It lives in one place so that every suite measures the same code. Do not use it: it has none of pgadvisory's protections (typed
// errors, isolation level, standby check, unknown-commit reporting).
package pglock

import (
	"context"
	"database/sql"
	"errors"
)

var ErrLocked = errors.New("pglock: job đang được instance khác chạy")

// RunExclusive chạy fn khi và chỉ khi giành được advisory lock lockID.
// Lock tự giải phóng khi transaction commit hoặc rollback.
func RunExclusive(ctx context.Context, db *sql.DB, lockID int64, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // no-op nếu đã commit

	var locked bool
	if err := tx.QueryRowContext(ctx, "SELECT pg_try_advisory_xact_lock($1)", lockID).Scan(&locked); err != nil {
		return err
	}
	if !locked {
		return ErrLocked
	}

	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}
