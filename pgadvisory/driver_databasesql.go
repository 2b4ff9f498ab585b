package pgadvisory

import (
	"context"
	"database/sql"
	"database/sql/driver"

	"github.com/jackc/pgx/v5"

	"github.com/lockgen/lockgen/internal/sqlcstd"
)

// databaseSQLTx runs the protocol over database/sql.
type databaseSQLTx struct {
	db *sql.DB
	tx *sql.Tx
}

func (d *databaseSQLTx) begin(ctx context.Context, readOnly bool, st lockStatement) (lockResult, error) {
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

func (d *databaseSQLTx) txKey() any { return d.tx }

func (d *databaseSQLTx) publish(ctx context.Context, lockID, token int64, timeout string) (bool, error) {
	n, err := sqlcstd.New().PublishFence(ctx, d.db, sqlcstd.PublishFenceParams{LockID: lockID, Token: token, LockTimeout: timeout})
	return n == 1, err
}

func (d *databaseSQLTx) runOnceDone(ctx context.Context, lockID int64, window string) (bool, error) {
	return sqlcstd.New().RunOnceDone(ctx, d.tx, sqlcstd.RunOnceDoneParams{LockID: lockID, WindowKey: window})
}

func (d *databaseSQLTx) recordRun(ctx context.Context, r runRecord) error {
	return sqlcstd.New().RecordRun(ctx, d.tx, sqlcstd.RecordRunParams{
		LockID:    r.lockID,
		WindowKey: r.window,
		Token:     sql.NullInt64{Int64: r.token, Valid: r.token != 0},
		Holder:    r.holder,
		StartedAt: r.startedAt,
	})
}

func (d *databaseSQLTx) commit(context.Context) error { return d.tx.Commit() }

func (d *databaseSQLTx) rollback(context.Context) error { return d.tx.Rollback() }

func (d *databaseSQLTx) maxConns() int { return d.db.Stats().MaxOpenConnections }

// databaseSQLSession is a database/sql connection held for a session lock.
type databaseSQLSession struct{ conn *sql.Conn }

func (s *databaseSQLSession) queryRow(ctx context.Context, query string, args []any, dest ...any) error {
	return s.conn.QueryRowContext(ctx, query, args...).Scan(dest...)
}

func (s *databaseSQLSession) announcedPID() (pid uint32, ok bool) {
	_ = s.conn.Raw(func(dc any) error {
		if pc, is := dc.(interface{ Conn() *pgx.Conn }); is {
			pid, ok = pc.Conn().PgConn().PID(), true
		}
		return nil
	})
	return pid, ok
}

func (s *databaseSQLSession) release() { _ = s.conn.Close() }

func (s *databaseSQLSession) discard() {
	// Returning ErrBadConn from Raw makes database/sql close the connection.
	_ = s.conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = s.conn.Close()
}
