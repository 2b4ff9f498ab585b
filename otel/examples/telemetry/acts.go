package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockgen/lockgen/pgadvisory"
)

// stage is what the acts share: the pool the replicas use and its Locker,
// the tracer of their own spans, and this run's run-once window.
type stage struct {
	pool   *pgxpool.Pool
	locker *pgadvisory.Locker[pgx.Tx]
	tracer trace.Tracer
	window string
}

// actResult is an act's line of the story, and an error when its outcome
// was not the expected one.
type actResult struct {
	line string
	err  error
}

// buildTime is how long building the daily report holds its lock, so that
// the other replicas arrive while it runs.
const buildTime = 200 * time.Millisecond

// dailyReport is act 1: three replicas fire the daily report at once.
// Expected: one sends it; the others find the lock held or the day done.
func (s *stage) dailyReport(ctx context.Context) actResult {
	replicas := []string{"replica-a", "replica-b", "replica-c"}
	errs := make([]error, len(replicas))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, name := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			rctx, span := s.tracer.Start(ctx, name+": daily report")
			defer span.End()
			errs[i] = s.locker.RunOnce(rctx, ReportsDailyEmail, s.window, func(pgx.Tx) error {
				time.Sleep(buildTime)
				return nil
			}, pgadvisory.WithHolder(name))
		}()
	}
	close(start)
	wg.Wait()

	parts := make([]string, len(replicas))
	sent := 0
	var err error
	for i, e := range errs {
		switch {
		case e == nil:
			sent++
			parts[i] = replicas[i] + " sent it"
		case errors.Is(e, pgadvisory.ErrLocked):
			parts[i] = replicas[i] + " found the lock held"
		case errors.Is(e, pgadvisory.ErrAlreadyDone):
			parts[i] = replicas[i] + " found the day done"
		default:
			parts[i] = replicas[i] + " failed: " + e.Error()
			err = e
		}
	}
	if err == nil && sent != 1 {
		err = fmt.Errorf("telemetry: act 1: %d replicas sent the report, want 1", sent)
	}
	return actResult{"act 1: daily report: " + strings.Join(parts, "; "), err}
}

// cleanupHold is how long replica A holds the nightly cleanup in act 2,
// longer than the 100 ms that callers wait (declared in locks.yaml).
const cleanupHold = 500 * time.Millisecond

// cleanupTimeout is act 2: replica B waits for the nightly cleanup while
// replica A runs it. Expected: B's wait times out.
func (s *stage) cleanupTimeout(ctx context.Context) actResult {
	held := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		actx, span := s.tracer.Start(ctx, "replica-a: nightly cleanup")
		defer span.End()
		done <- s.locker.RunExclusive(actx, MaintenanceNightlyCleanup, func(pgx.Tx) error {
			close(held)
			time.Sleep(cleanupHold)
			return nil
		})
	}()
	select {
	case <-held:
	case err := <-done:
		return actResult{"act 2: replica-a could not run the cleanup", fmt.Errorf("telemetry: act 2: %w", err)}
	}
	bctx, span := s.tracer.Start(ctx, "replica-b: nightly cleanup")
	errB := s.locker.RunExclusive(bctx, MaintenanceNightlyCleanup, func(pgx.Tx) error { return nil })
	span.End()
	errA := <-done

	line := "act 2: nightly cleanup: replica-a ran it; replica-b waited 100ms: "
	switch {
	case errA != nil:
		return actResult{line + "replica-a failed", fmt.Errorf("telemetry: act 2: replica-a: %w", errA)}
	case errors.Is(errB, pgadvisory.ErrLockTimeout):
		return actResult{line + "timed out (ErrLockTimeout)", nil}
	}
	return actResult{line + fmt.Sprint(errB), fmt.Errorf("telemetry: act 2: replica-b: want ErrLockTimeout, got %v", errB)}
}

// relayLost is act 3: the outbox relay holds its session lock; an operator
// terminates its backend. Expected: the relay's context is canceled and the
// call reports ErrLockLost.
func (s *stage) relayLost(ctx context.Context) actResult {
	rctx, span := s.tracer.Start(ctx, "replica-a: outbox relay")
	defer span.End()
	var killed bool
	err := s.locker.RunSession(rctx, OutboxRelay, func(ctx context.Context) error {
		// Work under the lock: its spans nest under the lock's span.
		_, batch := s.tracer.Start(ctx, "relay batch")
		defer batch.End()
		// The operator: pg_terminate_backend on the lock's holder.
		if err := s.pool.QueryRow(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks
			WHERE locktype = 'advisory' AND granted AND (classid::bigint << 32 | objid::bigint) = $1`, OutboxRelay.ID).Scan(&killed); err != nil {
			return err
		}
		<-ctx.Done() // canceled by the lock's watcher
		return nil
	}, pgadvisory.WithCheckInterval(100*time.Millisecond))
	line := "act 3: outbox relay: its backend terminated; "
	if killed && errors.Is(err, pgadvisory.ErrLockLost) {
		return actResult{line + "the lock is lost (ErrLockLost)", nil}
	}
	return actResult{line + fmt.Sprint(err), fmt.Errorf("telemetry: act 3: want ErrLockLost, got %v (killed: %v)", err, killed)}
}

// shuttingDown is act 4: a replica shutting down calls with a context that
// is already canceled. Expected: an error, and nothing sent.
func (s *stage) shuttingDown(ctx context.Context) actResult {
	cctx, cancel := context.WithCancel(ctx)
	cctx, span := s.tracer.Start(cctx, "replica-c: outbox relay at shutdown")
	cancel()
	err := s.locker.RunSession(cctx, OutboxRelay, func(context.Context) error { return nil })
	span.End()
	line := "act 4: replica-c shutting down: "
	if errors.Is(err, context.Canceled) {
		return actResult{line + "context canceled before anything was sent", nil}
	}
	return actResult{line + fmt.Sprint(err), fmt.Errorf("telemetry: act 4: want context.Canceled, got %v", err)}
}

// clearLedger deletes this run's run-once row.
func (s *stage) clearLedger(ctx context.Context) {
	_, _ = s.pool.Exec(ctx, `DELETE FROM pgadvisory.run_once WHERE lock_id = $1 AND window_key = $2`, ReportsDailyEmail.ID, s.window)
}
