package lockgentest_test

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/lockgentest"
)

// TestMain points lockgentest at the server of lockgen's other tests
// (LOCKGEN_DATABASE_URL, README "Tests") unless its own variable is set.
func TestMain(m *testing.M) {
	if os.Getenv(lockgentest.EnvDatabaseURL) == "" {
		_ = os.Setenv(lockgentest.EnvDatabaseURL, testdb.ServerURL())
	}
	os.Exit(m.Run())
}

// recorder is a testing.TB whose failures and skips are recorded instead
// of reported: the tests run a user's test through it to see it fail. The
// rest (Helper, Cleanup, Logf, Name, …) goes to the real test.
type recorder struct {
	testing.TB
	mu      sync.Mutex
	errs    []string
	skipped bool
	skipMsg string
}

func (r *recorder) record(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, msg)
}

func (r *recorder) Errorf(format string, args ...any) { r.record(fmt.Sprintf(format, args...)) }
func (r *recorder) Error(args ...any)                 { r.record(fmt.Sprint(args...)) }
func (r *recorder) Fail()                             { r.record("Fail") }
func (r *recorder) FailNow()                          { r.record("FailNow"); runtime.Goexit() }
func (r *recorder) Fatalf(format string, args ...any) {
	r.record(fmt.Sprintf(format, args...))
	runtime.Goexit()
}
func (r *recorder) Fatal(args ...any) { r.record(fmt.Sprint(args...)); runtime.Goexit() }
func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.errs) > 0
}
func (r *recorder) SkipNow() {
	r.mu.Lock()
	r.skipped = true
	r.mu.Unlock()
	runtime.Goexit()
}
func (r *recorder) Skip(args ...any) { r.Skipf("%s", fmt.Sprint(args...)) }
func (r *recorder) Skipf(format string, args ...any) {
	r.mu.Lock()
	r.skipMsg = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	r.SkipNow()
}
func (r *recorder) Skipped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.skipped
}

// failures returns what was recorded, one message a line.
func (r *recorder) failures() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.errs, "\n")
}

// runAs runs a user's test body through a recorder on its own goroutine
// (so that Fatal and Skip end only the body) and returns the recorder.
func runAs(t *testing.T, body func(tb testing.TB)) *recorder {
	t.Helper()
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		body(r)
	}()
	<-done
	return r
}
