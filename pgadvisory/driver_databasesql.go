package pgadvisory

import (
	"context"
	"database/sql"
	"strconv"

	"github.com/lockgen/lockgen/internal/sqlcstd"
)

// RunExclusive runs fn inside a transaction that holds the transaction-scoped
// advisory lock lockID (pg_try_advisory_xact_lock), and commits fn's work and
// releases the lock together.
//
// It begins a READ COMMITTED transaction and takes the lock in its own
// statement, so fn's statements see everything the previous holder committed.
// If the lock is held elsewhere it returns [ErrLocked] without calling fn. If
// fn returns an error the transaction is rolled back and that error returned
// (wrapped in an [*Error] when it has a known kind, such as [ErrDeadlock]). If
// fn panics, the transaction is rolled back and the panic continues. If ctx is
// done before or during the call, the error wraps ctx.Err() and nothing is
// committed. Otherwise the transaction commits; a failed COMMIT is reported,
// as [ErrCommitUnknown] when the connection broke during it.
//
// Round trips: BEGIN, the lock statement, COMMIT, as in a hand-written
// version; options add none. [RunExclusivePgx] needs two.
//
// All writes that must be protected by the lock go through tx: work done on
// other connections is not covered (see the fencing documentation).
func RunExclusive(ctx context.Context, db *sql.DB, lockID int64, fn func(*sql.Tx) error, opts ...Option) error {
	c, err := newCall(lockID, opts, "*sql.DB", db == nil, fn == nil)
	if err != nil {
		return err
	}
	d := &stdlibTx{db: db}
	return run(ctx, c, d, func() error { return fn(d.tx) })
}

// stdlibTx runs the protocol over database/sql.
type stdlibTx struct {
	db *sql.DB
	tx *sql.Tx
}

func (d *stdlibTx) begin(ctx context.Context, readOnly bool, st lockStatement) (lockResult, error) {
	var res lockResult
	tx, err := d.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted, ReadOnly: readOnly})
	if err != nil {
		return res, err
	}
	row := tx.QueryRowContext(ctx, st.sql, st.args...)
	if st.fenced {
		var token sql.NullInt64
		err = row.Scan(&res.granted, &res.standby, &token)
		res.token = token.Int64
	} else {
		err = row.Scan(&res.granted, &res.standby)
	}
	if err != nil {
		_ = tx.Rollback()
		return res, err
	}
	d.tx = tx
	return res, nil
}

func (d *stdlibTx) txKey() any { return d.tx }

func (d *stdlibTx) publish(ctx context.Context, lockID, token int64, timeout string) (bool, error) {
	n, err := sqlcstd.New().PublishFence(ctx, d.db, sqlcstd.PublishFenceParams{LockID: lockID, Token: token, LockTimeout: timeout})
	return n == 1, err
}

func (d *stdlibTx) runOnceDone(ctx context.Context, lockID int64, window string) (bool, error) {
	return sqlcstd.New().RunOnceDone(ctx, d.tx, sqlcstd.RunOnceDoneParams{LockID: lockID, WindowKey: window})
}

func (d *stdlibTx) recordRun(ctx context.Context, r runRecord) error {
	return sqlcstd.New().RecordRun(ctx, d.tx, sqlcstd.RecordRunParams{
		LockID:    r.lockID,
		WindowKey: r.window,
		Token:     sql.NullInt64{Int64: r.token, Valid: r.token != 0},
		Holder:    r.holder,
		StartedAt: r.startedAt,
	})
}

func (d *stdlibTx) commit(context.Context) error { return d.tx.Commit() }

func (d *stdlibTx) rollback(context.Context) error { return d.tx.Rollback() }

func (d *stdlibTx) maxConns() int { return d.db.Stats().MaxOpenConnections }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
