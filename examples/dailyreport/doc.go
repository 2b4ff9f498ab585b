// Command dailyreport tells the design source's story as it happens in
// production: three replicas of a service run the end-of-day report cron,
// and customers must get one e-mail.
//
//	go run ./examples/dailyreport
//
// It connects to LOCKGEN_DATABASE_URL (default
// postgres://localhost:5432/test), applies lockgen's schema with
// pgadvisory.Migrate, creates a private schema for its tables (dropped at
// the end) and plays three acts:
//
//  1. three replicas (three pools, each with its own application_name)
//     fire the daily report at once; RunOnce lets exactly one send it;
//  2. they fire again seconds apart (1 s, 2 s and 3 s later): the day is
//     done, all three skip;
//  3. replica A holds billing.close_day with a fencing token, hands the
//     token to a worker and pauses for 2 s; its pool runs with
//     idle_in_transaction_session_timeout = 1 s, so PostgreSQL ends its idle
//     lock session and the lock is released; replica B, waiting for the
//     lock, takes it with a newer token and closes the day, and A's worker,
//     waking up, is refused by the fenced balances table (ErrStaleToken).
//
// It exits non-zero if exactly one report was not sent, replica A's lock was
// not lost to the idle timeout, or the stale write was not rejected.
//
// The locks are declared in locks.yaml; regenerate locks_gen.go with
//
//	go generate ./examples/dailyreport
package main

//go:generate go run github.com/lockgen/lockgen/cmd/lockgen generate
