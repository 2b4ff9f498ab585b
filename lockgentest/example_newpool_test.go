package lockgentest_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockgen/lockgen/lockgentest"
	"github.com/lockgen/lockgen/pgadvisory"
)

var rebuildIndex = pgadvisory.Lock{Name: "search.rebuild", ID: 7_402}

// testRebuildWithPgx is a test of code that uses pgx: NewPool gives a
// pool on a database of the test's own with lockgen's schema.
func testRebuildWithPgx(t *testing.T) {
	pool := lockgentest.NewPool(t)
	locker, err := pgadvisory.New(pgadvisory.Pgx(pool))
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var token int64
	err = locker.RunExclusive(ctx, rebuildIndex, func(tx pgx.Tx) error {
		token, _ = locker.FencingToken(tx)
		return nil
	}, pgadvisory.WithFencing())
	if err != nil || token == 0 {
		t.Fatalf("fenced rebuild: token %d, %v", token, err)
	}
}

// The test above runs as TestExamples/NewPool.
func ExampleNewPool() {}
