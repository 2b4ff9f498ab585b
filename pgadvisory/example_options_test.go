package pgadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	"github.com/lockgen/lockgen/pgadvisory"
)

// Examples of the options of the transaction-lock front doors. The shared
// example helpers are in example_test.go.

func ExampleWithWait() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	lockID := exampleLockID("with_wait")

	held, release := make(chan struct{}), make(chan struct{})
	holderDone := make(chan error)
	go func() {
		holderDone <- pgadvisory.RunExclusive(ctx, db, lockID, func(*sql.Tx) error {
			close(held)
			<-release
			return nil
		})
	}()
	<-held

	// The wait gives up after the timeout: ErrLockTimeout.
	err := pgadvisory.RunExclusive(ctx, db, lockID, func(*sql.Tx) error { return nil },
		pgadvisory.WithWait(20*time.Millisecond))
	fmt.Println("short wait timed out:", errors.Is(err, pgadvisory.ErrLockTimeout))

	// A longer wait gets the lock once the holder commits.
	go func() {
		time.Sleep(50 * time.Millisecond)
		close(release)
	}()
	err = pgadvisory.RunExclusive(ctx, db, lockID, func(*sql.Tx) error {
		fmt.Println("got the lock after waiting")
		return nil
	}, pgadvisory.WithWait(time.Minute))
	fmt.Println("err:", err, "holder:", <-holderDone)
	// Output:
	// short wait timed out: true
	// got the lock after waiting
	// err: <nil> holder: <nil>
}

func ExampleWithShared() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	lockID := exampleLockID("with_shared")
	noop := func(*sql.Tx) error { return nil }

	err := pgadvisory.RunExclusive(ctx, db, lockID, func(*sql.Tx) error {
		// Readers share the lock...
		err := pgadvisory.RunExclusive(ctx, db, lockID, noop, pgadvisory.WithShared())
		fmt.Println("second reader:", err)
		// ...and exclude writers.
		err = pgadvisory.RunExclusive(ctx, db, lockID, noop)
		fmt.Println("writer locked out:", errors.Is(err, pgadvisory.ErrLocked))
		return nil
	}, pgadvisory.WithShared())
	fmt.Println("first reader:", err)
	// Output:
	// second reader: <nil>
	// writer locked out: true
	// first reader: <nil>
}

func ExampleWithLocks() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	from, to := exampleLockID("with_locks.account_a"), exampleLockID("with_locks.account_b")
	noop := func(*sql.Tx) error { return nil }

	// A transfer locks both accounts: all of them, in ascending ID order, or none.
	err := pgadvisory.RunExclusive(ctx, db, from, func(*sql.Tx) error {
		err := pgadvisory.RunExclusive(ctx, db, to, noop)
		fmt.Println("another call on the second account locked out:", errors.Is(err, pgadvisory.ErrLocked))
		return nil
	}, pgadvisory.WithLocks(to))
	fmt.Println("transfer:", err)
	// Output:
	// another call on the second account locked out: true
	// transfer: <nil>
}

func ExampleWithObserver() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	lockID := exampleLockID("with_observer")
	observe := pgadvisory.WithObserver(func(e pgadvisory.Event) {
		// Export metrics here: e.Wait, e.Held, e.Err, e.Session…
		fmt.Println("event:", e.Kind)
	})

	_ = pgadvisory.RunExclusive(ctx, db, lockID, func(*sql.Tx) error {
		return pgadvisory.RunExclusive(ctx, db, lockID, func(*sql.Tx) error { return nil }, observe)
	}, observe)
	// Output:
	// event: acquired
	// event: contended
	// event: released
}

func ExampleSlogObserver() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	report := pgadvisory.Lock{Name: "reports.daily_email", ID: exampleLockID("slog_observer")}

	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		Level: slog.LevelDebug, // acquired and released are logged at Debug
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			switch a.Key { // drop what varies from run to run
			case slog.TimeKey, "lock_id", "wait", "held":
				return slog.Attr{}
			}
			return a
		},
	}))
	_ = report.RunExclusive(ctx, db, func(*sql.Tx) error { return nil },
		pgadvisory.WithObserver(pgadvisory.SlogObserver(logger)))
	// Output:
	// level=DEBUG msg="pgadvisory: lock acquired" lock=reports.daily_email
	// level=DEBUG msg="pgadvisory: lock released" lock=reports.daily_email
}

func ExampleWithTxOptions() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	lockID := exampleLockID("with_tx_options")

	// A read-only lock transaction: writes fail inside it.
	err := pgadvisory.RunExclusive(ctx, db, lockID, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "CREATE TEMP TABLE t (x int)")
		return err
	}, pgadvisory.WithTxOptions(sql.TxOptions{ReadOnly: true}))
	fmt.Println("write in a read-only transaction:", pgadvisory.SQLState(err))

	// Isolation levels above READ COMMITTED are refused before anything runs.
	err = pgadvisory.RunExclusive(ctx, db, lockID, func(*sql.Tx) error { return nil },
		pgadvisory.WithTxOptions(sql.TxOptions{Isolation: sql.LevelSerializable}))
	fmt.Println("serializable refused:", errors.Is(err, pgadvisory.ErrIsolationLevel))
	// Output:
	// write in a read-only transaction: 25006
	// serializable refused: true
}

func ExampleWithPgxTxOptions() {
	ctx := context.Background()
	pool := examplePool()
	defer pool.Close()
	lockID := exampleLockID("with_pgx_tx_options")

	err := pgadvisory.RunExclusivePgx(ctx, pool, lockID, func(tx pgx.Tx) error {
		var readOnly string
		err := tx.QueryRow(ctx, "SHOW transaction_read_only").Scan(&readOnly)
		fmt.Println("read only:", readOnly)
		return err
	}, pgadvisory.WithPgxTxOptions(pgx.TxOptions{AccessMode: pgx.ReadOnly}))
	fmt.Println("err:", err)

	err = pgadvisory.RunExclusivePgx(ctx, pool, lockID, func(pgx.Tx) error { return nil },
		pgadvisory.WithPgxTxOptions(pgx.TxOptions{IsoLevel: pgx.RepeatableRead}))
	fmt.Println("repeatable read refused:", errors.Is(err, pgadvisory.ErrIsolationLevel))
	// Output:
	// read only: on
	// err: <nil>
	// repeatable read refused: true
}
