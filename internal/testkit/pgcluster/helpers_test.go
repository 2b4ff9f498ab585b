package pgcluster_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
)

// sharedCluster is the one cluster most tests of this package use.
func sharedCluster(t *testing.T) *pgcluster.Cluster {
	t.Helper()
	return pgcluster.Shared(t, "pgcluster-tests")
}

// connect opens a pgx connection, closed when t ends.
func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// queryString runs a one-value query with the simple protocol (works
// through PgBouncer and on its admin console).
func queryString(t *testing.T, conn *pgx.Conn, query string, args ...any) string {
	t.Helper()
	var s string
	args = append([]any{pgx.QueryExecModeSimpleProtocol}, args...)
	require.NoError(t, conn.QueryRow(context.Background(), query, args...).Scan(&s), query)
	return s
}

// reachable reports whether a new connection to url can run a query.
func reachable(url string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return false
	}
	defer conn.Close(context.Background())
	return conn.Ping(ctx) == nil
}

// recorder is a testing.TB that records Skip and Fatal instead of acting
// on them, so the skip-or-fail logic can be tested. Other methods go to the
// real test.
type recorder struct {
	testing.TB
	mu      sync.Mutex
	skipped bool
	failed  bool
	msg     string
}

func (r *recorder) Helper()                          {}
func (r *recorder) Skip(args ...any)                 { r.end(&r.skipped, fmt.Sprint(args...)) }
func (r *recorder) Skipf(format string, args ...any) { r.end(&r.skipped, fmt.Sprintf(format, args...)) }
func (r *recorder) Fatal(args ...any)                { r.end(&r.failed, fmt.Sprint(args...)) }
func (r *recorder) Fatalf(format string, args ...any) {
	r.end(&r.failed, fmt.Sprintf(format, args...))
}

func (r *recorder) end(flag *bool, msg string) {
	r.mu.Lock()
	*flag, r.msg = true, msg
	r.mu.Unlock()
	runtime.Goexit()
}

// record runs fn with a recorder wrapping t, in its own goroutine (Skip and
// Fatal end that goroutine, as they end a test's).
func record(t *testing.T, fn func(testing.TB)) *recorder {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(r)
	}()
	<-done
	return r
}
