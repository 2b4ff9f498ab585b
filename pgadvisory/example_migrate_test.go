package pgadvisory_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/lockgen/lockgen/keyspace"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Examples of Migrate: at start-up of every replica, and with a pgx pool.
// The shared example helpers are in example_test.go.

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

// ExampleMigrate applies lockgen's migrations at start-up; every replica may
// call it at once.
func ExampleMigrate() {
	ctx := context.Background()
	db := exampleDB() // sql.Open("pgx", url) on the examples' private database
	defer db.Close()
	if err := pgadvisory.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	var id int64
	if err := db.QueryRowContext(ctx, `SELECT pgadvisory.lock_id('billing.invoice', $1)`, keyspace.Int64Param(42)).Scan(&id); err != nil {
		log.Fatal(err)
	}
	fmt.Println(id == keyspace.ParamID("billing.invoice", keyspace.Int64Param(42)))
	// Output: true
}

// ExampleMigrate_pgx: pgx users wrap their pool in a *sql.DB for Migrate.
func ExampleMigrate_pgx() {
	ctx := context.Background()
	pool := examplePool() // pgxpool.New(ctx, url)
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	if err := pgadvisory.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	fmt.Println("migrated")
	// Output: migrated
}

// ExampleMigrator: migrate a pgx pool and report the status, as lockgen
// migrate status does. DownTo(ctx, v) and Down roll back the same way.
func ExampleMigrator() {
	ctx := context.Background()
	pool := examplePool()
	defer pool.Close()
	m, err := pgadvisory.NewMigratorPgx(pool)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Up(ctx); err != nil {
		log.Fatal(err)
	}
	st, err := m.Status(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("up to date:", st.UpToDate(), "pending:", len(st.Pending()))
	// Output: up to date: true pending: 0
}

// ExampleMigrations: the SQL for teams whose own migration tool (goose,
// atlas, flyway, golang-migrate) applies lockgen's schema; lockgen migrate
// sql prints the same.
func ExampleMigrations() {
	list, err := pgadvisory.Migrations()
	if err != nil {
		log.Fatal(err)
	}
	first := list[0]
	fmt.Println(first.Version, first.Name(), strings.Contains(first.UpSQL, "CREATE SCHEMA pgadvisory;"))
	fmt.Println(strings.Contains(first.DownSQL, "DROP SCHEMA pgadvisory;"))
	// Output:
	// 1 lock_id true
	// true
}
