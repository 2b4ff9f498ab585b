package pgadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	"github.com/lockgen/lockgen/pgadvisory"
)

// Examples of session locks: RunSession, RunSessionPgx, the Lock methods,
// WithCheckInterval, WithCheckTimeout and WithSessionPooler. The shared example helpers are in example_test.go.

func ExampleRunSession() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	lockID := exampleLockID("run_session")

	err := pgadvisory.RunSession(ctx, db, lockID, func(ctx context.Context) error {
		// The lock is held on a connection of its own while the work runs
		// any number of transactions; ctx is canceled if the lock is lost.
		for batch := 1; batch <= 2; batch++ {
			if _, err := db.ExecContext(ctx, "SELECT 1"); err != nil {
				return err
			}
			fmt.Println("batch", batch, "committed")
		}
		err := pgadvisory.RunExclusive(ctx, db, lockID, func(*sql.Tx) error { return nil })
		fmt.Println("others locked out:", errors.Is(err, pgadvisory.ErrLocked))
		return nil
	})
	if errors.Is(err, pgadvisory.ErrLockLost) {
		fmt.Println("lost the lock midway; the work was interrupted")
	}
	fmt.Println("err:", err)
	// Output:
	// batch 1 committed
	// batch 2 committed
	// others locked out: true
	// err: <nil>
}

func ExampleRunSessionPgx() {
	ctx := context.Background()
	pool := examplePool()
	defer pool.Close()
	lockID := exampleLockID("run_session_pgx")

	err := pgadvisory.RunSessionPgx(ctx, pool, lockID, func(ctx context.Context) error {
		// A leader loop: stop as soon as ctx says the lock is gone.
		for range 3 {
			select {
			case <-ctx.Done():
				return context.Cause(ctx) // wraps pgadvisory.ErrLockLost when the lock was lost
			default:
			}
			if _, err := pool.Exec(ctx, "SELECT 1"); err != nil {
				return err
			}
		}
		fmt.Println("led three rounds")
		return nil
	}, pgadvisory.WithCheckInterval(500*time.Millisecond))
	fmt.Println("err:", err)
	// Output:
	// led three rounds
	// err: <nil>
}

func ExampleLock_RunSession() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	compaction := pgadvisory.Lock{Name: "storage.compaction", ID: exampleLockID("lock_run_session")}

	err := compaction.RunSession(ctx, db, func(ctx context.Context) error {
		fmt.Println("compacting under", compaction.Name)
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// compacting under storage.compaction
	// err: <nil>
}

func ExampleLock_RunSessionPgx() {
	ctx := context.Background()
	pool := examplePool()
	defer pool.Close()
	leader := pgadvisory.Lock{Name: "cluster.leader", ID: exampleLockID("lock_run_session_pgx")}

	err := leader.RunSessionPgx(ctx, pool, func(ctx context.Context) error {
		// A second candidate finds the leadership taken.
		err := leader.RunSessionPgx(ctx, pool, func(context.Context) error { return nil })
		fmt.Println("second candidate locked out:", errors.Is(err, pgadvisory.ErrLocked))
		return nil
	})
	fmt.Println("leader:", err)
	// Output:
	// second candidate locked out: true
	// leader: <nil>
}

func ExampleWithCheckInterval() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	lockID := exampleLockID("with_check_interval")

	// Check the session's connection and lock every 200ms instead of every
	// second: a lost lock cancels the work's context within about that long.
	err := pgadvisory.RunSession(ctx, db, lockID, func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(500 * time.Millisecond):
			fmt.Println("still holding the lock after several checks")
			return nil
		}
	}, pgadvisory.WithCheckInterval(200*time.Millisecond))
	fmt.Println("err:", err)
	// Output:
	// still holding the lock after several checks
	// err: <nil>
}

func ExampleWithCheckTimeout() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	lockID := exampleLockID("with_check_timeout")

	// Check every 200ms, and treat a check that has not answered after 1s
	// as a dead (half-open) connection: the work's context is then canceled
	// within about 1.2s of the link going silent. A check that is merely
	// slower than 200ms does not cancel it.
	err := pgadvisory.RunSession(ctx, db, lockID, func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(500 * time.Millisecond):
			fmt.Println("still holding the lock")
			return nil
		}
	}, pgadvisory.WithCheckInterval(200*time.Millisecond), pgadvisory.WithCheckTimeout(time.Second))
	fmt.Println("err:", err)
	// Output:
	// still holding the lock
	// err: <nil>
}

func ExampleWithSessionPooler() {
	ctx := context.Background()
	// PgBouncer with pool_mode=session in front of the database: one server
	// connection per client connection, so session locks are safe, but a
	// client cannot tell session mode from transaction mode by itself.
	db, err := sql.Open("pgx", "postgres://app@pgbouncer.internal:6432/app?sslmode=require")
	if err != nil {
		panic(err)
	}
	defer db.Close()

	err = pgadvisory.RunSession(ctx, db, exampleLockID("with_session_pooler"), func(ctx context.Context) error {
		return nil // the work
	}, pgadvisory.WithSessionPooler())
	switch {
	case errors.Is(err, pgadvisory.ErrStatementPooler):
		// the pooler is in statement mode after all: no advisory lock works there
	case errors.Is(err, pgadvisory.ErrTransactionPooler):
		// the session moved between server connections: not session mode
	}
}
