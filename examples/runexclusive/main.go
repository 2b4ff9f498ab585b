// Command runexclusive shows the design source's opening scenario: three
// replicas fire the end-of-day report at the same moment, and only one of
// them sends it.
//
//	go run ./examples/runexclusive
//
// It connects to LOCKGEN_DATABASE_URL (default postgres://localhost:5432/test).
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/lockgen/lockgen/pgadvisory"
)

// dailyReport is the lock every replica asks for. Generated code
// (cmd/lockgen) would give it a declared name and a stable ID.
var dailyReport = pgadvisory.Lock{Name: "reports.daily_email", ID: -6078806957557529815}

func main() {
	url := os.Getenv("LOCKGEN_DATABASE_URL")
	if url == "" {
		url = "postgres://localhost:5432/test"
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		log.Fatalf("runexclusive: cannot reach PostgreSQL at %s: %v", url, err)
	}
	// One Locker per pool; the replicas share this one here, as separate
	// processes would each have their own.
	locker, err := pgadvisory.New(pgadvisory.Stdlib(db))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	var wg sync.WaitGroup
	start := make(chan struct{})
	results := make([]string, 3)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			err := locker.RunExclusive(ctx, dailyReport, func(tx *sql.Tx) error {
				// The critical section: build and send the report. Held long
				// enough that the other replicas arrive while it runs.
				time.Sleep(300 * time.Millisecond)
				return nil
			})
			switch {
			case err == nil:
				results[i] = "sent the report"
			case errors.Is(err, pgadvisory.ErrLocked):
				results[i] = "skipped: another replica holds " + dailyReport.Name
			default:
				results[i] = "failed: " + err.Error()
			}
		}()
	}
	close(start)
	wg.Wait()
	sent := 0
	for i, r := range results {
		fmt.Printf("replica %d: %s\n", i+1, r)
		if r == "sent the report" {
			sent++
		}
	}
	fmt.Printf("reports sent: %d\n", sent)
	if sent != 1 {
		os.Exit(1)
	}
}
