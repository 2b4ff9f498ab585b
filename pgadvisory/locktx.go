package pgadvisory

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// LockTx takes the transaction-scoped advisory lock of lock inside tx, a
// transaction the caller already has: the lock is released when tx commits
// or rolls back, and nothing else is sent. It costs one statement, one
// round trip. [WithWait], [WithShared] and [WithLocks] apply (and the
// observers, which see a [CallLockTx]); every other option is refused with
// [ErrInvalidArgument]: [WithFencing] among them, because publishing a
// token needs a commit of its own before the work.
//
// The same statement refuses, taking no lock, a transaction above READ
// COMMITTED ([ErrIsolationLevel]): there the snapshot is taken at the
// start of the transaction's first statement, which may predate the
// previous holder's commit, so the work could miss what it wrote. It
// refuses a hot standby too ([ErrStandby]). A lock held elsewhere returns
// [ErrLocked] (Op "lock"); tx is still usable, holding no lock of this
// call, and the caller decides whether to roll back.
//
// Under READ COMMITTED each statement sees what was committed before it
// started, so statements after LockTx see the previous holder's work; take
// the lock before reading what it protects. A failed lock statement (a
// WithWait timeout, [ErrLockTimeout]; a deadlock) aborts tx, as any failed
// statement does: roll it back. The server's statement_timeout bounds a
// wait here too, since the statement runs under tx's settings.
func (l *Locker[TTx]) LockTx(ctx context.Context, tx TTx, lock Lock, opts ...Option) error {
	if l.s.closed.Load() {
		return closedErr(OpBegin, lock)
	}
	c, err := newCall(l.s, lock.ID, lock.named(opts), famLockTx, "tx", l.d.nilTx(tx), false)
	if err != nil {
		return err
	}
	return c.observed(ctx, CallLockTx, "", 0, func(ctx context.Context) error {
		if err := ctx.Err(); err != nil {
			return c.failure(ctx, OpBegin, err)
		}
		start := time.Now()
		query, args := c.lockTxSQL()
		res, err := l.d.lockTxRow(ctx, tx, query, args)
		switch {
		case err != nil:
			return c.failure(ctx, OpLock, err)
		case res.isolation != "read committed":
			return c.refusal(ctx, OpLock, ErrIsolationLevel, fmt.Errorf("the transaction's isolation level is %s; no lock was taken", res.isolation))
		case res.standby:
			return c.refusal(ctx, OpLock, ErrStandby, nil)
		case !res.granted:
			return c.locked()
		}
		c.granted(time.Since(start), 0)
		return nil
	})
}

// lockTxResult is what LockTx's statement returned.
type lockTxResult struct {
	granted, standby bool
	isolation        string // transaction_isolation
}

var lockTxCache sync.Map // lockShape -> string

// lockTxSQL is LockTx's statement: the transaction lock statement of c
// (see lockSQL), run only when the transaction is at READ COMMITTED and the
// server is not a standby, else nothing is taken (and a waiting call's
// lock_timeout is put back). It returns (granted, standby, isolation):
//
//	SELECT CASE WHEN iso.level = 'read committed' AND NOT pg_is_in_recovery()
//	            THEN pg_try_advisory_xact_lock($1) ELSE false END,
//	       pg_is_in_recovery(), iso.level
//	  FROM (SELECT current_setting('transaction_isolation') AS level) AS iso
func (c *callState) lockTxSQL() (string, []any) {
	shape := lockShape{set: len(c.ids) > 1, shared: c.shared, wait: c.wait}
	args := make([]any, 0, 2)
	args = append(args, c.idsArg())
	if shape.wait {
		args = append(args, c.lockTimeoutArg())
	}
	if s, ok := lockTxCache.Load(shape); ok {
		return s.(string), args
	}
	s := buildLockTxSQL(shape)
	lockTxCache.Store(shape, s)
	return s, args
}

// buildLockTxSQL writes LockTx's statement around the lock expression and
// the lock_timeout subquery of buildLockSQL(s), which writes
// "SELECT <expression>, pg_is_in_recovery()[ FROM <subquery>]".
func buildLockTxSQL(s lockShape) string {
	expr, from, ok := strings.Cut(strings.TrimPrefix(buildLockSQL(s), "SELECT "), ", pg_is_in_recovery()")
	if !ok {
		panic("pgadvisory: internal error: unexpected lock statement shape")
	}
	otherwise := "false"
	if s.wait {
		otherwise = "set_config('lock_timeout', lock_timeout.previous, true) IS NULL"
	}
	var b strings.Builder
	b.WriteString("SELECT CASE WHEN iso.level = 'read committed' AND NOT pg_is_in_recovery() THEN ")
	b.WriteString(expr)
	b.WriteString(" ELSE ")
	b.WriteString(otherwise)
	b.WriteString(" END, pg_is_in_recovery(), iso.level FROM (SELECT current_setting('transaction_isolation') AS level) AS iso")
	if from != "" {
		b.WriteString(", ")
		b.WriteString(strings.TrimPrefix(from, " FROM "))
	}
	return b.String()
}
