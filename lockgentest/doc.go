// Package lockgentest helps the tests of code that uses lockgen's locks:
// a throwaway database with lockgen's schema, a lock held by "another
// instance", a holder or leader made to lose its lock, and a witness that
// fails the test when two holders overlap. Everything runs against a real
// PostgreSQL server, because what a test of locking must show (who is
// excluded, what happens when a connection dies) is what the server does.
//
//	func TestReportRunsOnce(t *testing.T) {
//		db := lockgentest.NewDB(t)                 // fresh database, lockgen's schema, dropped at the end
//		locker, _ := pgadvisory.New(pgadvisory.Stdlib(db))
//
//		release := lockgentest.Hold(t, db, locks.Report) // another instance holds the lock
//		err := runReport(ctx, locker)
//		// want errors.Is(err, pgadvisory.ErrLocked) and no report written
//		release()
//
//		w := lockgentest.NewWitness(t)            // inside the job: defer w.Enter("report")()
//		// run two replicas at once: the test fails if their sections overlap
//	}
//
// The helpers:
//
//   - [NewDB] and [NewPool]: a database of the test's own, copied from a
//     migrated template at about the cost of an empty createdb
//     (BenchmarkNewDB), dropped when the test ends.
//   - [Hold]: takes a lock from a session of its own until released: the
//     code under test sees pgadvisory.ErrLocked, waits, or does not lead.
//   - [Depose]: the current holder loses the lock now, whatever its kind
//     (session lock, leadership, lease, transaction lock), as when its
//     connection dies in production: fn's context ends with
//     pgadvisory.ErrLockLost.
//   - [Witness]: [Witness.Enter] marks a critical section; two sections of
//     one key at once fail the test, naming both.
//
// The server is named by $LOCKGEN_TEST_DATABASE_URL, else $DATABASE_URL,
// else libpq's PG* variables, the rule the lockgen command follows for its
// own database. Without a reachable server the tests that need one skip,
// and fail when the CI variable is set, printing the one command that
// starts a server. The role needs CREATEDB.
package lockgentest
