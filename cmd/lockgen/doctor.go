package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/lockgen/lockgen/internal/decl"
	"github.com/lockgen/lockgen/internal/doctor"
)

var doctorCmd = &command{
	name: "doctor",
	help: `usage: lockgen doctor [-db URL] [-f locks.yaml] [-json]

Doctor checks the server and the connection path a service will use, with
the service's URL (through its pooler, if it has one). It prints one line per
check: pass, warn or fail, the evidence, and the fix. It exits 1 if any check
fails and 0 otherwise.

	primary                              fails on a hot standby
	pooler                               warns about a pooler in the path; fails on statement pooling
	exclusion                            a lock taken on one connection must not be granted to a second
	schema                               lockgen's migrations, applied at this lockgen's version
	idle_in_transaction_session_timeout  warns when a holder idle in its transaction keeps its locks
	keepalives                           warns when a vanished holder keeps its locks for long
	lock_table                           the lock table's capacity against the locks held
	synchronous_commit                   what it means for fn's writes
	registry                             with -f: declared but not registered, and the reverse

-json prints {"checks":[{"name":…,"status":"pass"|"warn"|"fail","detail":…,"fix":…}]}.
The checks take and release locks of their own under fresh keys; they never
touch a service's locks.
`,
	flags: func(c *cli, fs *flag.FlagSet) {
		dbFlag(c, fs)
		fs.StringVar(&c.file, "f", "", "declarations `file`, for the registry and lock_table checks")
		fs.BoolVar(&c.db.json, "json", false, "print JSON for tools")
	},
	run: func(c *cli, fs *flag.FlagSet) int {
		if fs.NArg() > 0 {
			return c.usageError("doctor", "unexpected argument %q", fs.Arg(0))
		}
		cfg := doctor.Config{}
		if c.file != "" {
			loaded, err := decl.Load(c.file, decl.LoadOptions{})
			if err != nil {
				return c.fail(err)
			}
			cfg.Declared, cfg.Source = declared(loaded.File), c.file
		}
		db, ctx, done, err := c.openDBWith("doctor", dbOptions{conns: 4, timeout: dbTimeout,
			// Poolers before PgBouncer 1.21 cannot carry prepared
			// statements; the URL may choose otherwise.
			adjust: func(cfg *pgx.ConnConfig) {
				if !strings.Contains(c.databaseURL(), "default_query_exec_mode") {
					cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
				}
			}})
		if err != nil {
			return c.fail(err)
		}
		defer done()
		cfg.DB = db
		report, err := doctor.Run(ctx, cfg)
		if err != nil {
			return c.fail(err)
		}
		if c.db.json {
			enc := json.NewEncoder(c.stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(report); err != nil {
				return c.fail(err)
			}
		} else {
			for _, ch := range report.Checks {
				line := fmt.Sprintf("%-4s  %s: %s", ch.Status, ch.Name, ch.Detail)
				if ch.Fix != "" {
					line += ". Fix: " + ch.Fix
				}
				fmt.Fprintln(c.stdout, line)
			}
		}
		if report.Failed() {
			return exitFail
		}
		return exitOK
	},
}
