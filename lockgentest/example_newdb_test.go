package lockgentest_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/lockgen/lockgen/lockgentest"
	"github.com/lockgen/lockgen/pgadvisory"
)

var dailyInvoices = pgadvisory.Lock{Name: "invoices.daily", ID: 7_401}

// sendInvoices is the code under test: it sends the day's invoices once,
// however many replicas run it (RunOnce's ledger is in lockgen's schema).
func sendInvoices(ctx context.Context, locker *pgadvisory.Locker[*sql.Tx], day string) error {
	return locker.RunOnce(ctx, dailyInvoices, day, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO invoice_run (day) VALUES ($1)`, day)
		return err
	})
}

// testInvoicesOncePerDay is a test of sendInvoices on a database of its
// own: lockgen's schema is there, the test adds its tables, and the
// database is dropped when the test ends.
func testInvoicesOncePerDay(t *testing.T) {
	db := lockgentest.NewDB(t)
	if _, err := db.Exec(`CREATE TABLE invoice_run (day text)`); err != nil {
		t.Fatal(err)
	}
	locker, err := pgadvisory.New(pgadvisory.Stdlib(db))
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if err := sendInvoices(ctx, locker, "2026-12-04"); err != nil {
		t.Fatal(err)
	}
	if err := sendInvoices(ctx, locker, "2026-12-04"); !errors.Is(err, pgadvisory.ErrAlreadyDone) {
		t.Fatalf("second run of the day: %v, want ErrAlreadyDone", err)
	}
}

// The test above runs as TestExamples/NewDB.
func ExampleNewDB() {}
