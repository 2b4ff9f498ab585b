package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/lockgen/lockgen/pgadvisory"
)

// fenceResult is what act 3 observed.
type fenceResult struct {
	tokenA, tokenB int64
	pidA           int
	errB           error // replica B's close of the day
	balanceB       int64 // the balance B wrote
	lateErr        error // A's worker's late write
	errA           error // A's lock call, after its connection died
	final          int64 // the balance at the end
}

// lease is what replica A's lock holder hands over before it pauses.
type lease struct {
	token int64
	pid   int
}

// pauseAndFence is act 3. Replica a holds billing.close_day with a fencing
// token, hands the token to a worker and pauses. Its lock connection is
// terminated, as a GC pause longer than an idle timeout would do; replica b
// takes the lock and closes the day; then a's worker wakes and writes late
// with the old token.
func pauseAndFence(ctx context.Context, admin *sql.DB, a, b replica, s *store) (fenceResult, error) {
	var res fenceResult
	leased := make(chan lease, 1)
	wake := make(chan struct{})
	doneA := make(chan struct{})
	go func() {
		defer close(doneA)
		res.errA = BillingCloseDay.RunExclusive(ctx, a.db, func(tx *sql.Tx) error {
			token, ok := pgadvisory.FencingToken(tx)
			if !ok {
				return errors.New("dailyreport: no fencing token")
			}
			var pid int
			if err := tx.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
				return err
			}
			// The worker gets the token; it writes on its own connection.
			late := make(chan error, 1)
			go func() {
				<-wake // the pause
				late <- pgadvisory.RunFenced(ctx, a.db, token, func(wtx *sql.Tx) error {
					_, err := s.addCharges(ctx, wtx)
					return err
				})
			}()
			leased <- lease{token, pid}
			res.lateErr = <-late
			return res.lateErr
		})
	}()

	var l lease
	select {
	case l = <-leased:
	case <-doneA:
		return res, fmt.Errorf("dailyreport: replica A did not get billing.close_day: %w", res.errA)
	}
	res.tokenA, res.pidA = l.token, l.pid
	if err := terminate(ctx, admin, l.pid); err != nil {
		close(wake)
		<-doneA
		return res, err
	}

	res.errB = BillingCloseDay.RunExclusive(ctx, b.db, func(tx *sql.Tx) error {
		res.tokenB, _ = pgadvisory.FencingToken(tx)
		var err error
		res.balanceB, err = s.addCharges(ctx, tx)
		return err
	}, pgadvisory.WithWait(5*time.Second))

	close(wake) // A's worker wakes up
	<-doneA
	final, err := s.balance(ctx)
	res.final = final
	return res, err
}

// terminate ends the backend pid and waits until it is gone, so that its
// advisory lock is released.
func terminate(ctx context.Context, admin *sql.DB, pid int) error {
	if _, err := admin.ExecContext(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		return fmt.Errorf("dailyreport: terminate backend %d: %w", pid, err)
	}
	for range 100 {
		var alive bool
		if err := admin.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)`, pid).Scan(&alive); err != nil {
			return fmt.Errorf("dailyreport: wait for backend %d: %w", pid, err)
		}
		if !alive {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("dailyreport: backend %d still alive after pg_terminate_backend", pid)
}

// lines tells act 3.
func (r fenceResult) lines() []string {
	late := "ACCEPTED (no fencing!)"
	if errors.Is(r.lateErr, pgadvisory.ErrStaleToken) {
		late = "rejected by the fenced table (ErrStaleToken)"
	} else if r.lateErr != nil {
		late = "failed: " + r.lateErr.Error()
	}
	b := fmt.Sprintf("took billing.close_day with token %d, balance %d -> %d", r.tokenB, openingBalance, r.balanceB)
	if r.errB != nil {
		b = "failed: " + r.errB.Error()
	}
	return []string{
		"act 3: replica-a pauses mid-run; its lock is lost",
		fmt.Sprintf("  replica-a: holds billing.close_day with fencing token %d, hands it to a worker, pauses", r.tokenA),
		fmt.Sprintf("  replica-a: lock connection (pid %d) terminated, the lock is released", r.pidA),
		"  replica-b: " + b,
		fmt.Sprintf("  replica-a worker wakes, adds %d with token %d: %s", dayCharges, r.tokenA, late),
		fmt.Sprintf("final balance of %s: %d (opening %d + one day's charges %d)", account, r.final, openingBalance, dayCharges),
	}
}
