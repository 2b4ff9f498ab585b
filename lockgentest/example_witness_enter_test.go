package lockgentest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockgen/lockgen/lockgentest"
	"github.com/lockgen/lockgen/pgadvisory"
)

var ledgerClose = pgadvisory.Lock{Name: "ledger.close_day", ID: 7_407}

// testLedgerCloseNeverOverlaps marks the critical section of each caller
// with Enter, called first thing inside fn, and its exit deferred inside
// fn too: the section then ends before the transaction commits and the
// lock is released, so the next holder's section never overlaps it on a
// correct run. (An exit after RunExclusive returned would overlap the next
// holder's section and fail the test although the lock worked.)
func testLedgerCloseNeverOverlaps(t *testing.T) {
	pool := lockgentest.NewPool(t)
	locker, err := pgadvisory.New(pgadvisory.Pgx(pool))
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	w := lockgentest.NewWitness(t)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := locker.RunExclusive(ctx, ledgerClose, func(tx pgx.Tx) error {
				defer w.Enter("ledger")()
				_, err := tx.Exec(ctx, `SELECT pg_sleep(0.01)`) // closing the day
				return err
			}, pgadvisory.WithWait(10*time.Second))
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
}

// The test above runs as TestExamples/Witness.Enter.
func ExampleWitness_Enter() {}
