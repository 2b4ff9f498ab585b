package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/lockgen/lockgen/pgadvisory"
)

// Act 3's timing. Replica A's pool runs with idle_in_transaction_session_timeout
// = idleTimeout (a common production guard against stuck transactions), and
// A pauses for pauseFor, longer than that, while it holds the lock: the
// server ends the idle session and its transaction-scoped lock goes with it.
// Every other transaction on A's pool (act 1's buildTime) stays well under
// idleTimeout.
const (
	idleTimeout = time.Second
	pauseFor    = 2 * time.Second
)

// sqlstateIdleTimeout is what the server reports when it ends a session for
// idle_in_transaction_session_timeout.
const sqlstateIdleTimeout = "25P03"

// replicaAParams are the connection runtime parameters of replica A's pool
// only: the other replicas have no idle timeout.
func replicaAParams() map[string]string {
	return map[string]string{"idle_in_transaction_session_timeout": strconv.FormatInt(idleTimeout.Milliseconds(), 10)}
}

// fenceResult is what act 3 observed.
type fenceResult struct {
	tokenA, tokenB int64
	pidA           int
	waitB          time.Duration // how long replica B waited for the lock
	errB           error         // replica B's close of the day
	balanceB       int64         // the balance B wrote
	lateErr        error         // A's worker's late write
	errA           error         // A's lock call, after the server ended its session
	final          int64         // the balance at the end
}

// lease is what replica A's lock holder hands over before it pauses.
type lease struct {
	token int64
	pid   int
}

// pauseAndFence is act 3. Replica a holds billing.close_day with a fencing
// token, hands the token to a worker and pauses longer than its pool's
// idle_in_transaction_session_timeout. The server ends a's idle lock session,
// which releases the lock; replica b, waiting for it, takes it with a newer
// token and closes the day; then a wakes and its worker writes late with the
// old token, on its own connection.
func pauseAndFence(ctx context.Context, a, b replica, s *store) (fenceResult, error) {
	var res fenceResult
	leased := make(chan lease, 1)
	closedByB := make(chan struct{})
	doneA := make(chan struct{})
	late := make(chan error, 1)
	go func() {
		defer close(doneA)
		res.errA = a.locker.RunExclusive(ctx, BillingCloseDay, func(tx *sql.Tx) error {
			token, ok := a.locker.FencingToken(tx)
			if !ok {
				return errors.New("dailyreport: no fencing token")
			}
			var pid int
			if err := tx.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
				return err
			}
			// The worker gets the token; it writes on its own connection,
			// on its own time (the holder does not wait for it).
			wake := make(chan struct{})
			go func() {
				<-wake
				late <- a.locker.RunFenced(ctx, token, func(wtx *sql.Tx) error {
					_, err := s.addCharges(ctx, wtx)
					return err
				})
			}()
			leased <- lease{token, pid}
			// The pause (a GC, a SIGSTOP, a swapped-out VM): the lock
			// session sits idle in its transaction until the server ends it.
			time.Sleep(pauseFor)
			// Woken after B closed the day, so that the write is late. Had A
			// woken before anyone else took the lock, its token would still
			// be the published one and its write rightly accepted.
			<-closedByB
			close(wake)
			// The holder's part is done; its COMMIT finds the session gone.
			return nil
		})
	}()

	var l lease
	select {
	case l = <-leased:
	case <-doneA:
		// A failed before handing out the token: no worker, nothing in late.
		return res, fmt.Errorf("dailyreport: replica A did not get billing.close_day: %w", res.errA)
	}
	res.tokenA, res.pidA = l.token, l.pid

	// B waits for the lock; only the server ending A's session can free it.
	start := time.Now()
	res.errB = b.locker.RunExclusive(ctx, BillingCloseDay, func(tx *sql.Tx) error {
		res.waitB = time.Since(start)
		res.tokenB, _ = b.locker.FencingToken(tx)
		var err error
		res.balanceB, err = s.addCharges(ctx, tx)
		return err
	}, pgadvisory.WithWait(5*time.Second))
	close(closedByB)

	<-doneA
	res.lateErr = <-late
	final, err := s.balance(ctx)
	res.final = final
	return res, err
}

// lostToIdleTimeout reports whether A's lock call failed because the server
// ended its session for idle_in_transaction_session_timeout.
func (r fenceResult) lostToIdleTimeout() bool {
	return errors.Is(r.errA, pgadvisory.ErrConnLost) && pgadvisory.SQLState(r.errA) == sqlstateIdleTimeout
}

// lines tells act 3.
func (r fenceResult) lines() []string {
	late := "ACCEPTED (no fencing!)"
	if errors.Is(r.lateErr, pgadvisory.ErrStaleToken) {
		late = "rejected by the fenced table (ErrStaleToken)"
	} else if r.lateErr != nil {
		late = "failed: " + r.lateErr.Error()
	}
	lost := fmt.Sprintf("  postgres: ends replica-a's lock session (pid %d), idle in transaction over %v; the lock is released", r.pidA, idleTimeout)
	commitA := fmt.Sprintf("its commit finds the session gone (ErrConnLost, SQLSTATE %s)", sqlstateIdleTimeout)
	if !r.lostToIdleTimeout() {
		lost = fmt.Sprintf("  postgres: did not end replica-a's lock session (pid %d) for the idle timeout", r.pidA)
		commitA = fmt.Sprintf("its lock call returned %v", r.errA)
	}
	b := fmt.Sprintf("took billing.close_day after waiting %v, token %d, balance %d -> %d",
		r.waitB.Round(100*time.Millisecond), r.tokenB, openingBalance, r.balanceB)
	if r.errB != nil {
		b = "failed: " + r.errB.Error()
	}
	return []string{
		"act 3: replica-a pauses mid-run; its lock is lost",
		fmt.Sprintf("  replica-a: holds billing.close_day with fencing token %d, hands it to a worker, pauses %v (idle_in_transaction_session_timeout=%v)",
			r.tokenA, pauseFor, idleTimeout),
		lost,
		"  replica-b: " + b,
		fmt.Sprintf("  replica-a wakes; its worker adds %d with token %d: %s", dayCharges, r.tokenA, late),
		"  replica-a: " + commitA,
		fmt.Sprintf("final balance of %s: %d (opening %d + one day's charges %d)", account, r.final, openingBalance, dayCharges),
	}
}
