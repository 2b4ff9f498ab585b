package pgadvisory_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// The limited-lock processes: TestRunLimitedProcesses starts this test
// binary three times as TestRunLimitedChildProcess, which runs its share of
// the callers and prints what it did; an external witness (a connection of
// the parent's) counts the callers inside fn in pg_locks.

// Environment of a limited child process.
const (
	limitedChildURL     = "LOCKGEN_LIMITED_CHILD_URL"
	limitedChildSpec    = "LOCKGEN_LIMITED_CHILD_SPEC" // mode,driver,lockID,n,callers,witnessKey
	limitedChildTimeout = 90 * time.Second
)

// limitedSpec is what a child process does.
type limitedSpec struct {
	mode       string // "run" (RunLimited) or "session" (RunSessionLimited): callers each run once with WithWait; "hold": one caller holds until killed
	driver     string // "pgx" or "sql"
	lockID     int64
	n, callers int
	witnessKey int64
}

func (s limitedSpec) String() string {
	return fmt.Sprintf("%s,%s,%d,%d,%d,%d", s.mode, s.driver, s.lockID, s.n, s.callers, s.witnessKey)
}

func parseLimitedSpec(t *testing.T, text string) limitedSpec {
	f := strings.Split(text, ",")
	require.Len(t, f, 6)
	var s limitedSpec
	var err error
	s.mode, s.driver = f[0], f[1]
	s.lockID, err = strconv.ParseInt(f[2], 10, 64)
	require.NoError(t, err)
	s.n, err = strconv.Atoi(f[3])
	require.NoError(t, err)
	s.callers, err = strconv.Atoi(f[4])
	require.NoError(t, err)
	s.witnessKey, err = strconv.ParseInt(f[5], 10, 64)
	require.NoError(t, err)
	return s
}

// TestRunLimitedChildProcess is a child of the limited-lock process tests.
// Run by itself it does nothing.
func TestRunLimitedChildProcess(t *testing.T) {
	url := os.Getenv(limitedChildURL)
	if url == "" {
		t.Skip("a child process of TestRunLimitedProcesses and TestRunLimitedHolderKilled")
	}
	spec := parseLimitedSpec(t, os.Getenv(limitedChildSpec))
	ctx, cancel := context.WithTimeout(context.Background(), limitedChildTimeout)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = int32(spec.callers + 2) // a connection per caller, and the background ROLLBACKs' own
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	lock := pgadvisory.Lock{Name: "test.limited_processes", ID: spec.lockID}

	// inside is fn's body on its transaction: the witness key, shared, so
	// that the witness counts the callers inside fn, then a pause.
	var run func(ctx context.Context, body func(q func(string, ...any) error) error) error
	switch spec.driver {
	case "pgx":
		l, err := pgadvisory.New(pgadvisory.Pgx(pool))
		require.NoError(t, err)
		run = func(ctx context.Context, body func(q func(string, ...any) error) error) error {
			return l.RunLimited(ctx, lock, spec.n, func(tx pgx.Tx) error {
				return body(func(query string, args ...any) error { _, err := tx.Exec(ctx, query, args...); return err })
			}, pgadvisory.WithWait(0))
		}
	default:
		db := stdlib.OpenDBFromPool(pool)
		defer db.Close()
		l, err := pgadvisory.New(pgadvisory.Stdlib(db))
		require.NoError(t, err)
		run = func(ctx context.Context, body func(q func(string, ...any) error) error) error {
			return l.RunLimited(ctx, lock, spec.n, func(tx *sql.Tx) error {
				return body(func(query string, args ...any) error { _, err := tx.ExecContext(ctx, query, args...); return err })
			}, pgadvisory.WithWait(0))
		}
	}

	if spec.mode == "session" {
		// RunSessionLimited: fn's body runs in a transaction of its own.
		var lr interface {
			RunSessionLimited(context.Context, pgadvisory.Lock, int, func(context.Context) error, ...pgadvisory.Option) error
		}
		if spec.driver == "pgx" {
			lr, err = pgadvisory.New(pgadvisory.Pgx(pool))
		} else {
			lr, err = pgadvisory.New(pgadvisory.Stdlib(stdlib.OpenDBFromPool(pool)))
		}
		require.NoError(t, err)
		run = func(ctx context.Context, body func(q func(string, ...any) error) error) error {
			return lr.RunSessionLimited(ctx, lock, spec.n, func(ctx context.Context) error {
				tx, err := pool.Begin(ctx)
				if err != nil {
					return err
				}
				defer func() { _ = tx.Rollback(ctx) }()
				if err := body(func(query string, args ...any) error { _, err := tx.Exec(ctx, query, args...); return err }); err != nil {
					return err
				}
				return tx.Commit(ctx)
			}, pgadvisory.WithWait(0))
		}
	}
	if spec.mode == "hold" {
		err := run(ctx, func(q func(string, ...any) error) error {
			fmt.Println("holding")
			<-ctx.Done()
			return nil
		})
		t.Fatalf("the holder returned: %v", err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	ran, failed := 0, []string{}
	for range spec.callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := run(ctx, func(q func(string, ...any) error) error {
				if err := q(`SELECT pg_advisory_xact_lock_shared($1)`, spec.witnessKey); err != nil {
					return err
				}
				time.Sleep(150 * time.Millisecond)
				return nil
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = append(failed, err.Error())
			} else {
				ran++
			}
		}()
	}
	wg.Wait()
	fmt.Printf("ran %d failed %q\n", ran, failed)
}

// startLimitedChild starts a child process with spec; its stdout lines go
// to the returned channel.
func startLimitedChild(t *testing.T, spec limitedSpec) (*exec.Cmd, <-chan string) {
	t.Helper()
	c := startChild(t, "TestRunLimitedChildProcess", limitedChildURL+"="+testdb.URL(t), limitedChildSpec+"="+spec.String())
	return c.cmd, c.lines
}

// limitedRound runs 20 callers in 3 processes (7 on pgx, 7 and 6 on
// database/sql) on a lock limited to n, with WithWait, while the witness
// polls pg_locks; it returns the most callers the witness saw inside fn at
// once, after checking that every call ran.
func limitedRound(t *testing.T, mode string, n int) int {
	admin := migrated.DB(t)
	ctx := testdb.Context(t)
	lockID, witnessKey := testdb.Key(t), testdb.Key(t)
	shares := []struct {
		driver  string
		callers int
	}{{"pgx", 7}, {"sql", 7}, {"sql", 6}}
	var outs []<-chan string
	for _, s := range shares {
		_, lines := startLimitedChild(t, limitedSpec{mode: mode, driver: s.driver, lockID: lockID, n: n,
			callers: s.callers, witnessKey: witnessKey})
		outs = append(outs, lines)
	}
	// The witness: its own connection, polling until every child is done.
	conn, err := admin.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	results := make(chan string, len(outs))
	for _, lines := range outs {
		go func() {
			last := ""
			for l := range lines {
				if strings.HasPrefix(l, "ran ") {
					last = l
				}
			}
			results <- last
		}()
	}
	most, polls := 0, 0
	var got []string
	for len(got) < len(outs) {
		var inside int
		require.NoError(t, conn.QueryRowContext(ctx, `SELECT count(*) FROM pg_catalog.pg_locks
			WHERE locktype = 'advisory' AND objsubid = 1 AND granted
			  AND database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
			  AND ((classid::bigint << 32) | objid::bigint) = $1`, witnessKey).Scan(&inside))
		most = max(most, inside)
		polls++
		select {
		case r := <-results:
			got = append(got, r)
		case <-ctx.Done():
			t.Fatal("the children did not finish")
		default:
		}
	}
	for i, r := range got {
		var ran int
		_, err := fmt.Sscanf(r, "ran %d", &ran)
		require.NoError(t, err, "child output %q", r)
		require.Contains(t, r, "failed []", "child %d", i)
		got[i] = strconv.Itoa(ran)
	}
	total := 0
	for _, r := range got {
		v, _ := strconv.Atoi(r)
		total += v
	}
	require.Equal(t, 20, total, "every call eventually ran")
	t.Logf("%s, n = %d: the witness saw at most %d callers inside fn over %d polls", mode, n, most, polls)
	return most
}

// TestRunLimitedProcesses: 20 callers in 3 processes, both drivers, on a
// lock limited to 3, with WithWait: the external witness never sees more
// than 3 inside fn, and every call runs. The control with n = 4 shows the
// witness can see 4.
func TestRunLimitedProcesses(t *testing.T) {
	require.LessOrEqual(t, limitedRound(t, "run", 3), 3)
	limitedControl(t, "run")
}

// limitedControl runs rounds with n = 4 until the witness sees 4 callers
// inside fn (at most 3 rounds: on a loaded machine the callers may not
// overlap fully in one), and never more.
func limitedControl(t *testing.T, mode string) {
	most := 0
	for range 3 {
		most = limitedRound(t, mode, 4)
		require.LessOrEqual(t, most, 4)
		if most == 4 {
			return
		}
	}
	require.Equal(t, 4, most, "control: the witness sees 4 callers inside fn with n = 4")
}

// TestRunSessionLimitedProcesses is TestRunLimitedProcesses with
// RunSessionLimited (fn's body in a transaction of its own).
func TestRunSessionLimitedProcesses(t *testing.T) {
	require.LessOrEqual(t, limitedRound(t, "session", 3), 3)
	limitedControl(t, "session")
}

// TestRunLimitedHolderKilled: the process holding a lock's only slot (n =
// 1) is SIGKILLed inside fn; the slot is free as soon as the server ends
// its backend, and another call takes it. The control: while the holder
// lives, the call is refused.
func TestRunLimitedHolderKilled(t *testing.T) {
	admin := migrated.DB(t)
	ctx := testdb.Context(t)
	lockID := testdb.Key(t)
	cmd, lines := startLimitedChild(t, limitedSpec{mode: "hold", driver: "pgx", lockID: lockID, n: 1, callers: 1, witnessKey: 0})
	select {
	case l := <-lines:
		require.Equal(t, "holding", l)
	case <-ctx.Done():
		t.Fatal("the holder did not start")
	}
	l, err := pgadvisory.New(pgadvisory.Stdlib(admin))
	require.NoError(t, err)
	lock := pgadvisory.Lock{Name: "test.limited_processes", ID: lockID}
	require.ErrorIs(t, l.RunLimited(ctx, lock, 1, func(*sql.Tx) error { return nil }), pgadvisory.ErrLocked, "control: the holder lives")

	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	_ = cmd.Wait()
	require.Eventually(t, func() bool { return witness.Of(admin).Locks(t, true, slotKeys(lockID, 1)...) == 0 },
		10*time.Second, 5*time.Millisecond, "the slot frees when the server ends the backend")
	t.Logf("slot free %v after the kill", time.Since(killed).Round(time.Millisecond))
	require.NoError(t, l.RunLimited(ctx, lock, 1, func(*sql.Tx) error { return nil }))
}
