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
string), name, params, mode, state, granted, pid, application_name,
client_addr, xact_start, xact_age_seconds, backend_state, wait_event and
blocked_by; unknown values are null.

Advisory locks taken with two int4 keys (pg_advisory_lock(int, int), a key
space lockgen does not use) are not listed; a note on stderr counts them.

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
			return c.fail(err)
		}
		defer done()
		locks, err := status.Query(ctx, db, c.db.prefix)
		if err != nil {
			return c.fail(err)
		}
		write := status.WriteTable
		if c.db.json {
			write = status.WriteJSON
		}
		if err := write(c.stdout, locks); err != nil {
			return c.fail(err)
		}
		if n, err := status.Int4KeyLocks(ctx, db); err != nil {
			return c.fail(err)
		} else if n > 0 {
			fmt.Fprintf(c.stderr, "lockgen status: note: %d advisory lock(s) taken with two int4 keys (pg_advisory_lock(int, int)) are not listed; "+
				"see SELECT * FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2\n", n)
		}
		return exitOK
	},
}
