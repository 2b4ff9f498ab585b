package pgadvisory

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/lockgen/lockgen/internal/sqlcstd"
)

// databaseSQLTx runs the protocol over database/sql.
type databaseSQLTx struct {
	db   *sql.DB
	tx   *sql.Tx
	conn *sql.Conn // a fenced call's connection, held to the end; nil otherwise
}

func (d *databaseSQLTx) begin(ctx context.Context, txc *txContext, readOnly bool, st lockStatement, _ *runClaim) (lockResult, error) {
	if st.fenced {
		return d.beginFenced(ctx, txc, st)
	}
	var res lockResult
	// The transaction keeps the context it began with for COMMIT: txc,
	// linked to ctx while BEGIN runs.
	stop := txc.link(ctx)
	tx, err := d.db.BeginTx(txc.or(ctx), &sql.TxOptions{Isolation: sql.LevelReadCommitted, ReadOnly: readOnly})
	stop()
	if err != nil {
		return res, err
	}
	dest := []any{&res.granted, &res.standby}
	if st.extra != nil {
		dest = append(dest, st.extra...)
	}
	if err := tx.QueryRowContext(ctx, st.sql, st.args...).Scan(dest...); err != nil {
		_ = tx.Rollback()
		return res, err
	}
	d.tx = tx
	return res, nil
}

// beginFenced runs the fenced acquisition: BEGIN, then the acquisition in
// one round trip. With pgx's stdlib it sends the statements as a pgx batch
// on the driver's connection, inside the transaction database/sql began
// (prepared statements, as the pgx front door's); with other drivers it
// sends fencedMessage(st), all of it with its arguments inlined, as one
// simple-protocol query, whose later statements' errors surface from Scan
// (which closes the rows). It holds the connection itself (a *sql.Conn), so
// that it can close it when the acquisition fails.
func (d *databaseSQLTx) beginFenced(ctx context.Context, txc *txContext, st lockStatement) (lockResult, error) {
	var res lockResult
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return res, err
	}
	stop := txc.link(ctx)
	tx, err := conn.BeginTx(txc.or(ctx), &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	stop()
	if err != nil {
		_ = conn.Close()
		return res, err
	}
	viaPgx := false
	err = conn.Raw(func(dc any) error {
		pc, ok := dc.(interface{ Conn() *pgx.Conn })
		if !ok {
			return nil
		}
		viaPgx = true
		var b pgx.Batch
		st.queueFenced(&b, &res, nil)
		err := pc.Conn().SendBatch(ctx, &b).Close()
		if err != nil {
			// Session locks may be left on the backend: end it.
			cctx, cancel := cleanupContext(ctx)
			_ = pc.Conn().Close(cctx)
			cancel()
		}
		return err
	})
	if !viaPgx && err == nil {
		var token sql.NullInt64
		err = tx.QueryRowContext(ctx, fencedMessage(st)).Scan(append([]any{&res.granted, &res.standby, &token}, st.extra...)...)
		res.token = token.Int64
		if err != nil {
			// Session locks may be left on the backend: end it.
			_ = conn.Raw(func(dc any) error {
				if c, ok := dc.(driver.Conn); ok {
					_ = c.Close()
				}
				return nil
			})
		}
	}
	if err != nil {
		_ = tx.Rollback()
		_ = conn.Close() // the pool finds the driver connection closed and drops it
		return res, err
	}
	d.tx, d.conn = tx, conn
	return res, nil
}

func (d *databaseSQLTx) beginsUnderTxContext() bool { return true }

func (d *databaseSQLTx) txKey() any { return d.tx }

func (d *databaseSQLTx) claim(ctx context.Context, cl *runClaim) (bool, error) {
	claimed, err := sqlcstd.New().ClaimRun(ctx, d.tx, sqlcstd.ClaimRunParams{LockID: cl.lockID, WindowKey: cl.window, Holder: cl.holder})
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return claimed, err
}

// commit sends COMMIT under the context the transaction began with (see
// begin); ended is always false: database/sql reports a transaction that
// fn ended as sql.ErrTxDone.
func (d *databaseSQLTx) commit(context.Context) (bool, error) {
	defer d.releaseConn()
	return false, d.tx.Commit()
}

func (d *databaseSQLTx) rollback(context.Context) (bool, error) {
	defer d.releaseConn()
	return false, d.tx.Rollback()
}

// releaseConn returns a fenced call's connection to the pool once its
// transaction has ended.
func (d *databaseSQLTx) releaseConn() {
	if d.conn != nil {
		_ = d.conn.Close()
	}
}

func (d *databaseSQLTx) pipelined() bool { return false }

func (d *databaseSQLTx) statementTimeout(ctx context.Context) (text string, ms int64, err error) {
	err = d.db.QueryRowContext(ctx, statementTimeoutSQL).Scan(&text, &ms)
	return text, ms, err
}

// databaseSQLSession is a database/sql connection held for a session lock.
type databaseSQLSession struct{ conn *sql.Conn }

// databaseSQLSessions opens session-lock connections from db.
func databaseSQLSessions(db *sql.DB) func(context.Context) (sessionConn, error) {
	return func(ctx context.Context) (sessionConn, error) {
		conn, err := db.Conn(ctx)
		if err != nil {
			return nil, err
		}
		return &databaseSQLSession{conn: conn}, nil
	}
}

func (s *databaseSQLSession) queryRow(ctx context.Context, query string, args []any, dest ...any) error {
	return s.conn.QueryRowContext(ctx, query, args...).Scan(dest...)
}

func (s *databaseSQLSession) simpleQueryRow(ctx context.Context, query string, dest ...any) error {
	handled, err := s.withPgx(func(c *pgx.Conn) error {
		return c.QueryRow(ctx, query, pgx.QueryExecModeSimpleProtocol).Scan(dest...)
	})
	if handled {
		return err
	}
	return s.conn.QueryRowContext(ctx, query).Scan(dest...)
}

func (s *databaseSQLSession) simpleExec(ctx context.Context, query string) error {
	handled, err := s.withPgx(func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, query) // without arguments, pgx uses the simple protocol
		return err
	})
	if handled {
		return err
	}
	_, err = s.conn.ExecContext(ctx, query)
	return err
}

// withPgx runs fn on the *pgx.Conn under the connection, when the driver
// is pgx's stdlib; handled is false for other drivers.
func (s *databaseSQLSession) withPgx(fn func(*pgx.Conn) error) (handled bool, err error) {
	rawErr := s.conn.Raw(func(dc any) error {
		if pc, is := dc.(interface{ Conn() *pgx.Conn }); is {
			handled = true
			err = fn(pc.Conn())
		}
		return nil
	})
	if !handled && rawErr != nil {
		return true, rawErr
	}
	return handled, err
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
