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
//  2. they fire again a second later: the day is done, all three skip;
//  3. replica A holds billing.close_day with a fencing token, hands the
//     token to a worker and pauses; its lock connection dies
//     (pg_terminate_backend, as a GC pause plus an idle timeout would do),
//     replica B takes the lock and closes the day, and A's worker, waking
//     up, is refused by the fenced balances table (ErrStaleToken).
//
// It exits non-zero if exactly one report was not sent or the stale write
// was not rejected.
//
// The locks are declared in locks.yaml; regenerate locks_gen.go with
//
//	go generate ./examples/dailyreport
package main

//go:generate go run github.com/lockgen/lockgen/cmd/lockgen generate
