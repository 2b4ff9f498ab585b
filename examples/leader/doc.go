// Command leader tells leader election with terms the database enforces:
// three replicas of a service campaign for one leadership (an outbox
// relay), and one leads.
//
//	go run ./examples/leader
//
// It connects to LOCKGEN_DATABASE_URL (default
// postgres://localhost:5432/test), applies lockgen's schema with
// pgadvisory.Migrate, creates a private schema for its fenced table
// (dropped at the end) and plays the story:
//
//  1. three replicas (three pools, each with its own application_name)
//     campaign with Locker.Campaign; one is elected with a term, which
//     lockgen published as the lock's fencing token, and relays with it;
//     Locker.CurrentLeader names it;
//  2. the leader's server backend is killed (pg_terminate_backend), as a
//     crashed server process, a failover or an operator would: the
//     leader's watcher notices within its check interval and cancels the
//     leadership context;
//  3. another replica, waiting in the lock's queue, is elected with a
//     higher term;
//  4. the deposed leader's late write (a worker that had not looked at the
//     context yet) carries its old term and is rejected by the fenced
//     table (ErrStaleToken).
//
// It exits non-zero if any of that does not happen.
package main
