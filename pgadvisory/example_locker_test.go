package pgadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/lockgen/lockgen/pgadvisory"
)

// This file: the Locker, one example per method and driver.

func ExampleNew() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	exampleMigrate(ctx, db) // pgadvisory.Migrate: lockgen's schema, once per deploy

	// One Locker per pool, shared by the whole program.
	locker, err := pgadvisory.New(pgadvisory.Stdlib(db), pgadvisory.WithDefaultHolder("replica-1"))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	// cmd/lockgen generates Lock values like this one from locks.yaml.
	report := pgadvisory.Lock{Name: "reports.daily_email", ID: exampleLockID("new")}
	err = locker.RunExclusive(ctx, report, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "SELECT 1") // the protected work, through tx
		return err
	})
	fmt.Println("sent:", err == nil)
	// Output:
	// sent: true
}

func ExampleLocker_RunExclusive() {
	ctx := context.Background()
	pool := examplePool()
	defer pool.Close()
	locker, err := pgadvisory.New(pgadvisory.Pgx(pool))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	report := pgadvisory.Lock{Name: "reports.daily_email", ID: exampleLockID("locker_run_exclusive")}

	// fn receives a pgx.Tx: the Locker's driver fixes the type.
	err = locker.RunExclusive(ctx, report, func(tx pgx.Tx) error {
		// Meanwhile another replica asks for the same lock and gives up at once.
		err := locker.RunExclusive(ctx, report, func(pgx.Tx) error { return nil })
		fmt.Println("other replica locked out:", errors.Is(err, pgadvisory.ErrLocked))
		_, err = tx.Exec(ctx, "SELECT 1")
		return err
	})
	fmt.Println("holder:", err)
	// Output:
	// other replica locked out: true
	// holder: <nil>
}

func ExampleLocker_RunOnce() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	exampleMigrate(ctx, db)
	locker, err := pgadvisory.New(pgadvisory.Stdlib(db))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	digest := pgadvisory.Lock{Name: "reports.digest", ID: exampleLockID("locker_run_once")}
	window := pgadvisory.DailyWindow(time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC), time.UTC)

	for replica := 1; replica <= 2; replica++ {
		err := locker.RunOnce(ctx, digest, window, func(*sql.Tx) error { return nil })
		fmt.Printf("replica %d: already done: %v\n", replica, errors.Is(err, pgadvisory.ErrAlreadyDone))
	}
	// Output:
	// replica 1: already done: false
	// replica 2: already done: true
}

func ExampleLocker_RunSession() {
	ctx := context.Background()
	pool := examplePool()
	defer pool.Close()
	// The session locks of this Locker share one server connection.
	locker, err := pgadvisory.New(pgadvisory.Pgx(pool), pgadvisory.WithSessionConns(1))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	compaction := pgadvisory.Lock{Name: "jobs.compaction", ID: exampleLockID("locker_run_session")}

	err = locker.RunSession(ctx, compaction, func(ctx context.Context) error {
		// ctx is canceled if the lock is lost; long work checks it.
		fmt.Println("compacting; lock lost:", ctx.Err() != nil)
		return nil
	})
	fmt.Println("done:", err)
	// Output:
	// compacting; lock lost: false
	// done: <nil>
}

func ExampleLocker_Lead() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	exampleMigrate(ctx, db)
	locker, err := pgadvisory.New(pgadvisory.Stdlib(db), pgadvisory.WithDefaultHolder("scheduler-a"))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	scheduler := pgadvisory.Lock{Name: "scheduler", ID: exampleLockID("locker_lead")}

	err = locker.Lead(ctx, scheduler, func(ctx context.Context, term int64) error {
		leader, err := locker.CurrentLeader(ctx, scheduler)
		if err != nil {
			return err
		}
		fmt.Println("leader:", leader.Holder, "term is the published token:", leader.Term == term)
		return nil // resign
	})
	fmt.Println("resigned:", err)
	_, err = locker.CurrentLeader(ctx, scheduler)
	fmt.Println("no leader now:", errors.Is(err, pgadvisory.ErrNoLeader))
	// Output:
	// leader: scheduler-a term is the published token: true
	// resigned: <nil>
	// no leader now: true
}

func ExampleLocker_LockTx() {
	ctx := context.Background()
	pool := examplePool()
	defer pool.Close()
	locker, err := pgadvisory.New(pgadvisory.Pgx(pool))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	account := pgadvisory.Lock{Name: "accounts.rebalance", ID: exampleLockID("locker_lock_tx")}

	// A transaction the caller already has, at READ COMMITTED.
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := locker.LockTx(ctx, tx, account); err != nil {
		log.Fatal(err)
	}
	// Held until tx ends: another transaction is refused.
	other, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("other:", errors.Is(locker.LockTx(ctx, other, account), pgadvisory.ErrLocked))
	_ = other.Rollback(ctx)

	// A snapshot older than the lock is refused.
	rr, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("repeatable read:", errors.Is(locker.LockTx(ctx, rr, account), pgadvisory.ErrIsolationLevel))
	_ = rr.Rollback(ctx)
	fmt.Println("commit:", tx.Commit(ctx))
	// Output:
	// other: true
	// repeatable read: true
	// commit: <nil>
}

func ExampleLocker_Close() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	locker, err := pgadvisory.New(pgadvisory.Stdlib(db))
	if err != nil {
		log.Fatal(err)
	}
	_ = locker.Close() // at shutdown; the pool stays open
	err = locker.RunExclusive(ctx, pgadvisory.ID(exampleLockID("locker_close")), func(*sql.Tx) error { return nil })
	fmt.Println(errors.Is(err, pgadvisory.ErrClosed))
	// Output:
	// true
}

func ExampleID() {
	// A raw key, for locks not declared in locks.yaml.
	fmt.Println(pgadvisory.ID(42))
	// Output:
	// 42
}

func ExampleLocker_Campaign() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := examplePool()
	defer pool.Close()
	exampleMigrate(ctx, stdlib.OpenDBFromPool(pool))
	locker, err := pgadvisory.New(pgadvisory.Pgx(pool))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	relay := pgadvisory.Lock{Name: "outbox.relay", ID: exampleLockID("locker_campaign")}

	// Campaign again after each leadership ends, until ctx ends: here the
	// leader resigns once and stops the campaign the second time.
	terms := 0
	err = locker.Campaign(ctx, relay, func(ctx context.Context, term int64) error {
		terms++
		fmt.Println("elected, leadership", terms)
		if terms == 2 {
			cancel()
		}
		return nil
	})
	fmt.Println("campaign ended:", err)
	// Output:
	// elected, leadership 1
	// elected, leadership 2
	// campaign ended: <nil>
}

func ExampleLocker_CurrentLeader() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	exampleMigrate(ctx, db)
	locker, err := pgadvisory.New(pgadvisory.Stdlib(db))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	scheduler := pgadvisory.Lock{Name: "scheduler", ID: exampleLockID("locker_current_leader")}

	// Nobody leads yet: show it, route elsewhere, never act on it.
	_, err = locker.CurrentLeader(ctx, scheduler)
	fmt.Println("no leader:", errors.Is(err, pgadvisory.ErrNoLeader))
	_ = locker.Lead(ctx, scheduler, func(ctx context.Context, term int64) error {
		leader, err := locker.CurrentLeader(ctx, scheduler)
		fmt.Println("leader's term:", err == nil && leader.Term == term)
		return nil
	}, pgadvisory.WithHolder("scheduler-b"))
	// Output:
	// no leader: true
	// leader's term: true
}

func ExampleLocker_RunFenced() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	exampleMigrate(ctx, db)
	locker, err := pgadvisory.New(pgadvisory.Stdlib(db))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	lock := pgadvisory.Lock{Name: "billing.invoices", ID: exampleLockID("locker_run_fenced")}
	// A table fenced by the lock (lockgen fence generates this migration).
	invoices, drop := exampleFencedTable(ctx, db, "locker_run_fenced", lock.ID)
	defer drop()

	// A worker writes on behalf of a lock holder, with its token.
	writeInvoice := func(token int64, id, total int) error {
		return locker.RunFenced(ctx, token, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO "+invoices+" (id, total) VALUES ($1, $2)", id, total)
			return err
		})
	}
	// Holder A hands its token to the worker; then holder B takes the lock.
	var tokenA int64
	_ = locker.RunExclusive(ctx, lock, func(tx *sql.Tx) error {
		tokenA, _ = locker.FencingToken(tx)
		return nil
	}, pgadvisory.WithFencing())
	fmt.Println("A's worker writes:", writeInvoice(tokenA, 1, 100))
	_ = locker.RunExclusive(ctx, lock, func(*sql.Tx) error { return nil }, pgadvisory.WithFencing())

	// A's worker wakes up late: the database rejects its stale token.
	err = writeInvoice(tokenA, 2, 200)
	fmt.Println("A's worker rejected:", errors.Is(err, pgadvisory.ErrStaleToken))
	// Output:
	// A's worker writes: <nil>
	// A's worker rejected: true
}

func ExampleLocker_SetFencingToken() {
	ctx := context.Background()
	pool := examplePool()
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool)
	exampleMigrate(ctx, db)
	locker, err := pgadvisory.New(pgadvisory.Pgx(pool))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	lock := pgadvisory.Lock{Name: "billing.invoices", ID: exampleLockID("locker_set_fencing_token")}
	invoices, drop := exampleFencedTable(ctx, db, "locker_set_fencing_token", lock.ID)
	defer drop()

	err = locker.RunExclusive(ctx, lock, func(lockTx pgx.Tx) error {
		token, _ := locker.FencingToken(lockTx)
		// A write on another connection, in a transaction of its own.
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		if err := locker.SetFencingToken(ctx, tx, token); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+invoices+" (id, total) VALUES (1, 100)"); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}, pgadvisory.WithFencing())
	fmt.Println("write carrying the token:", err)
	// Output:
	// write carrying the token: <nil>
}

func ExampleWithLockerObserver() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	// Every call of this Locker is observed, with no option at the call sites.
	locker, err := pgadvisory.New(pgadvisory.Stdlib(db), pgadvisory.WithLockerObserver(outcomePrinter{}))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	_ = locker.RunExclusive(ctx, pgadvisory.ID(exampleLockID("with_locker_observer")), func(*sql.Tx) error { return nil })
	// Output:
	// run_exclusive : acquired
}
