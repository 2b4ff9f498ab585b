package pgadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/lockgen/lockgen/keyspace"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Examples of Migrate, fencing and run-once. They follow example_test.go:
// same server (LOCKGEN_DATABASE_URL), exampleLockID for lock IDs.

// exampleWindow makes a run-once window unique to one run of an example:
// the ledger in the shared database remembers every run, and lock IDs
// (derived from the process ID) repeat with -count and across runs. Real
// code passes the window as is, e.g. pgadvisory.DailyWindow(time.Now(), loc).
func exampleWindow(window string) string {
	return fmt.Sprintf("%s/example-%d", window, rand.Uint64())
}

// exampleSchemaName names a private schema for one run of an example.
func exampleSchemaName(name string) string {
	return fmt.Sprintf("example_%s_%d", name, rand.Uint32())
}

// exampleFencedTable creates the table invoices (id, total) in a private
// schema, fenced by lockID as in ExampleRunFenced, and returns its qualified
// name and a func that drops the schema.
func exampleFencedTable(ctx context.Context, db *sql.DB, name string, lockID int64) (string, func()) {
	schema := exampleSchemaName(name)
	_, err := db.ExecContext(ctx, fmt.Sprintf(`
		CREATE SCHEMA %[1]s;
		CREATE TABLE %[1]s.invoices (id int PRIMARY KEY, total int NOT NULL);
		ALTER TABLE %[1]s.invoices ADD COLUMN fencing_token bigint;
		CREATE TRIGGER zz_pgadvisory_fence BEFORE INSERT OR UPDATE OR DELETE ON %[1]s.invoices
			FOR EACH ROW EXECUTE FUNCTION pgadvisory.fence_check('%[2]d', 'strict')`, schema, lockID))
	if err != nil {
		log.Fatal(err)
	}
	return schema + ".invoices", func() {
		if _, err := db.ExecContext(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			log.Fatal(err)
		}
	}
}

// exampleMigrate applies lockgen's schema, as every example here needs it.
func exampleMigrate(ctx context.Context, db *sql.DB) {
	if err := pgadvisory.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
}

// ExampleMigrate_startup: every replica calls Migrate at start-up.
func ExampleMigrate_startup() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()

	// Concurrent and repeated calls are safe; once everything is applied,
	// Migrate only reads the version table.
	for range 2 {
		if err := pgadvisory.Migrate(ctx, db); err != nil {
			log.Fatal(err)
		}
	}

	// The schema pgadvisory now exists, e.g. the lock ID rule in SQL.
	var id int64
	if err := db.QueryRowContext(ctx, "SELECT pgadvisory.lock_id('reports.daily_email')").Scan(&id); err != nil {
		log.Fatal(err)
	}
	fmt.Println("SQL and Go agree:", id == keyspace.ID("reports.daily_email"))
	// Output:
	// SQL and Go agree: true
}

func ExampleWithFencing() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	exampleMigrate(ctx, db)
	lockID := exampleLockID("with_fencing")

	var first, second int64
	err := pgadvisory.RunExclusive(ctx, db, lockID, func(tx *sql.Tx) error {
		first, _ = pgadvisory.FencingToken(tx)

		// The token is published durably before fn runs...
		var published int64
		err := db.QueryRowContext(ctx, "SELECT token FROM pgadvisory.fence WHERE lock_id = $1", lockID).Scan(&published)
		fmt.Println("published before fn runs:", published == first)

		// ...and fn's transaction carries it: its writes to fenced tables pass.
		var carried int64
		if err == nil {
			err = tx.QueryRowContext(ctx, "SELECT current_setting('pgadvisory.fencing_token')::bigint").Scan(&carried)
		}
		fmt.Println("fn's transaction carries it:", carried == first)
		return err
	}, pgadvisory.WithFencing())
	fmt.Println("err:", err)

	// Every tenure gets a larger token than the ones before.
	_ = pgadvisory.RunExclusive(ctx, db, lockID, func(tx *sql.Tx) error {
		second, _ = pgadvisory.FencingToken(tx)
		return nil
	}, pgadvisory.WithFencing())
	fmt.Println("next holder's token is larger:", second > first)
	// Output:
	// published before fn runs: true
	// fn's transaction carries it: true
	// err: <nil>
	// next holder's token is larger: true
}

func ExampleFencingToken() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	exampleMigrate(ctx, db)
	lockID := exampleLockID("fencing_token")

	_ = pgadvisory.RunExclusive(ctx, db, lockID, func(tx *sql.Tx) error {
		// Pass the token with every write made outside tx: to RunFenced on
		// another connection, to another process, to an external store.
		token, ok := pgadvisory.FencingToken(tx)
		fmt.Println("fenced call:", ok, token > 0)
		return nil
	}, pgadvisory.WithFencing())

	_ = pgadvisory.RunExclusive(ctx, db, lockID, func(tx *sql.Tx) error {
		_, ok := pgadvisory.FencingToken(tx)
		fmt.Println("call without WithFencing:", ok)
		return nil
	})
	// Output:
	// fenced call: true true
	// call without WithFencing: false
}

// exampleStore is an external store (an object store, another database, an
// HTTP service) that applies Kleppmann's rule: it keeps the highest token
// seen and rejects requests with a lower one, comparing and storing
// atomically.
type exampleStore struct {
	mu      sync.Mutex
	highest int64
	body    string
}

func (s *exampleStore) Put(token int64, body string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.highest {
		return fmt.Errorf("store: token %d is older than %d", token, s.highest)
	}
	s.highest, s.body = token, body
	return nil
}

func ExampleFencingTokenPgx() {
	ctx := context.Background()
	pool := examplePool()
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool) // Migrate takes a *sql.DB
	defer db.Close()
	exampleMigrate(ctx, db)
	lockID := exampleLockID("fencing_token_pgx")
	store := &exampleStore{}

	// Holder A takes the lock, then pauses before writing to the store.
	var tokenA int64
	_ = pgadvisory.RunExclusivePgx(ctx, pool, lockID, func(tx pgx.Tx) error {
		tokenA, _ = pgadvisory.FencingTokenPgx(tx)
		return nil
	}, pgadvisory.WithFencing())

	// Holder B takes the lock after A and writes.
	_ = pgadvisory.RunExclusivePgx(ctx, pool, lockID, func(tx pgx.Tx) error {
		tokenB, _ := pgadvisory.FencingTokenPgx(tx)
		fmt.Println("B writes:", store.Put(tokenB, "from B"))
		return nil
	}, pgadvisory.WithFencing())

	// A wakes up: the store refuses its older token.
	fmt.Println("A rejected:", store.Put(tokenA, "from A") != nil)
	fmt.Println("store holds:", store.body)
	// Output:
	// B writes: <nil>
	// A rejected: true
	// store holds: from B
}

func ExampleRunFenced() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	exampleMigrate(ctx, db)
	lockID := exampleLockID("run_fenced")

	// A table fenced by the lock (lockgen fence generates this migration).
	schema := exampleSchemaName("run_fenced")
	_, err := db.ExecContext(ctx, fmt.Sprintf(`
		CREATE SCHEMA %[1]s;
		CREATE TABLE %[1]s.invoices (id int PRIMARY KEY, total int NOT NULL);
		ALTER TABLE %[1]s.invoices ADD COLUMN fencing_token bigint;
		CREATE TRIGGER zz_pgadvisory_fence BEFORE INSERT OR UPDATE OR DELETE ON %[1]s.invoices
			FOR EACH ROW EXECUTE FUNCTION pgadvisory.fence_check('%[2]d', 'strict')`, schema, lockID))
	if err != nil {
		log.Fatal(err)
	}
	defer db.ExecContext(ctx, "DROP SCHEMA "+schema+" CASCADE")

	// A worker writes invoices on behalf of a lock holder, with its token.
	writeInvoice := func(token int64, id, total int) error {
		return pgadvisory.RunFenced(ctx, db, token, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO "+schema+".invoices (id, total) VALUES ($1, $2)", id, total)
			return err
		})
	}

	// Holder A takes the lock and hands its token to the worker.
	var tokenA int64
	_ = pgadvisory.RunExclusive(ctx, db, lockID, func(tx *sql.Tx) error {
		tokenA, _ = pgadvisory.FencingToken(tx)
		return nil
	}, pgadvisory.WithFencing())
	fmt.Println("A's worker writes:", writeInvoice(tokenA, 1, 100))

	// A's worker pauses (GC, network). Holder B takes the lock; its token is
	// published before its fn runs, and its writes through tx carry it.
	err = pgadvisory.RunExclusive(ctx, db, lockID, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE "+schema+".invoices SET total = 120 WHERE id = 1")
		return err
	}, pgadvisory.WithFencing())
	fmt.Println("B writes:", err)

	// A's worker wakes up: the database rejects its stale token.
	err = writeInvoice(tokenA, 2, 200)
	fmt.Println("A's worker rejected:", errors.Is(err, pgadvisory.ErrStaleToken))

	var rows, total int
	_ = db.QueryRowContext(ctx, "SELECT count(*), sum(total) FROM "+schema+".invoices").Scan(&rows, &total)
	fmt.Println("invoices:", rows, "total:", total)
	// Output:
	// A's worker writes: <nil>
	// B writes: <nil>
	// A's worker rejected: true
	// invoices: 1 total: 120
}

func ExampleRunFencedPgx() {
	ctx := context.Background()
	pool := examplePool()
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool) // Migrate takes a *sql.DB
	defer db.Close()
	exampleMigrate(ctx, db)
	lockID := exampleLockID("run_fenced_pgx")
	invoices, drop := exampleFencedTable(ctx, db, "run_fenced_pgx", lockID)
	defer drop()

	var token int64
	_ = pgadvisory.RunExclusivePgx(ctx, pool, lockID, func(tx pgx.Tx) error {
		token, _ = pgadvisory.FencingTokenPgx(tx)
		return nil
	}, pgadvisory.WithFencing())
	write := func(id int) error {
		return pgadvisory.RunFencedPgx(ctx, pool, token, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO "+invoices+" (id, total) VALUES ($1, 100)", id)
			return err
		})
	}
	fmt.Println("write with the published token:", write(1))

	// A newer holder publishes its token: the old one is stale from now on.
	_ = pgadvisory.RunExclusivePgx(ctx, pool, lockID, func(pgx.Tx) error { return nil }, pgadvisory.WithFencing())
	err := write(2)
	fmt.Println("write with the old token is stale:", errors.Is(err, pgadvisory.ErrStaleToken))
	// Output:
	// write with the published token: <nil>
	// write with the old token is stale: true
}

func ExampleSetFencingToken() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	exampleMigrate(ctx, db)
	lockID := exampleLockID("set_fencing_token")
	invoices, drop := exampleFencedTable(ctx, db, "set_fencing_token", lockID)
	defer drop()

	err := pgadvisory.RunExclusive(ctx, db, lockID, func(lockTx *sql.Tx) error {
		token, _ := pgadvisory.FencingToken(lockTx)

		// A write on another connection, in a transaction of its own.
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := pgadvisory.SetFencingToken(ctx, tx, token); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+invoices+" (id, total) VALUES (1, 100)"); err != nil {
			return err
		}
		return tx.Commit()
	}, pgadvisory.WithFencing())
	fmt.Println("write carrying the token:", err)

	// The table is fenced in strict mode: a write without a token fails.
	_, err = db.ExecContext(ctx, "INSERT INTO "+invoices+" (id, total) VALUES (2, 200)")
	fmt.Println("write without a token:", pgadvisory.SQLState(err))
	// Output:
	// write carrying the token: <nil>
	// write without a token: LF002
}

func ExampleSetFencingTokenPgx() {
	ctx := context.Background()
	pool := examplePool()
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool) // Migrate takes a *sql.DB
	defer db.Close()
	exampleMigrate(ctx, db)
	lockID := exampleLockID("set_fencing_token_pgx")
	invoices, drop := exampleFencedTable(ctx, db, "set_fencing_token_pgx", lockID)
	defer drop()

	var token int64
	_ = pgadvisory.RunExclusivePgx(ctx, pool, lockID, func(tx pgx.Tx) error {
		token, _ = pgadvisory.FencingTokenPgx(tx)
		return nil
	}, pgadvisory.WithFencing())

	// Any pgx transaction can carry the token, e.g. one of pgx.BeginFunc.
	write := func(id int) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := pgadvisory.SetFencingTokenPgx(ctx, tx, token); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO "+invoices+" (id, total) VALUES ($1, 100)", id)
			return err
		})
	}
	fmt.Println("write:", write(1))

	// After a newer holder publishes, the write fails with SQLSTATE LF001
	// (RunFencedPgx would also classify it as ErrStaleToken).
	_ = pgadvisory.RunExclusivePgx(ctx, pool, lockID, func(pgx.Tx) error { return nil }, pgadvisory.WithFencing())
	fmt.Println("write after a newer holder:", pgadvisory.SQLState(write(2)))
	// Output:
	// write: <nil>
	// write after a newer holder: LF001
}

func ExampleLock_With() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	exampleMigrate(ctx, db)

	// cmd/lockgen generates this for a lock declared with fencing: true.
	invoiceRun := pgadvisory.Lock{Name: "billing.invoice_run", ID: exampleLockID("lock_with")}.With(pgadvisory.WithFencing())

	err := invoiceRun.RunExclusive(ctx, db, func(tx *sql.Tx) error {
		_, fenced := pgadvisory.FencingToken(tx)
		fmt.Println("fenced:", fenced)
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// fenced: true
	// err: <nil>
}

func ExampleRunOnce() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	exampleMigrate(ctx, db)
	lockID := exampleLockID("run_once")
	window := exampleWindow("2026-12-02") // real code: pgadvisory.DailyWindow(time.Now(), loc)

	// Three replicas fire the daily report, seconds apart.
	for replica := 1; replica <= 3; replica++ {
		err := pgadvisory.RunOnce(ctx, db, lockID, window, func(tx *sql.Tx) error {
			fmt.Printf("replica %d sends the report\n", replica)
			return nil
		})
		switch {
		case errors.Is(err, pgadvisory.ErrAlreadyDone):
			fmt.Printf("replica %d: already done\n", replica)
		case errors.Is(err, pgadvisory.ErrLocked):
			fmt.Printf("replica %d: another replica is running it\n", replica)
		case err != nil:
			fmt.Printf("replica %d failed: %v\n", replica, err)
		}
	}
	// Output:
	// replica 1 sends the report
	// replica 2: already done
	// replica 3: already done
}

func ExampleRunOncePgx() {
	ctx := context.Background()
	pool := examplePool()
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool) // Migrate takes a *sql.DB
	defer db.Close()
	exampleMigrate(ctx, db)
	lockID := exampleLockID("run_once_pgx")
	window := exampleWindow("2026-12")

	// A failed run leaves no ledger row: the next try runs again.
	for try := 1; try <= 3; try++ {
		err := pgadvisory.RunOncePgx(ctx, pool, lockID, window, func(tx pgx.Tx) error {
			if try == 1 {
				return errors.New("mail server unavailable")
			}
			_, err := tx.Exec(ctx, "SELECT 1") // writes here commit with the ledger row
			return err
		})
		fmt.Printf("try %d: %v\n", try, err)
	}
	// Output:
	// try 1: mail server unavailable
	// try 2: <nil>
	// try 3: pgadvisory: already done for this window
}

func ExampleLock_RunOnce() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	exampleMigrate(ctx, db)
	report := pgadvisory.Lock{Name: "reports.daily_email", ID: exampleLockID("lock_run_once")}
	window := exampleWindow("2026-12-02")

	err := report.RunOnce(ctx, db, window, func(tx *sql.Tx) error {
		// A replica that fires while this one runs is locked out...
		err := report.RunOnce(ctx, db, window, func(*sql.Tx) error { return nil })
		fmt.Println("concurrent replica:", err)
		return nil
	})
	fmt.Println("first replica:", err)

	// ...and one that fires afterwards finds the window done.
	err = report.RunOnce(ctx, db, window, func(*sql.Tx) error { return nil })
	fmt.Println("late replica:", err)
	// Output:
	// concurrent replica: pgadvisory: lock is held by another session
	// first replica: <nil>
	// late replica: pgadvisory: already done for this window
}

func ExampleLock_RunOncePgx() {
	ctx := context.Background()
	pool := examplePool()
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool) // Migrate takes a *sql.DB
	defer db.Close()
	exampleMigrate(ctx, db)
	invoices := pgadvisory.Lock{Name: "billing.monthly_invoices", ID: exampleLockID("lock_run_once_pgx")}
	window := exampleWindow("2026-12") // real code: pgadvisory.MonthlyWindow(time.Now(), loc)

	for range 2 {
		err := invoices.RunOncePgx(ctx, pool, window, func(tx pgx.Tx) error {
			fmt.Println("issuing the monthly invoices")
			return nil
		})
		if errors.Is(err, pgadvisory.ErrAlreadyDone) {
			fmt.Println("this month's invoices are already issued")
		}
	}
	// Output:
	// issuing the monthly invoices
	// this month's invoices are already issued
}

func ExampleWithHolder() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	exampleMigrate(ctx, db)
	lockID := exampleLockID("with_holder")
	window := exampleWindow("2026-12-02")

	err := pgadvisory.RunOnce(ctx, db, lockID, window, func(*sql.Tx) error { return nil },
		pgadvisory.WithHolder("reports-worker-7"))
	fmt.Println("err:", err)

	// The ledger says who ran the window (default: "<hostname>/<pid>").
	var holder string
	_ = db.QueryRowContext(ctx, "SELECT holder FROM pgadvisory.run_once WHERE lock_id = $1 AND window_key = $2",
		lockID, window).Scan(&holder)
	fmt.Println("ran by:", holder)
	// Output:
	// err: <nil>
	// ran by: reports-worker-7
}

func ExampleDailyWindow() {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		log.Fatal(err)
	}
	t := time.Date(2026, 12, 1, 23, 30, 0, 0, time.UTC) // 00:30 on December 2 in Berlin

	fmt.Println("Berlin:", pgadvisory.DailyWindow(t, berlin))
	fmt.Println("UTC:   ", pgadvisory.DailyWindow(t, nil))

	// The window depends on loc, not on the zone t is expressed in, so
	// replicas in different zones agree.
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("a replica in Tokyo:", pgadvisory.DailyWindow(t.In(tokyo), berlin))
	// Output:
	// Berlin: 2026-12-02
	// UTC:    2026-12-01
	// a replica in Tokyo: 2026-12-02
}

func ExampleHourlyWindow() {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		log.Fatal(err)
	}
	// Berlin's clocks go back from 03:00 to 02:00 on 2026-10-25: two
	// different hours read 02:xx there and share one window.
	first := time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC)
	second := first.Add(time.Hour)
	fmt.Println(pgadvisory.HourlyWindow(first, berlin), pgadvisory.HourlyWindow(second, berlin))

	// For hourly jobs UTC (nil) gives every hour its own window.
	fmt.Println(pgadvisory.HourlyWindow(first, nil), pgadvisory.HourlyWindow(second, nil))
	// Output:
	// 2026-10-25T02 2026-10-25T02
	// 2026-10-25T00 2026-10-25T01
}

func ExampleWeeklyWindow() {
	// ISO 8601 weeks: the week-based year can differ from the calendar year.
	fmt.Println(pgadvisory.WeeklyWindow(time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC), nil))
	fmt.Println(pgadvisory.WeeklyWindow(time.Date(2024, 12, 30, 9, 0, 0, 0, time.UTC), nil))
	fmt.Println(pgadvisory.WeeklyWindow(time.Date(2027, 1, 1, 9, 0, 0, 0, time.UTC), nil))
	// Output:
	// 2026-W10
	// 2025-W01
	// 2026-W53
}

func ExampleMonthlyWindow() {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		log.Fatal(err)
	}
	t := time.Date(2026, 1, 31, 23, 30, 0, 0, time.UTC) // already February in Berlin

	fmt.Println("Berlin:", pgadvisory.MonthlyWindow(t, berlin))
	fmt.Println("UTC:   ", pgadvisory.MonthlyWindow(t, nil))
	// Output:
	// Berlin: 2026-02
	// UTC:    2026-01
}
