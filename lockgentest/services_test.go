package lockgentest_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgen/lockgen/lockgentest"
	"github.com/lockgen/lockgen/pgadvisory"
)

// The small services of these tests, each in a correct and a buggy
// version, as a user's code would have them.

var reportLock = pgadvisory.Lock{Name: "lockgentest.report", ID: 7_001}

// reportJob writes today's report. The correct job runs under
// RunExclusive and skips (ErrLocked) while another instance runs it; the
// buggy one forgot the lock and runs twice.
type reportJob struct {
	db      *sql.DB
	locker  *pgadvisory.Locker[*sql.Tx]
	noLock  bool                 // the bug
	witness *lockgentest.Witness // nil outside the Witness tests
	inside  func()               // called inside the section (tests pause there)
	runs    atomic.Int64         // sections entered
}

func newReportJob(t testing.TB, db *sql.DB) *reportJob {
	t.Helper()
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS report (id bigserial PRIMARY KEY, day date NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	locker, err := pgadvisory.New(pgadvisory.Stdlib(db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locker.Close() })
	return &reportJob{db: db, locker: locker}
}

func (j *reportJob) section(ctx context.Context, tx *sql.Tx) error {
	if j.witness != nil {
		defer j.witness.Enter("report")()
	}
	j.runs.Add(1)
	if j.inside != nil {
		j.inside()
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO report (day) VALUES (current_date)`)
	return err
}

func (j *reportJob) Run(ctx context.Context) error {
	if j.noLock {
		tx, err := j.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		if err := j.section(ctx, tx); err != nil {
			return err
		}
		return tx.Commit()
	}
	return j.locker.RunExclusive(ctx, reportLock, func(tx *sql.Tx) error { return j.section(ctx, tx) })
}

func reports(t testing.TB, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM report`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// leader does work while it leads. The correct leader stops when its
// context ends; the buggy one ignores its context and stops only when
// told to (stop).
type leader struct {
	locker    *pgadvisory.Locker[*sql.Tx]
	lock      pgadvisory.Lock
	opts      []pgadvisory.Option
	ignoreCtx bool // the bug
	elected   chan struct{}
	stop      chan struct{}
	ticks     atomic.Int64
}

func newLeader(t testing.TB, db *sql.DB, lock pgadvisory.Lock, opts ...pgadvisory.Option) *leader {
	t.Helper()
	locker, err := pgadvisory.New(pgadvisory.Stdlib(db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locker.Close() })
	return &leader{locker: locker, lock: lock, opts: opts, elected: make(chan struct{}), stop: make(chan struct{})}
}

func (l *leader) Run(ctx context.Context) error {
	return l.locker.Lead(ctx, l.lock, func(ctx context.Context, term int64) error {
		close(l.elected)
		for {
			done := ctx.Done()
			if l.ignoreCtx {
				done = nil
			}
			select {
			case <-done:
				return context.Cause(ctx)
			case <-l.stop:
				return nil
			case <-time.After(10 * time.Millisecond):
				l.ticks.Add(1)
			}
		}
	}, l.opts...)
}

// userTestSkipsWhileHeld is a user's test of the report job with Hold:
// while another instance holds the lock, the job must not run.
func userTestSkipsWhileHeld(t testing.TB, job *reportJob) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	release := lockgentest.Hold(t, job.db, reportLock)
	err := job.Run(ctx)
	if !errors.Is(err, pgadvisory.ErrLocked) {
		t.Errorf("while another instance holds the lock, Run returned %v, want ErrLocked", err)
	}
	if n := reports(t, job.db); n != 0 {
		t.Errorf("the job wrote %d reports while another instance held the lock", n)
	}
	release()
	if err := job.Run(ctx); err != nil {
		t.Errorf("after release, Run: %v", err)
	}
}

// userTestNeverTwiceAtOnce is a user's test of the report job with a
// Witness: two replicas, the second started while the first is inside
// its section.
func userTestNeverTwiceAtOnce(t testing.TB, a, b *reportJob) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := lockgentest.NewWitness(t)
	a.witness, b.witness = w, w
	aInside, bDone := make(chan struct{}), make(chan struct{})
	a.inside = func() {
		close(aInside)
		select {
		case <-bDone:
		case <-ctx.Done():
		}
	}
	aErr := make(chan error, 1)
	go func() { aErr <- a.Run(ctx) }()
	select {
	case <-aInside:
	case err := <-aErr:
		t.Fatalf("replica a: %v", err)
	}
	bErr := b.Run(ctx)
	close(bDone)
	if err := <-aErr; err != nil {
		t.Errorf("replica a: %v", err)
	}
	if bErr != nil && !errors.Is(bErr, pgadvisory.ErrLocked) {
		t.Errorf("replica b: %v", bErr)
	}
}

// userTestStepsDown is a user's test of a leader with Depose: once
// deposed, the leader must stop within a few seconds, with ErrLockLost,
// and do no more work.
func userTestStepsDown(t testing.TB, db *sql.DB, l *leader) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- l.Run(ctx) }()
	t.Cleanup(func() { close(l.stop); <-runErr })
	select {
	case <-l.elected:
	case err := <-runErr:
		t.Fatalf("the leader was never elected: %v", err)
	}
	lockgentest.Depose(t, db, l.lock)
	select {
	case err := <-runErr:
		runErr <- err // for the cleanup
		if !errors.Is(err, pgadvisory.ErrLockLost) {
			t.Errorf("the deposed leader returned %v, want ErrLockLost", err)
		}
		after := l.ticks.Load()
		time.Sleep(50 * time.Millisecond)
		if n := l.ticks.Load(); n != after {
			t.Errorf("the leader did %d more ticks after returning", n-after)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("the leader still leads 5s after it was deposed (%d ticks so far)", l.ticks.Load())
	}
}

// TestHoldCatchesAJobWithoutItsLock: the job that forgot its lock runs
// while another instance holds it, and the user's test fails; the correct
// job passes the same test.
func TestHoldCatchesAJobWithoutItsLock(t *testing.T) {
	db := lockgentest.NewDB(t)
	buggy := newReportJob(t, db)
	buggy.noLock = true
	r := runAs(t, func(tb testing.TB) { userTestSkipsWhileHeld(tb, buggy) })
	if !r.Failed() {
		t.Fatal("the user's test passed a job that runs without its lock")
	}
	t.Logf("the user's test failed the buggy job, as it should:\n%s", r.failures())

	db = lockgentest.NewDB(t) // the control, on a database without the buggy run's report
	r = runAs(t, func(tb testing.TB) { userTestSkipsWhileHeld(tb, newReportJob(tb, db)) })
	if r.Failed() {
		t.Fatalf("the user's test failed the correct job:\n%s", r.failures())
	}
}

// TestWitnessCatchesAJobThatRunsTwice: two replicas of the job without
// its lock overlap, and the Witness fails the test naming both holders;
// two replicas of the correct job never overlap.
func TestWitnessCatchesAJobThatRunsTwice(t *testing.T) {
	db := lockgentest.NewDB(t)
	a, b := newReportJob(t, db), newReportJob(t, db)
	a.noLock, b.noLock = true, true
	r := runAs(t, func(tb testing.TB) { userTestNeverTwiceAtOnce(tb, a, b) })
	if !r.Failed() {
		t.Fatal("the Witness did not see two replicas of the job without its lock overlap")
	}
	msg := r.failures()
	if !containsAll(msg, `two holders of "report" overlap`, "holder #1", "holder #2", "services_test.go") {
		t.Errorf("the Witness's report does not name both holders:\n%s", msg)
	}
	t.Logf("the Witness failed the buggy job, as it should:\n%s", msg)

	a, b = newReportJob(t, db), newReportJob(t, db)
	r = runAs(t, func(tb testing.TB) { userTestNeverTwiceAtOnce(tb, a, b) })
	if r.Failed() {
		t.Fatalf("the Witness failed the correct job:\n%s", r.failures())
	}
	if got := a.runs.Load() + b.runs.Load(); got != 1 {
		t.Fatalf("the correct replicas entered %d sections, want 1 (the second skips with ErrLocked)", got)
	}
}

// TestDeposeCatchesALeaderThatIgnoresItsContext: the leader that ignores
// its context keeps working after it was deposed, and the user's test
// fails; the correct leader stops with ErrLockLost.
func TestDeposeCatchesALeaderThatIgnoresItsContext(t *testing.T) {
	db := lockgentest.NewDB(t)
	lock := pgadvisory.Lock{Name: "lockgentest.leader", ID: 7_002}
	buggy := newLeader(t, db, lock, pgadvisory.WithCheckInterval(100*time.Millisecond))
	buggy.ignoreCtx = true
	r := runAs(t, func(tb testing.TB) { userTestStepsDown(tb, db, buggy) })
	if !r.Failed() {
		t.Fatal("the user's test passed a leader that ignores its context")
	}
	t.Logf("the user's test failed the buggy leader, as it should:\n%s", r.failures())

	correct := newLeader(t, db, lock, pgadvisory.WithCheckInterval(100*time.Millisecond))
	r = runAs(t, func(tb testing.TB) { userTestStepsDown(tb, db, correct) })
	if r.Failed() {
		t.Fatalf("the user's test failed the correct leader:\n%s", r.failures())
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
