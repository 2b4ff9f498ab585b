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
	help: `usage: lockgen doctor [-db URL] [-f locks.yaml] [-uses LIST] [-conformance] [-json]

Doctor checks the server and the connection path a service will use, with
the service's URL and role (through its pooler, if it has one). It prints
one line per check: pass, warn or fail, the evidence, and the fix. It exits
1 if any check fails and 0 otherwise.

	primary                              fails on a hot standby
	pooler                               proves transaction pooling when it sees it; fails behind it when a
	                                     declared use needs session locks, and on statement pooling
	exclusion                            a lock taken on one connection must not be granted to a second
	schema                               lockgen's migrations, applied at this lockgen's version, by the version
	                                     table and by the objects they create
	idle_in_transaction_session_timeout  warns when a holder idle in its transaction keeps its locks
	keepalives                           warns when a vanished holder keeps its locks for long
	lock_table                           the lock table's capacity (as PostgreSQL sizes it) against the locks held
	synchronous_commit                   what it means for fn's writes
	registry                             with -f: declared but not registered, and the reverse, names and
	                                     parameter types

-conformance adds a second tier, the failure modes that servers and poolers
resembling PostgreSQL show, each tried with two sessions of its own on the
path -db names (direct, PgBouncer in either mode, or any other):

	conformance.xact_excludes_xact         a transaction lock is refused to a second transaction
	conformance.session_excludes_session   a session lock is refused to a second session, and free once unlocked
	conformance.session_excludes_xact      a session lock is refused to another session's transaction lock
	conformance.xact_excludes_session      a transaction lock is refused to another session's session lock
	conformance.held_through_transaction   a transaction lock stays held, as a second session sees it,
	                                       between the transaction's statements (sent one by one and
	                                       pipelined), and is free after COMMIT
	conformance.same_backend               a session lock, statements back to back and interleaved with
	                                       another session's, and its unlock land on one backend
	conformance.returned_connection_clean  a client connection that closes holding a session lock leaves
	                                       no lock behind
	conformance.timeout_leaves_nothing     lockgen's own waits (RunExclusive, RunSession) ended by lock_timeout,
	                                       statement_timeout or a cancel as the holder releases run fn holding
	                                       the lock, or return an error and leave it held nowhere
	conformance.waiter_session_dies        a waiter whose backend is terminated returns with an error within 2s

A failed check says what it means for each entry point and the fix. Behind
a proven transaction pooler the session-lock checks take no lock: they fail
when a declared use needs session locks, naming the entry points that are
safe there.

-uses says which of lockgen's entry points the service calls, comma-separated:

	exclusive  transaction locks: RunExclusive, RunOnce, fencing
	session    session locks: RunSession
	lead       leader election: Lead, Campaign
	lease      leader election and session-like locks with leases: Lead, Campaign, RunSession with WithLease
	migrate    pgadvisory.Migrate at start-up, with this URL and role

Without -uses every one is checked for. Behind a transaction pooler (PgBouncer's
pool_mode=transaction) transaction locks and leases work and the others do
not, so -uses exclusive,lease lets such a service pass. The pooler probe can prove
transaction pooling, never session pooling: through a pooler it cannot
prove, session-level uses warn.

-json prints {"checks":[{"name":…,"status":"pass"|"warn"|"fail","detail":…,"fix":…}]}.
The checks take and release locks of their own under fresh keys; they never
touch a service's locks. Behind a proven transaction pooler they take no
session lock.
`,
	flags: func(c *cli, fs *flag.FlagSet) {
		dbFlag(c, fs)
		fs.StringVar(&c.file, "f", "", "declarations `file`, for the registry and lock_table checks")
		fs.StringVar(&c.db.uses, "uses", "", "the entry points the service calls: a comma-separated `LIST` of exclusive, session, lead, lease, migrate (default: all)")
		fs.BoolVar(&c.db.json, "json", false, "print JSON for tools")
		fs.BoolVar(&c.db.conformance, "conformance", false, "also run the conformance checks (two sessions each) on the path")
	},
	run: func(c *cli, fs *flag.FlagSet) int {
		if fs.NArg() > 0 {
			return c.usageError("doctor", "unexpected argument %q", fs.Arg(0))
		}
		cfg := doctor.Config{}
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if set["uses"] {
			uses, err := doctor.ParseUses(c.db.uses)
			if err != nil {
				return c.usageError("doctor", "-uses: %v", err)
			}
			cfg.Uses = uses
		}
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
			adjust: func(cfg *pgx.ConnConfig, raw string) {
				if !strings.Contains(raw, "default_query_exec_mode") {
					cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
				}
			}})
		if err != nil {
			return c.openFailed("doctor", err)
		}
		defer done()
		cfg.DB = db
		report, err := doctor.Run(ctx, cfg)
		if err != nil {
			return c.fail(err)
		}
		if c.db.conformance {
			more, err := doctor.RunConformance(ctx, cfg)
			if err != nil {
				return c.fail(err)
			}
			report.Checks = append(report.Checks, more.Checks...)
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
