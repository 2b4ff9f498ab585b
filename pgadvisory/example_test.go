package pgadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	"github.com/lockgen/lockgen/examples/repository/reportpgx"
	"github.com/lockgen/lockgen/examples/repository/reportsql"
	"github.com/lockgen/lockgen/keyspace"
	"github.com/lockgen/lockgen/pgadvisory"
)

// The examples connect to LOCKGEN_DATABASE_URL (default
// postgres://localhost:5432/test) and need that server to be running.

// exampleURL is the server the examples use.
func exampleURL() string {
	if u := os.Getenv("LOCKGEN_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://localhost:5432/test"
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
		fmt.Println("other replica:", err)
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
	// other replica: pgadvisory: lock is held by another session
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
	// a waiter on reports.daily_email: pgadvisory: timed out waiting for the lock (lock_timeout, SQLSTATE 55P03)
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

func ExampleRunExclusiveRepo() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	lockID := exampleLockID("run_exclusive_repo")

	// reportsql is generated by sqlc (examples/repository). New(DBTX) fits
	// as the repository constructor...
	err := pgadvisory.RunExclusiveRepo(ctx, db, lockID, reportsql.New, func(q *reportsql.Queries) error {
		held, err := q.HoldsAdvisoryLock(ctx, lockID)
		fmt.Println("New: repository runs under the lock:", held)
		return err
	})
	if err != nil {
		fmt.Println(err)
	}

	// ...and so does WithTx on an existing *Queries.
	queries := reportsql.New(db)
	err = pgadvisory.RunExclusiveRepo(ctx, db, lockID, queries.WithTx, func(q *reportsql.Queries) error {
		held, err := q.HoldsAdvisoryLock(ctx, lockID)
		fmt.Println("WithTx: repository runs under the lock:", held)
		return err
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output:
	// New: repository runs under the lock: true
	// WithTx: repository runs under the lock: true
}

func ExampleRunExclusiveRepoPgx() {
	ctx := context.Background()
	pool := examplePool()
	defer pool.Close()
	lockID := exampleLockID("run_exclusive_repo_pgx")

	// reportpgx is the same queries generated by sqlc for pgx/v5.
	err := pgadvisory.RunExclusiveRepoPgx(ctx, pool, lockID, reportpgx.New, func(q *reportpgx.Queries) error {
		held, err := q.HoldsAdvisoryLock(ctx, lockID)
		fmt.Println("repository runs under the lock:", held)
		return err
	})
	fmt.Println("err:", err)

	// The executor type is checked before anything is sent to the server:
	// the database/sql repository does not fit a pgx transaction.
	err = pgadvisory.RunExclusiveRepoPgx(ctx, pool, lockID, reportsql.New, func(*reportsql.Queries) error { return nil })
	fmt.Println("mismatched repository:", errors.Is(err, pgadvisory.ErrInvalidArgument))
	// Output:
	// repository runs under the lock: true
	// err: <nil>
	// mismatched repository: true
}

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

	// The server gives up after the timeout (lock_timeout).
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
		fmt.Println("writer:", err)
		return nil
	}, pgadvisory.WithShared())
	fmt.Println("first reader:", err)
	// Output:
	// second reader: <nil>
	// writer: pgadvisory: lock is held by another session
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
		fmt.Println("another call on the second account:", err)
		return nil
	}, pgadvisory.WithLocks(to))
	fmt.Println("transfer:", err)
	// Output:
	// another call on the second account: pgadvisory: lock is held by another session
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
		err := pgadvisory.RunExclusive(ctx, db, lockID, func(*sql.Tx) error { return nil },
			pgadvisory.WithWait(10*time.Millisecond))

		// errors.Is finds the kind; errors.As the details and the driver's error.
		var e *pgadvisory.Error
		if errors.As(err, &e) {
			fmt.Println("step:", e.Op)
			fmt.Println("kind is ErrLockTimeout:", e.Kind == pgadvisory.ErrLockTimeout)
			fmt.Println("SQLSTATE:", e.SQLState)
			fmt.Println("locks:", len(e.LockIDs))
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			fmt.Println("server says:", pgErr.Message)
		}
		return nil
	})
	// Output:
	// step: lock
	// kind is ErrLockTimeout: true
	// SQLSTATE: 55P03
	// locks: 1
	// server says: canceling statement due to lock timeout
}

func ExampleLock() {
	// A Lock pairs a declared name with its ID under lockgen's published
	// rule; cmd/lockgen generates these from locks.yaml.
	report := pgadvisory.Lock{Name: "reports.daily_email", ID: keyspace.ID("reports.daily_email")}
	fmt.Println(report)
	// Output:
	// reports.daily_email(-6078806957557529815)
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
		fmt.Println("second candidate:", err)
		return nil
	})
	fmt.Println("leader:", err)
	// Output:
	// second candidate: pgadvisory: lock is held by another session
	// leader: <nil>
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
