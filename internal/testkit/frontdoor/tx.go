package frontdoor

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"

	"github.com/lockgen/lockgen/pgadvisory"
)

// Tx is the transaction fn receives, whichever front door began it.
type Tx interface {
	// Exec runs a statement.
	Exec(ctx context.Context, query string, args ...any) error
	// ExecCount runs a statement and returns the number of rows it affected.
	ExecCount(ctx context.Context, query string, args ...any) (int64, error)
	// QueryRow runs a query that returns at most one row.
	QueryRow(ctx context.Context, query string, args ...any) Row
	// QueryInt runs a query that returns one integer value.
	QueryInt(ctx context.Context, query string, args ...any) (int64, error)
	// FencingToken is the Locker's FencingToken for a transaction of a
	// Locker call, else pgadvisory.FencingToken or FencingTokenPgx.
	FencingToken() (int64, bool)
	// SetFencingToken is pgadvisory.SetFencingToken or SetFencingTokenPgx.
	SetFencingToken(ctx context.Context, token int64) error
}

// Row is *sql.Row or pgx.Row.
type Row interface{ Scan(dest ...any) error }

// SQLTx is tx as a Tx.
func SQLTx(tx *sql.Tx) Tx { return sqlTx{tx: tx} }

// PgxTx is tx as a Tx.
func PgxTx(tx pgx.Tx) Tx { return pgxTx{tx: tx} }

// sqlTx is a database/sql transaction; l, if not nil, is the Locker whose
// call began it.
type sqlTx struct {
	tx *sql.Tx
	l  *pgadvisory.Locker[*sql.Tx]
}

func (q sqlTx) Exec(ctx context.Context, query string, args ...any) error {
	_, err := q.tx.ExecContext(ctx, query, args...)
	return err
}

func (q sqlTx) ExecCount(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := q.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (q sqlTx) QueryRow(ctx context.Context, query string, args ...any) Row {
	return q.tx.QueryRowContext(ctx, query, args...)
}

func (q sqlTx) QueryInt(ctx context.Context, query string, args ...any) (n int64, err error) {
	err = q.tx.QueryRowContext(ctx, query, args...).Scan(&n)
	return n, err
}

func (q sqlTx) FencingToken() (int64, bool) {
	if q.l != nil {
		return q.l.FencingToken(q.tx)
	}
	return pgadvisory.FencingToken(q.tx)
}

func (q sqlTx) SetFencingToken(ctx context.Context, token int64) error {
	return pgadvisory.SetFencingToken(ctx, q.tx, token)
}

// pgxTx is a pgx transaction; l, if not nil, is the Locker whose call
// began it.
type pgxTx struct {
	tx pgx.Tx
	l  *pgadvisory.Locker[pgx.Tx]
}

func (q pgxTx) Exec(ctx context.Context, query string, args ...any) error {
	_, err := q.tx.Exec(ctx, query, args...)
	return err
}

func (q pgxTx) ExecCount(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := q.tx.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

func (q pgxTx) QueryRow(ctx context.Context, query string, args ...any) Row {
	return q.tx.QueryRow(ctx, query, args...)
}

func (q pgxTx) QueryInt(ctx context.Context, query string, args ...any) (n int64, err error) {
	err = q.tx.QueryRow(ctx, query, args...).Scan(&n)
	return n, err
}

func (q pgxTx) FencingToken() (int64, bool) {
	if q.l != nil {
		return q.l.FencingToken(q.tx)
	}
	return pgadvisory.FencingTokenPgx(q.tx)
}

func (q pgxTx) SetFencingToken(ctx context.Context, token int64) error {
	return pgadvisory.SetFencingTokenPgx(ctx, q.tx, token)
}
