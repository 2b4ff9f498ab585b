package main

import (
	"errors"
	"fmt"

	"github.com/lockgen/lockgen/pgadvisory"
)

// result is what the three acts observed.
type result struct {
	day           string
	first, second []outcome
	reports       int
	fence         fenceResult
}

// check returns an error naming every broken invariant.
func (r result) check() error {
	var errs []error
	sent := 0
	for _, o := range r.first {
		switch {
		case o.err == nil:
			sent++
		case errors.Is(o.err, pgadvisory.ErrLocked), errors.Is(o.err, pgadvisory.ErrAlreadyDone):
		default:
			errs = append(errs, fmt.Errorf("act 1: %s failed: %w", o.replica, o.err))
		}
	}
	if sent != 1 {
		errs = append(errs, fmt.Errorf("act 1: %d replicas sent the report, want 1", sent))
	}
	for _, o := range r.second {
		if !errors.Is(o.err, pgadvisory.ErrAlreadyDone) {
			errs = append(errs, fmt.Errorf("act 2: %s got %v, want ErrAlreadyDone", o.replica, o.err))
		}
	}
	if r.reports != 1 {
		errs = append(errs, fmt.Errorf("%d sent reports in the outbox, want 1", r.reports))
	}
	if !r.fence.lostToIdleTimeout() {
		errs = append(errs, fmt.Errorf("act 3: replica-a's lock call got %v, want ErrConnLost with SQLSTATE %s (idle_in_transaction_session_timeout)", r.fence.errA, sqlstateIdleTimeout))
	}
	if r.fence.errB != nil {
		errs = append(errs, fmt.Errorf("act 3: replica-b: %w", r.fence.errB))
	}
	if !errors.Is(r.fence.lateErr, pgadvisory.ErrStaleToken) {
		errs = append(errs, fmt.Errorf("act 3: late write got %v, want ErrStaleToken", r.fence.lateErr))
	}
	if want := int64(openingBalance + dayCharges); r.fence.final != want {
		errs = append(errs, fmt.Errorf("act 3: final balance %d, want %d", r.fence.final, want))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("dailyreport: invariant failed: %w", err)
	}
	return nil
}

// lines tells acts 1 and 2.
func (r result) lines() []string {
	out := []string{"act 1: three replicas fire the end-of-day report at once"}
	for _, o := range r.first {
		out = append(out, "  "+o.replica+": "+r.describe(o.err))
	}
	out = append(out, fmt.Sprintf("act 2: they fire again seconds apart (their clocks are %v apart)", refireSkew))
	for i, o := range r.second {
		out = append(out, fmt.Sprintf("  %s, %v later: %s", o.replica, refireAt(i), r.describe(o.err)))
	}
	return append(out, fmt.Sprintf("reports sent for %s: %d", r.day, r.reports))
}

// describe tells one report job's outcome.
func (r result) describe(err error) string {
	switch {
	case err == nil:
		return "sent the report"
	case errors.Is(err, pgadvisory.ErrLocked):
		return "skipped: another replica is sending it (ErrLocked)"
	case errors.Is(err, pgadvisory.ErrAlreadyDone):
		return "skipped: the report for " + r.day + " was already sent (ErrAlreadyDone)"
	default:
		return "failed: " + err.Error()
	}
}
