package pgadvisory

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// RunExclusiveRepo runs fn with a repository bound to the lock transaction of
// [RunExclusive]. newRepo builds the repository from the transaction; it fits
// both shapes sqlc generates:
//
//	pgadvisory.RunExclusiveRepo(ctx, db, lockID, dbq.New, func(q *dbq.Queries) error { … })
//	pgadvisory.RunExclusiveRepo(ctx, db, lockID, queries.WithTx, func(q *dbq.Queries) error { … })
//
// D is the repository's executor type (sqlc's DBTX interface, or *sql.Tx
// itself); *sql.Tx must implement it, which is checked before anything is
// sent to the server.
func RunExclusiveRepo[D, R any](ctx context.Context, db *sql.DB, lockID int64, newRepo func(D) R, fn func(R) error, opts ...Option) error {
	if err := checkExecutor[D](reflect.TypeFor[*sql.Tx](), newRepo == nil, fn == nil); err != nil {
		return (&config{ids: []int64{lockID}}).invalid("begin", err)
	}
	return RunExclusive(ctx, db, lockID, func(tx *sql.Tx) error {
		return fn(newRepo(any(tx).(D)))
	}, opts...)
}

// RunExclusiveRepoPgx is [RunExclusiveRepo] for [RunExclusivePgx]: the
// executor type D must be implemented by [pgx.Tx] (sqlc's pgx/v5 DBTX is).
func RunExclusiveRepoPgx[D, R any](ctx context.Context, pool *pgxpool.Pool, lockID int64, newRepo func(D) R, fn func(R) error, opts ...Option) error {
	if err := checkExecutor[D](reflect.TypeFor[pgx.Tx](), newRepo == nil, fn == nil); err != nil {
		return (&config{ids: []int64{lockID}}).invalid("begin", err)
	}
	return RunExclusivePgx(ctx, pool, lockID, func(tx pgx.Tx) error {
		return fn(newRepo(any(tx).(D)))
	}, opts...)
}

// checkExecutor verifies that values of type tx can be passed as D.
func checkExecutor[D any](tx reflect.Type, nilRepo, nilFn bool) error {
	switch {
	case nilRepo:
		return fmt.Errorf("nil newRepo")
	case nilFn:
		return fmt.Errorf("nil fn")
	}
	d := reflect.TypeFor[D]()
	if tx == d || (d.Kind() == reflect.Interface && tx.Implements(d)) {
		return nil
	}
	return fmt.Errorf("repository executor type %v is not implemented by %v", d, tx)
}
