package pgadvisory

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockgen/lockgen/internal/sqlcpgx"
)

// pgxTx runs the protocol over a pgx pool.
type pgxTx struct {
	pool *pgxpool.Pool
	tx   pgx.Tx
}

func (d *pgxTx) begin(ctx context.Context, _ *txContext, readOnly bool, st lockStatement, claim *runClaim) (lockResult, error) {
	var res lockResult
	var b pgx.Batch
	opts := pgx.TxOptions{IsoLevel: pgx.ReadCommitted}
	if readOnly {
		opts.AccessMode = pgx.ReadOnly
	}
	b.BeginTx(opts)
	locked := false
	if st.prelude != "" {
		b.Queue(st.prelude)
	}
	if st.fenced {
		// The fenced acquisition travels with BEGIN in the same batch; the
		// transaction is taken (locked) once the hand-over has run.
		st.queueFenced(&b, &res, &locked)
	} else if st.extra != nil {
		b.Queue(st.sql, st.args...).QueryRow(func(row pgx.Row) error {
			err := row.Scan(append([]any{&res.granted, &res.standby}, st.extra...)...)
			locked = err == nil
			return err
		})
	} else {
		b.Queue(st.sql, st.args...).QueryRow(func(row pgx.Row) error {
			err := row.Scan(&res.granted, &res.standby)
			locked = err == nil
			return err
		})
	}
	if claim != nil {
		// The claim writes only if the lock statement granted the locks
		// (pgadvisory.granted), so a loser's claim costs nothing.
		query, args := claimStatement(claim)
		b.Queue(query, args...).QueryRow(func(row pgx.Row) error {
			res.claimSent = true
			err := row.Scan(&res.claimed)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			res.claimErr = err
			return err
		})
	}
	br := d.pool.SendBatch(ctx, &b)
	tx := br.Tx()
	err := br.Close()
	if err != nil && !(locked && res.claimErr != nil) {
		rctx, cancel := cleanupContext(ctx)
		if st.fenced {
			// Session locks may be left on the backend: end it.
			closePgxTx(rctx, tx)
		}
		_ = tx.Rollback(rctx)
		cancel()
		return res, err
	}
	// Without error, or with only the claim failed: the protocol decides
	// (a standby, a lock not granted, the claim's error) and rolls back.
	d.tx = tx
	return res, nil
}

// closePgxTx closes tx's connection, so that the pool destroys it when tx
// releases it: the backend ends, and any lock it holds with it.
func closePgxTx(ctx context.Context, tx pgx.Tx) {
	if c := tx.Conn(); c != nil {
		_ = c.Close(ctx)
	}
}

// claimStatement is the claim's SQL and arguments, as sqlc generated them
// (queries/runonce.sql), to be queued behind the lock statement.
func claimStatement(cl *runClaim) (string, []any) {
	var r statementRecorder
	_, _ = sqlcpgx.New().ClaimRun(context.Background(), &r, sqlcpgx.ClaimRunParams{LockID: cl.lockID, WindowKey: cl.window, Holder: cl.holder})
	return r.sql, r.args
}

// statementRecorder is a sqlcpgx.DBTX that records the statement a
// generated query would run instead of running it.
type statementRecorder struct {
	sql  string
	args []any
}

// errRecorded is what a recorded statement returns: it did not run.
var errRecorded = errors.New("statement recorded, not run")

func (r *statementRecorder) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	r.sql, r.args = sql, args
	return pgconn.CommandTag{}, errRecorded
}

func (r *statementRecorder) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	r.sql, r.args = sql, args
	return nil, errRecorded
}

func (r *statementRecorder) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	r.sql, r.args = sql, args
	return recordedRow{}
}

// recordedRow is the row of a recorded statement.
type recordedRow struct{}

func (recordedRow) Scan(...any) error { return errRecorded }

func (d *pgxTx) beginsUnderTxContext() bool { return false }

func (d *pgxTx) txKey() any { return d.tx }

func (d *pgxTx) claim(ctx context.Context, cl *runClaim) (bool, error) {
	claimed, err := sqlcpgx.New().ClaimRun(ctx, d.tx, sqlcpgx.ClaimRunParams{LockID: cl.lockID, WindowKey: cl.window, Holder: cl.holder})
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return claimed, err
}

func (d *pgxTx) commit(ctx context.Context) (bool, error) {
	if d.endedByFn() {
		return true, nil
	}
	if d.tx.Conn().IsClosed() {
		// fn's last statement broke the connection, and fn returned nil.
		_ = d.tx.Rollback(ctx) // returns the connection to the pool, which discards it
		return false, &errNotSent{pgconn.ErrConnClosed}
	}
	return false, d.tx.Commit(ctx)
}

func (d *pgxTx) rollback(ctx context.Context) (bool, error) {
	if d.endedByFn() {
		return true, nil
	}
	return false, d.tx.Rollback(ctx)
}

// endedByFn reports, without a round trip, that fn ended the transaction:
// with tx.Commit or tx.Rollback (the Tx is closed, and its connection is
// back in the pool), or with a COMMIT or ROLLBACK statement (the
// connection is outside a transaction; the connection is then released
// with a ROLLBACK the server answers with a warning). An empty batch is the
// one call that asks the Tx whether it is closed without sending anything,
// and the connection's status may be read only while it is still ours.
func (d *pgxTx) endedByFn() bool {
	if err := d.tx.SendBatch(context.Background(), &pgx.Batch{}).Close(); errors.Is(err, pgx.ErrTxClosed) {
		return true
	}
	if d.tx.Conn().PgConn().TxStatus() == 'I' {
		rctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		_ = d.tx.Rollback(rctx)
		cancel()
		return true
	}
	return false
}

func (d *pgxTx) pipelined() bool { return true }

func (d *pgxTx) statementTimeout(ctx context.Context) (text string, ms int64, err error) {
	err = d.pool.QueryRow(ctx, statementTimeoutSQL).Scan(&text, &ms)
	return text, ms, err
}

// pgxSession is a pgx pool connection held for a session lock.
type pgxSession struct{ conn *pgxpool.Conn }

// pgxSessions opens session-lock connections from pool.
func pgxSessions(pool *pgxpool.Pool) func(context.Context) (sessionConn, error) {
	return func(ctx context.Context) (sessionConn, error) {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		return &pgxSession{conn: conn}, nil
	}
}

func (s *pgxSession) queryRow(ctx context.Context, query string, args []any, dest ...any) error {
	return s.conn.QueryRow(ctx, query, args...).Scan(dest...)
}

func (s *pgxSession) simpleQueryRow(ctx context.Context, query string, dest ...any) error {
	return s.conn.QueryRow(ctx, query, pgx.QueryExecModeSimpleProtocol).Scan(dest...)
}

func (s *pgxSession) simpleExec(ctx context.Context, query string) error {
	_, err := s.conn.Exec(ctx, query) // without arguments, pgx uses the simple protocol
	return err
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
