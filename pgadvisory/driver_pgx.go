package pgadvisory

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockgen/lockgen/internal/sqlcpgx"
)

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

// pgxSession is a pgx pool connection held for a session lock.
type pgxSession struct{ conn *pgxpool.Conn }

func (s *pgxSession) queryRow(ctx context.Context, query string, args []any, dest ...any) error {
	return s.conn.QueryRow(ctx, query, args...).Scan(dest...)
}

func (s *pgxSession) announcedPID() (uint32, bool) {
	return s.conn.Conn().PgConn().PID(), true
}

func (s *pgxSession) release() { s.conn.Release() }

func (s *pgxSession) discard() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = s.conn.Hijack().Close(ctx)
}
