package pgadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/keyspace"
	"github.com/lockgen/lockgen/pgadvisory"
)

// The examples connect to a private database on the server named by
// LOCKGEN_DATABASE_URL (default postgres://localhost:5432/test) and need that
// server to be running. This
// file: the transaction lock (RunExclusive, RunExclusivePgx, Lock) and its
// errors; the other example_*_test.go files hold one family each, and the
// helpers all of them share are at the end of this file.

func ExampleRunExclusive() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	lockID := exampleLockID("run_exclusive")

	err := pgadvisory.RunExclusive(ctx, db, lockID, func(tx *sql.Tx) error {
		// Writes through tx commit together with the lock's release.
		var day string
		if err := tx.QueryRowContext(ctx, "SELECT '2026-03-02'").Scan(&day); err != nil {
			return err
		}
		fmt.Println("sending the report for", day)

		// Meanwhile another replica asks for the same lock and gives up at once.
		err := pgadvisory.RunExclusive(ctx, db, lockID, func(*sql.Tx) error { return nil })
		fmt.Println("other replica locked out:", errors.Is(err, pgadvisory.ErrLocked))
		return nil
	})
	switch {
	case errors.Is(err, pgadvisory.ErrLocked):
		fmt.Println("another replica is sending it")
	case err != nil:
		fmt.Println("failed:", err)
	default:
		fmt.Println("sent")
	}
	// Output:
	// sending the report for 2026-03-02
	// other replica locked out: true
	// sent
}

func ExampleLock_RunExclusive() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	// cmd/lockgen generates Lock values like this one from locks.yaml.
	report := pgadvisory.Lock{Name: "reports.daily_email", ID: exampleLockID("lock_run_exclusive")}

	err := report.RunExclusive(ctx, db, func(tx *sql.Tx) error {
		// The lock's name appears in errors and observer events.
		err := report.RunExclusive(ctx, db, func(*sql.Tx) error { return nil }, pgadvisory.WithWait(10*time.Millisecond))
		var e *pgadvisory.Error
		if errors.As(err, &e) {
			fmt.Printf("a waiter on %s: %v\n", e.Name, e.Kind)
		}
		return nil
	})
	fmt.Println("holder:", err)
	// Output:
	// a waiter on reports.daily_email: pgadvisory: timed out waiting for the lock
	// holder: <nil>
}

func ExampleRunExclusivePgx() {
	ctx := context.Background()
	pool := examplePool()
	defer pool.Close()
	lockID := exampleLockID("run_exclusive_pgx")

	err := pgadvisory.RunExclusivePgx(ctx, pool, lockID, func(tx pgx.Tx) error {
		var day string
		if err := tx.QueryRow(ctx, "SELECT '2026-03-02'").Scan(&day); err != nil {
			return err
		}
		fmt.Println("sending the report for", day)

		err := pgadvisory.RunExclusivePgx(ctx, pool, lockID, func(pgx.Tx) error { return nil })
		fmt.Println("other replica locked out:", errors.Is(err, pgadvisory.ErrLocked))
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// sending the report for 2026-03-02
	// other replica locked out: true
	// err: <nil>
}

func ExampleLock_RunExclusivePgx() {
	ctx := context.Background()
	pool := examplePool()
	defer pool.Close()
	invoice := pgadvisory.Lock{Name: "billing.invoice_run", ID: exampleLockID("lock_run_exclusive_pgx")}

	err := invoice.RunExclusivePgx(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SELECT 1") // the invoice run's statements
		return err
	})
	fmt.Println(invoice.Name, "done:", err == nil)
	// Output:
	// billing.invoice_run done: true
}

func ExampleSQLState() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()

	err := pgadvisory.RunExclusive(ctx, db, exampleLockID("sql_state"), func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "SELECT 1/0")
		return err
	})
	// SQLState reads the code through any wrapping, from pgx or lib/pq.
	switch pgadvisory.SQLState(err) {
	case "22012":
		fmt.Println("division by zero; the transaction was rolled back")
	default:
		fmt.Println(err)
	}
	// Output:
	// division by zero; the transaction was rolled back
}

func ExampleError() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	lockID := exampleLockID("error")

	_ = pgadvisory.RunExclusive(ctx, db, lockID, func(*sql.Tx) error {
		// The set waits in lockgen's queue; WithWait's timeout is the
		// call's own (no SQLSTATE).
		err := pgadvisory.RunExclusive(ctx, db, lockID, func(*sql.Tx) error { return nil },
			pgadvisory.WithLocks(exampleLockID("error-other")), pgadvisory.WithWait(10*time.Millisecond))

		// errors.Is finds the kind; errors.As the details and the driver's error.
		var e *pgadvisory.Error
		if errors.As(err, &e) {
			fmt.Println("step:", e.Op)
			fmt.Println("kind is ErrLockTimeout:", e.Kind == pgadvisory.ErrLockTimeout)
			fmt.Printf("SQLSTATE: %q\n", e.SQLState)
			fmt.Println("locks:", len(e.LockIDs))
		}
		var pgErr *pgconn.PgError
		fmt.Println("from the server:", errors.As(err, &pgErr))
		return nil
	})
	// Output:
	// step: lock
	// kind is ErrLockTimeout: true
	// SQLSTATE: ""
	// locks: 2
	// from the server: false
}

func ExampleLock() {
	// A Lock pairs a declared name with its ID under lockgen's published
	// rule; cmd/lockgen generates these from locks.yaml.
	report := pgadvisory.Lock{Name: "reports.daily_email", ID: keyspace.ID("reports.daily_email")}
	fmt.Println(report)
	// Output:
	// reports.daily_email(-6078806957557529815)
}

// exampleURL is the database the examples use: this test binary's private
// database on the server named by LOCKGEN_DATABASE_URL (default
// postgres://localhost:5432/test), created by package testdb and dropped
// when the package's tests end. Real code passes its own URL.
func exampleURL() string {
	u, err := testdb.PackageURL()
	if err != nil {
		log.Fatal(err)
	}
	return u
}

// exampleDB opens a database/sql handle through pgx's stdlib driver.
func exampleDB() *sql.DB {
	db, err := sql.Open("pgx", exampleURL())
	if err != nil {
		log.Fatal(err)
	}
	return db
}

// examplePool opens a pgx pool.
func examplePool() *pgxpool.Pool {
	pool, err := pgxpool.New(context.Background(), exampleURL())
	if err != nil {
		log.Fatal(err)
	}
	return pool
}

// exampleLockID returns the lock ID of one example: lockgen's name-to-ID
// rule (package keyspace) applied to "examples.pgadvisory.<name>",
// parameterized by the process ID so that two test runs on the same server
// do not contend. Real code uses a fixed ID, e.g. keyspace.ID("reports.daily_email").
func exampleLockID(name string) int64 {
	return keyspace.ParamID("examples.pgadvisory."+name, keyspace.Int64Param(int64(os.Getpid())))
}

// exampleMigrate applies lockgen's schema, as every example here needs it.
func exampleMigrate(ctx context.Context, db *sql.DB) {
	if err := pgadvisory.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
}
