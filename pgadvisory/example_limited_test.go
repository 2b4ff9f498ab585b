package pgadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/lockgen/lockgen/pgadvisory"
)

// Examples of limited locks: RunLimited, Locker.Slot, WithLimit and
// keyspace's slot rule.

func ExampleLocker_RunLimited() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	exampleMigrate(ctx, db)
	locker, err := pgadvisory.New(pgadvisory.Stdlib(db))
	if err != nil {
		log.Fatal(err)
	}
	// At most 2 exports at once, across every replica.
	exports := pgadvisory.Lock{Name: "exports.run", ID: exampleLockID("limited")}

	inside := make(chan struct{})
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = locker.RunLimited(ctx, exports, 2, func(tx *sql.Tx) error {
				inside <- struct{}{}
				<-release // the export's work
				return nil
			})
		}()
	}
	<-inside
	<-inside
	err = locker.RunLimited(ctx, exports, 2, func(tx *sql.Tx) error { return nil })
	fmt.Println("a third export:", errors.Is(err, pgadvisory.ErrLocked))
	close(release)
	wg.Wait()
	err = locker.RunLimited(ctx, exports, 2, func(tx *sql.Tx) error { return nil })
	fmt.Println("after they finished:", err)
	// Output:
	// a third export: true
	// after they finished: <nil>
}

func ExampleLocker_Slot() {
	ctx := context.Background()
	pool := examplePool()
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool) // Migrate takes a *sql.DB
	defer db.Close()
	exampleMigrate(ctx, db)
	locker, err := pgadvisory.New(pgadvisory.Pgx(pool))
	if err != nil {
		log.Fatal(err)
	}
	calls := pgadvisory.Lock{Name: "payments.provider_calls", ID: exampleLockID("slot")}
	err = locker.RunLimited(ctx, calls, 10, func(tx pgx.Tx) error {
		slot, ok := locker.Slot(tx) // which of the 10 slots this call holds
		fmt.Println(ok, slot >= 0 && slot < 10)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// true true
}

func ExampleWithLimit() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	exampleMigrate(ctx, db)
	locker, err := pgadvisory.New(pgadvisory.Stdlib(db))
	if err != nil {
		log.Fatal(err)
	}
	// What lockgen generates for limit: 3 in locks.yaml.
	syncs := pgadvisory.Lock{Name: "tenants.sync", ID: exampleLockID("with_limit")}.With(pgadvisory.WithLimit(3))

	err = locker.RunExclusive(ctx, syncs, func(*sql.Tx) error { return nil })
	fmt.Println("RunExclusive:", errors.Is(err, pgadvisory.ErrInvalidArgument))
	err = locker.RunLimited(ctx, syncs, 4, func(*sql.Tx) error { return nil })
	fmt.Println("n = 4:", errors.Is(err, pgadvisory.ErrInvalidArgument))
	err = locker.RunLimited(ctx, syncs, 3, func(*sql.Tx) error { return nil })
	fmt.Println("n = 3:", err)
	// Output:
	// RunExclusive: true
	// n = 4: true
	// n = 3: <nil>
}

func ExampleSlot() {
	// Slot reads the slot from the context that RunSessionLimited's fn
	// receives (see Locker.RunSessionLimited); any other context has none.
	_, ok := pgadvisory.Slot(context.Background())
	fmt.Println(ok)
	// Output:
	// false
}

func ExampleLocker_RunSessionLimited() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	exampleMigrate(ctx, db)
	locker, err := pgadvisory.New(pgadvisory.Stdlib(db))
	if err != nil {
		log.Fatal(err)
	}
	// At most 2 long syncs of one tenant at once, each over many
	// transactions.
	syncs := pgadvisory.Lock{Name: "tenants.sync", ID: exampleLockID("session_limited")}
	err = locker.RunSessionLimited(ctx, syncs, 2, func(ctx context.Context) error {
		slot, _ := pgadvisory.Slot(ctx)
		fmt.Println("syncing in slot", slot < 2)
		// ... many transactions; stop when ctx is canceled (ErrLockLost).
		return nil
	})
	fmt.Println(err)
	// Output:
	// syncing in slot true
	// <nil>
}

func ExampleLock_Limit() {
	thumbnails := pgadvisory.Lock{Name: "media.thumbnails", ID: 42}.With(pgadvisory.WithLimit(4))
	fmt.Println(thumbnails.Limit())
	fmt.Println(pgadvisory.Lock{Name: "reports.daily_email", ID: 43}.Limit())
	// Output:
	// 4
	// 0
}
