package main

import (
	"flag"
	"fmt"

	"github.com/lockgen/lockgen/internal/status"
)

var statusCmd = &command{
	name: "status",
	help: `usage: lockgen status [-db URL] [-name PREFIX] [-json]

Status lists the advisory locks held and awaited in the database, by
declared name: for each holder or waiter its parameters (registered
instances of parameterized locks), mode, state (granted or waiting), pid,
application_name, client address, the age of its transaction and the pids
blocking it. Locks whose IDs are not in the registry show their raw key.
Names come from the registry that pgadvisory.Register and lockgen register
fill; the rows come from the view pgadvisory.status, which psql users can
query directly.

-json prints an array of objects with the fields lock_id (a decimal
string), int4_keys, name, params, mode, state, granted, pid, application_name,
client_addr, xact_start, xact_age_seconds, backend_state, wait_event,
blocked_by, leader ({"holder", "term", "since", "expires"} on the row of a
backend that leads its lock with pgadvisory.Lead, or on a lease's line,
else null; expires is a lease's), limit and queue; unknown values are null.
A leadership also shows in the table's last column, LEADER.

A lease (pgadvisory WithLease: Lead, Campaign, RunSession) holds no
advisory lock and no connection: it shows as one line with mode lease, no
pid, and LEADER "holder, term N, since TIME, expires TIME". Leases are read
from pgadvisory.lease, which only the schema's owner may read.

A limited lock (pgadvisory RunLimited, RunSessionLimited) shows as one line
with mode limited and state "K/N held, W waiting": K of its N slots held,
W backends waiting in the server's queue for a slot (SQL jobs; lockgen's
waiting calls hold no connection and are not counted); in JSON its limit is
{"n", "held", "waiting"} (null on other rows). Its slots' keys do not show
as rows of their own.

Calls waiting in lockgen's queue (pgadvisory WithWait, migration 00011)
hold no connection and no advisory lock: the waiters of a lock show as one
line with mode queued, no pid, and state "W queued (S shared)" (W live
waiters, S of them shared; a call on a set of locks counts in the line of
each); in JSON its queue is {"waiting", "shared"} (null on other rows). At
most one of them, the head of the queue, may also show as a backend
waiting for the lock on the server.

Advisory locks taken with two int4 keys (pg_advisory_lock(int, int), a key
space lockgen does not use) are listed after the others as int4(KEY1,KEY2);
in JSON their lock_id is null and int4_keys holds the two keys.

On a database without lockgen's schema (no view pgadvisory.status), or for
a role that may not read the view (a monitoring role with pg_monitor),
status still lists every advisory lock from pg_locks and pg_stat_activity,
with raw keys, and a note on stderr says what gives names (the schema, or
the GRANT SELECT ON pgadvisory.status that the role needs).

On a hot standby status exits 1 and says so: advisory locks are local to a
server, so the primary's locks are not visible there.

pg_locks does not tell session-level from transaction-level holds. Seeing
other roles' sessions in full needs pg_read_all_stats (or pg_monitor).
`,
	flags: func(c *cli, fs *flag.FlagSet) {
		dbFlag(c, fs)
		fs.StringVar(&c.db.prefix, "name", "", "only locks whose names start with `PREFIX` (hides unregistered keys)")
		fs.BoolVar(&c.db.json, "json", false, "print JSON for tools instead of a table")
	},
	run: func(c *cli, fs *flag.FlagSet) int {
		if fs.NArg() > 0 {
			return c.usageError("status", "unexpected argument %q", fs.Arg(0))
		}
		db, ctx, done, err := c.openDB("status")
		if err != nil {
			return c.openFailed("status", err)
		}
		defer done()
		snap, err := status.Read(ctx, db, c.db.prefix)
		if err != nil {
			return c.fail(err)
		}
		write := status.WriteTable
		if c.db.json {
			write = status.WriteJSON
		}
		if err := write(c.stdout, snap.Locks); err != nil {
			return c.fail(err)
		}
		if !snap.Named {
			fmt.Fprintln(c.stderr, "lockgen status: note: "+snap.Unnamed)
		}
		return exitOK
	},
}
