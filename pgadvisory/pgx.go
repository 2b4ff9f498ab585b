package pgadvisory

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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
	c, err := newConfig(lockID, opts)
	if err != nil {
		return err
	}
	if pool == nil {
		return c.invalid("begin", errors.New("nil *pgxpool.Pool"))
	}
	if fn == nil {
		return c.invalid("begin", errors.New("nil fn"))
	}
	d := &pgxTx{pool: pool}
	return run(ctx, c, d, func() error { return fn(d.tx) })
}

// pgxTx runs the protocol over a pgx pool.
type pgxTx struct {
	pool *pgxpool.Pool
	tx   pgx.Tx
}

func (d *pgxTx) begin(ctx context.Context, readOnly bool, query string, args []any) (bool, bool, error) {
	var b pgx.Batch
	opts := pgx.TxOptions{IsoLevel: pgx.ReadCommitted}
	if readOnly {
		opts.AccessMode = pgx.ReadOnly
	}
	b.BeginTx(opts)
	var granted, standby bool
	b.Queue(query, args...).QueryRow(func(row pgx.Row) error { return row.Scan(&granted, &standby) })
	br := d.pool.SendBatch(ctx, &b)
	tx := br.Tx()
	if err := br.Close(); err != nil {
		rctx, cancel := cleanupContext(ctx)
		_ = tx.Rollback(rctx)
		cancel()
		return false, false, err
	}
	d.tx = tx
	return granted, standby, nil
}

func (d *pgxTx) commit(ctx context.Context) error { return d.tx.Commit(ctx) }

func (d *pgxTx) rollback(ctx context.Context) error { return d.tx.Rollback(ctx) }
