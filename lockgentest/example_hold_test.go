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

var compactLog = pgadvisory.Lock{Name: "log.compact", ID: 7_403}

// compact is the code under test: it compacts the log unless another
// instance is doing it right now, and reports whether it did.
func compact(ctx context.Context, locker *pgadvisory.Locker[*sql.Tx]) (bool, error) {
	err := locker.RunExclusive(ctx, compactLog, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `SELECT pg_sleep(0)`) // the compaction
		return err
	})
	if errors.Is(err, pgadvisory.ErrLocked) {
		return false, nil
	}
	return err == nil, err
}

// testCompactSkipsWhileAnotherRuns is a test of compact: while another
// instance holds the lock (Hold), compact does nothing; once it is
// released, compact runs.
func testCompactSkipsWhileAnotherRuns(t *testing.T) {
	db := lockgentest.NewDB(t)
	locker, err := pgadvisory.New(pgadvisory.Stdlib(db))
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	release := lockgentest.Hold(t, db, compactLog)
	if did, err := compact(ctx, locker); did || err != nil {
		t.Fatalf("while another instance holds the lock: did %v, %v", did, err)
	}
	release()
	if did, err := compact(ctx, locker); !did || err != nil {
		t.Fatalf("after the other instance released the lock: did %v, %v", did, err)
	}
}

// The test above runs as TestExamples/Hold.
func ExampleHold() {}
