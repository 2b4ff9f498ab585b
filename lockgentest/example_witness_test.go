package lockgentest_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lockgen/lockgen/lockgentest"
	"github.com/lockgen/lockgen/pgadvisory"
)

var settle = pgadvisory.Lock{Name: "payments.settle", ID: 7_405}

// settlePayments is the code under test; enter lets a test mark its
// critical section: it is called first thing inside, and what it returns
// when the section ends, before the transaction (and the lock) does.
func settlePayments(ctx context.Context, locker *pgadvisory.Locker[*sql.Tx], enter func() (exit func())) error {
	return locker.RunExclusive(ctx, settle, func(tx *sql.Tx) error {
		defer enter()()
		_, err := tx.ExecContext(ctx, `SELECT pg_sleep(0.02)`) // the settlement
		return err
	}, pgadvisory.WithWait(10*time.Second))
}

// testSettlementsNeverOverlap is a test of settlePayments: eight replicas
// at once, each marking its critical section with a Witness, which fails
// the test if two are ever inside together.
func testSettlementsNeverOverlap(t *testing.T) {
	db := lockgentest.NewDB(t)
	locker, err := pgadvisory.New(pgadvisory.Stdlib(db))
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	w := lockgentest.NewWitness(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- settlePayments(ctx, locker, func() func() { return w.Enter("settle") })
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil && !errors.Is(err, pgadvisory.ErrLocked) {
			t.Error(err)
		}
	}
}

// The test above runs as TestExamples/Witness.
func ExampleWitness() {}
