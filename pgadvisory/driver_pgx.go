package pgadvisory

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockgen/lockgen/internal/sqlcpgx"
)

// RunExclusivePgx is [RunExclusive] for a pgx pool: fn receives a [pgx.Tx].
//
// BEGIN and the lock statement travel in one pipelined round trip (pgx's
// [pgx.Batch.BeginTx]), so an uncontended call costs two round trips (BEGIN
// with the lock, then COMMIT) and a contended one returns [ErrLocked] after
// one; the ROLLBACK that returns the loser's connection to the pool finishes
// in the background. Behaviour, options and errors are those of
// [RunExclusive].
//
// fn must not call tx.Begin expecting a separate transaction: pgx implements
// it as a savepoint inside the lock transaction.
func RunExclusivePgx(ctx context.Context, pool *pgxpool.Pool, lockID int64, fn func(pgx.Tx) error, opts ...Option) error {
	c, err := newCall(lockID, opts, "*pgxpool.Pool", pool == nil, fn == nil)
	if err != nil {
		return err
	}
	d := &pgxTx{pool: pool}
	return run(ctx, c, d, func() error { return fn(d.tx) })
}

// pgxTx runs the protocol over a pgx pool.
type pgxTx struct {
	pool *pgxpool.Pool
	tx   pgx.Tx
}

func (d *pgxTx) begin(ctx context.Context, readOnly bool, st lockStatement) (lockResult, error) {
	var res lockResult
	var b pgx.Batch
	opts := pgx.TxOptions{IsoLevel: pgx.ReadCommitted}
	if readOnly {
		opts.AccessMode = pgx.ReadOnly
	}
	b.BeginTx(opts)
	if st.fenced {
		b.Queue(st.sql, st.args...).QueryRow(func(row pgx.Row) error {
			var token *int64
			err := row.Scan(&res.granted, &res.standby, &token)
			if token != nil {
				res.token = *token
			}
			return err
		})
	} else {
		b.Queue(st.sql, st.args...).QueryRow(func(row pgx.Row) error { return row.Scan(&res.granted, &res.standby) })
	}
	br := d.pool.SendBatch(ctx, &b)
	tx := br.Tx()
	if err := br.Close(); err != nil {
		rctx, cancel := cleanupContext(ctx)
		_ = tx.Rollback(rctx)
		cancel()
		return res, err
	}
	d.tx = tx
	return res, nil
}

func (d *pgxTx) txKey() any { return d.tx }

func (d *pgxTx) publish(ctx context.Context, lockID, token int64, timeout string) (bool, error) {
	n, err := sqlcpgx.New().PublishFence(ctx, d.pool, sqlcpgx.PublishFenceParams{LockID: lockID, Token: token, LockTimeout: timeout})
	return n == 1, err
}

func (d *pgxTx) runOnceDone(ctx context.Context, lockID int64, window string) (bool, error) {
	return sqlcpgx.New().RunOnceDone(ctx, d.tx, sqlcpgx.RunOnceDoneParams{LockID: lockID, WindowKey: window})
}

func (d *pgxTx) recordRun(ctx context.Context, r runRecord) error {
	return sqlcpgx.New().RecordRun(ctx, d.tx, sqlcpgx.RecordRunParams{
		LockID:    r.lockID,
		WindowKey: r.window,
		Token:     pgtype.Int8{Int64: r.token, Valid: r.token != 0},
		Holder:    r.holder,
		StartedAt: pgtype.Timestamptz{Time: r.startedAt, Valid: true},
	})
}

func (d *pgxTx) commit(ctx context.Context) error { return d.tx.Commit(ctx) }

func (d *pgxTx) rollback(ctx context.Context) error { return d.tx.Rollback(ctx) }

func (d *pgxTx) maxConns() int { return int(d.pool.Config().MaxConns) }
