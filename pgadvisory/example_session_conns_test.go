package pgadvisory_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/lockgen/lockgen/pgadvisory"
)

// Examples of shared session connections: SetSessionConns and
// SetSessionConnsPgx. The shared example helpers are in example_test.go.

func ExampleSetSessionConns() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	// The session locks of db share at most 4 server connections (2 by
	// default; 0 gives every call a connection of its own).
	if err := pgadvisory.SetSessionConns(db, 4); err != nil {
		fmt.Println(err)
		return
	}
	base := exampleLockID("session_conns") &^ 127 // 128 keys of its own

	// 100 tenants' session locks held at once, on at most 4 connections.
	var inside, done sync.WaitGroup
	inside.Add(100)
	release := make(chan struct{})
	for tenant := range int64(100) {
		done.Go(func() {
			err := pgadvisory.RunSession(ctx, db, base+tenant, func(ctx context.Context) error {
				inside.Done()
				<-release
				return nil
			})
			if err != nil {
				fmt.Println(err)
			}
		})
	}
	inside.Wait()
	var backends int
	if err := db.QueryRowContext(ctx, `SELECT count(DISTINCT pid) FROM pg_catalog.pg_locks
WHERE locktype = 'advisory' AND granted AND ((classid::bigint << 32) | objid::bigint) BETWEEN $1 AND $1 + 99`, base).Scan(&backends); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("100 locks held by at most 4 backends:", backends <= 4)
	close(release)
	done.Wait()
	fmt.Println("connections in use after the calls:", db.Stats().InUse)
	// Output:
	// 100 locks held by at most 4 backends: true
	// connections in use after the calls: 0
}

func ExampleSetSessionConnsPgx() {
	ctx := context.Background()
	pool := examplePool()
	defer pool.Close()
	// A connection of its own for every session lock of pool, as before
	// connections were shared.
	if err := pgadvisory.SetSessionConnsPgx(pool, 0); err != nil {
		fmt.Println(err)
		return
	}
	err := pgadvisory.RunSessionPgx(ctx, pool, exampleLockID("session_conns_pgx"), func(ctx context.Context) error {
		fmt.Println("connections in use while the lock is held:", pool.Stat().AcquiredConns())
		return nil
	})
	fmt.Println("err:", err)
	fmt.Println("a negative number is refused:", pgadvisory.SetSessionConnsPgx(pool, -1) != nil)
	// Output:
	// connections in use while the lock is held: 1
	// err: <nil>
	// a negative number is refused: true
}
