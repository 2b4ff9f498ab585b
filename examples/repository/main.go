// Command repository runs sqlc-generated repositories under an advisory
// lock: in Locker.RunExclusive's fn, the repository is built on the lock
// transaction (sqlc's New(tx), or WithTx(tx) on an existing one), for
// database/sql and pgx/v5:
//
//	go run ./examples/repository
//
// Three replicas race to send the same daily report; the repository's
// statements run in the lock's transaction, so exactly one marks it sent.
// The program creates its table in a private schema and drops it at the end.
// It connects to LOCKGEN_DATABASE_URL (default postgres://localhost:5432/test).
//
// The packages reportsql and reportpgx are generated from schema.sql and
// queries.sql; after editing those, regenerate from the repository root:
//
//	go tool -modfile=tools/go.mod sqlc generate -f examples/repository/sqlc.yaml
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/lockgen/lockgen/examples/repository/reportpgx"
	"github.com/lockgen/lockgen/examples/repository/reportsql"
	"github.com/lockgen/lockgen/keyspace"
	"github.com/lockgen/lockgen/pgadvisory"
)

//go:embed schema.sql
var schemaSQL string

// dailyReport is the lock every replica asks for, named by lockgen's
// published name-to-ID rule.
var dailyReport = keyspace.ID("examples.repository.daily_report")

func main() {
	if err := run(); err != nil {
		log.Fatalf("repository: %v", err)
	}
}

func run() error {
	url := os.Getenv("LOCKGEN_DATABASE_URL")
	if url == "" {
		url = "postgres://localhost:5432/test"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	db, pool, cleanup, err := connect(ctx, url)
	if err != nil {
		return err
	}
	defer cleanup()

	day := time.Date(2026, time.March, 2, 0, 0, 0, 0, time.UTC)
	sqlLocker, err := pgadvisory.New(pgadvisory.Stdlib(db))
	if err != nil {
		return err
	}
	defer sqlLocker.Close()
	pgxLocker, err := pgadvisory.New(pgadvisory.Pgx(pool))
	if err != nil {
		return err
	}
	defer pgxLocker.Close()
	lock := pgadvisory.ID(dailyReport)

	// 1. database/sql, New(DBTX) shape: three replicas race.
	var wg sync.WaitGroup
	results := make([]string, 3)
	for i := range results {
		wg.Go(func() {
			replica := fmt.Sprintf("replica-%d", i+1)
			err := sqlLocker.RunExclusive(ctx, lock, func(tx *sql.Tx) error {
				q := reportsql.New(tx)
				if err := q.EnsureReport(ctx, day); err != nil {
					return err
				}
				n, err := q.MarkReportSent(ctx, reportsql.MarkReportSentParams{Day: day, SentBy: replica})
				if err != nil {
					return err
				}
				if n == 0 {
					results[i] = "found the report already sent"
					return nil
				}
				// Sending takes a while; the others arrive meanwhile.
				time.Sleep(200 * time.Millisecond)
				results[i] = "sent the report"
				return nil
			})
			switch {
			case errors.Is(err, pgadvisory.ErrLocked):
				results[i] = "skipped: another replica holds the lock"
			case err != nil:
				results[i] = "failed: " + err.Error()
			}
		})
	}
	wg.Wait()
	for i, r := range results {
		fmt.Printf("replica-%d: %s\n", i+1, r)
	}

	// 2. database/sql, WithTx shape: an existing *Queries rebound to the
	// lock transaction.
	queries := reportsql.New(db)
	err = sqlLocker.RunExclusive(ctx, lock, func(tx *sql.Tx) error {
		r, err := queries.WithTx(tx).GetReport(ctx, day)
		if err != nil {
			return err
		}
		fmt.Printf("report %s: sent once, by %s\n", r.Day.Format(time.DateOnly), r.SentBy.String)
		return nil
	})
	if err != nil {
		return err
	}

	// 3. pgx/v5: the same queries generated for pgx, on a pgx Locker.
	pgDay := pgtype.Date{Time: day.AddDate(0, 0, 1), Valid: true}
	err = pgxLocker.RunExclusive(ctx, lock, func(tx pgx.Tx) error {
		q := reportpgx.New(tx)
		held, err := q.HoldsAdvisoryLock(ctx, dailyReport)
		if err != nil {
			return err
		}
		fmt.Println("pgx repository runs in the lock's transaction:", held)
		if err := q.EnsureReport(ctx, pgDay); err != nil {
			return err
		}
		n, err := q.MarkReportSent(ctx, reportpgx.MarkReportSentParams{Day: pgDay, SentBy: "pgx-replica"})
		if err != nil {
			return err
		}
		fmt.Printf("report %s: marked sent by pgx-replica (%d row)\n", pgDay.Time.Format(time.DateOnly), n)
		return nil
	})
	if err != nil {
		return err
	}

	sent := 0
	for _, r := range results {
		if r == "sent the report" {
			sent++
		}
	}
	fmt.Printf("reports sent for %s: %d\n", day.Format(time.DateOnly), sent)
	if sent != 1 {
		return fmt.Errorf("expected exactly one replica to send the report, got %d", sent)
	}
	return nil
}

// connect opens both front doors on a fresh private schema holding the
// example's table. cleanup drops the schema and closes the connections.
func connect(ctx context.Context, url string) (*sql.DB, *pgxpool.Pool, func(), error) {
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	schema := "lockgen_example_repository_" + hex.EncodeToString(suffix)

	connCfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("parsing LOCKGEN_DATABASE_URL: %w", err)
	}
	connCfg.RuntimeParams["search_path"] = schema
	db := stdlib.OpenDB(*connCfg)

	poolCfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		_ = db.Close()
		return nil, nil, nil, fmt.Errorf("parsing LOCKGEN_DATABASE_URL: %w", err)
	}
	poolCfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		_ = db.Close()
		return nil, nil, nil, err
	}

	if _, err := db.ExecContext(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		pool.Close()
		_ = db.Close()
		return nil, nil, nil, fmt.Errorf("cannot reach PostgreSQL at %s: %w", url, err)
	}
	cleanup := func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := db.ExecContext(dctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			log.Printf("repository: dropping schema %s: %v", schema, err)
		}
		pool.Close()
		_ = db.Close()
	}
	if _, err := db.ExecContext(ctx, schemaSQL); err != nil {
		cleanup()
		return nil, nil, nil, fmt.Errorf("creating the example's table: %w", err)
	}
	return db, pool, cleanup, nil
}
