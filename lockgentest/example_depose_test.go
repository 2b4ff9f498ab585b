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

var scheduler = pgadvisory.Lock{Name: "cron.scheduler", ID: 7_404}

// schedule is the code under test: while it leads, it schedules work
// every few milliseconds, and it stops as soon as it loses leadership.
func schedule(ctx context.Context, locker *pgadvisory.Locker[*sql.Tx], leading chan<- int64) error {
	return locker.Lead(ctx, scheduler, func(ctx context.Context, term int64) error {
		leading <- term
		for {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(10 * time.Millisecond): // schedule the next job
			}
		}
	}, pgadvisory.WithCheckInterval(100*time.Millisecond))
}

// testSchedulerStepsDown is a test of schedule: once it leads, Depose
// takes its leadership away, and schedule must return ErrLockLost.
func testSchedulerStepsDown(t *testing.T) {
	db := lockgentest.NewDB(t)
	locker, err := pgadvisory.New(pgadvisory.Stdlib(db))
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	leading, done := make(chan int64, 1), make(chan error, 1)
	go func() { done <- schedule(ctx, locker, leading) }()
	<-leading

	lockgentest.Depose(t, db, scheduler)
	select {
	case err := <-done:
		if !errors.Is(err, pgadvisory.ErrLockLost) {
			t.Fatalf("the deposed scheduler returned %v, want ErrLockLost", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the scheduler still leads 5s after it was deposed")
	}
}

// The test above runs as TestExamples/Depose.
func ExampleDepose() {}
