// Command telemetry shows lockgen's OpenTelemetry observer at work: the
// metrics and spans a service's locks produce, with every outcome.
//
//	cd otel && go run ./examples/telemetry
//
// It connects to LOCKGEN_DATABASE_URL (default
// postgres://localhost:5432/test), applies lockgen's schema, sets the
// observer once, on the pool's Locker
// (pgadvisory.New(pgadvisory.Pgx(pool), pgadvisory.WithLockerObserver(…)))
// and plays four acts, each
// inside a span of the caller:
//
//  1. three replicas fire the daily report at once (RunOnce): one sends
//     it, the others find the lock held or the day done;
//  2. a caller waits 100 ms for the nightly cleanup, which another
//     replica holds longer: a timeout;
//  3. the outbox relay holds its session lock until an operator
//     terminates its backend (pg_terminate_backend): the lock is lost and
//     the relay's context canceled;
//  4. a replica shutting down calls with a context already canceled: an
//     error.
//
// Then it prints the metrics, collected by an in-memory reader where a
// service would export them (OTLP, Prometheus), and the spans as a tree.
// It exits non-zero when an act's outcome is not the expected one.
package main

//go:generate go run github.com/lockgen/lockgen/cmd/lockgen generate
