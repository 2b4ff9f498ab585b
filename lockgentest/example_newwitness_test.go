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

var mailQueue = pgadvisory.Lock{Name: "mail.queue_worker", ID: 7_406}

// drainMail is the code under test: the queue's single worker, a session
// lock held while it drains the queue (enter marks the section, as in the
// Witness example).
func drainMail(ctx context.Context, locker *pgadvisory.Locker[*sql.Tx], enter func() (exit func())) error {
	return locker.RunSession(ctx, mailQueue, func(ctx context.Context) error {
		defer enter()()
		select { // the draining
		case <-time.After(20 * time.Millisecond):
			return nil
		case <-ctx.Done(): // the lock was lost
			return context.Cause(ctx)
		}
	}, pgadvisory.WithWait(10*time.Second))
}

// testMailWorkersTakeTurns is a test of drainMail: NewWitness gives the
// test one Witness, shared by four replicas with a Locker each, and fails
// the test if two of them ever drain at once.
func testMailWorkersTakeTurns(t *testing.T) {
	db := lockgentest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	w := lockgentest.NewWitness(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		locker, err := pgadvisory.New(pgadvisory.Stdlib(db))
		if err != nil {
			t.Fatal(err)
		}
		defer locker.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- drainMail(ctx, locker, func() func() { return w.Enter("mail") })
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

// The test above runs as TestExamples/NewWitness.
func ExampleNewWitness() {}
