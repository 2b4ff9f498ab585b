package pgadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/lockgen/lockgen/pgadvisory"
)

// Examples of run-once: RunOnce, RunOncePgx, the Lock methods, WithHolder
// and the window helpers. The shared example helpers are in example_test.go.

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
		if errors.Is(err, pgadvisory.ErrAlreadyDone) {
			fmt.Printf("try %d: already done\n", try)
			continue
		}
		fmt.Printf("try %d: %v\n", try, err)
	}
	// Output:
	// try 1: mail server unavailable
	// try 2: <nil>
	// try 3: already done
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
		fmt.Println("concurrent replica locked out:", errors.Is(err, pgadvisory.ErrLocked))
		return nil
	})
	fmt.Println("first replica:", err)

	// ...and one that fires afterwards finds the window done.
	err = report.RunOnce(ctx, db, window, func(*sql.Tx) error { return nil })
	fmt.Println("late replica already done:", errors.Is(err, pgadvisory.ErrAlreadyDone))
	// Output:
	// concurrent replica locked out: true
	// first replica: <nil>
	// late replica already done: true
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
	// different hours read 02:xx there. The second one's window carries its
	// UTC offset, so each hour has a window of its own.
	first := time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC)
	second := first.Add(time.Hour)
	fmt.Println(pgadvisory.HourlyWindow(first, berlin), pgadvisory.HourlyWindow(second, berlin))

	// In UTC (nil) no hour repeats.
	fmt.Println(pgadvisory.HourlyWindow(first, nil), pgadvisory.HourlyWindow(second, nil))
	// Output:
	// 2026-10-25T02 2026-10-25T02+01:00
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

// exampleWindow makes a run-once window unique to one run of an example:
// the ledger in the shared database remembers every run, and lock IDs
// (derived from the process ID) repeat with -count and across runs. Real
// code passes the window as is, e.g. pgadvisory.DailyWindow(time.Now(), loc).
func exampleWindow(window string) string {
	return fmt.Sprintf("%s/example-%d", window, rand.Uint64())
}
