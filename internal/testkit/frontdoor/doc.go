// Package frontdoor runs one test body over both of pgadvisory's drivers:
// a pgadvisory.Locker of Stdlib (a *sql.DB) and one of Pgx (a
// *pgxpool.Pool).
//
// A [Door] is one Locker bound to a connection pool. Its methods have
// the same shape for both drivers, and the transaction fn receives is a
// [Tx], whichever driver opened it:
//
//	frontdoor.ForEach(t, func(t *testing.T, d frontdoor.Door) {
//		err := d.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
//			return tx.Exec(ctx, "INSERT INTO …")
//		}, pgadvisory.WithFencing())
//		…
//	})
//
// [ForEach] runs the body once per driver, as the subtests "database/sql"
// and "pgx", each on a new pool of the package database ([testdb]). [Open]
// opens more doors (another replica, a pool of one connection, a pool with
// server settings or through a fault proxy), [OnDB] and [OnPool] wrap pools
// a test opened itself, and [SQLTx] and [PgxTx] wrap transactions that a
// control test (hand-written locking, the design source's code) began, so
// that a control can run the same fn as the front door under test.
//
// A Door embeds its Locker as [Sessions]: the Locker's methods that take
// no transaction (RunSession, Lead, Campaign, CurrentLeader, WatchLeader,
// RunSessionLimited, Close) are called on the door as they are, with a
// pgadvisory.Lock. Door's own methods are what the Locker does not give:
// the verbs whose fn takes a transaction, adapted to [Tx] (and given a raw
// lock ID), the pool (Begin, InUse, Checkout), and [Door.Hold]. A new
// Locker method without a transaction belongs in Sessions; one with a
// transaction needs a method here that adapts it.
package frontdoor
