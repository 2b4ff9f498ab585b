package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockgen/lockgen/pgadvisory"
)

// migrateTimeout bounds lockgen migrate: longer than the wait for another
// migrator's lock (pgadvisory's default, five minutes).
const migrateTimeout = 10 * time.Minute

// lockReportEvery is how often migrate says who holds the migration lock
// it waits for.
var lockReportEvery = 3 * time.Second

var migrateCmd = &command{
	name: "migrate",
	help: `usage: lockgen migrate up|down|status|sql [-db URL] [-to VERSION] [-from VERSION] [-down] [-goose] [-force] [-reconcile]

Migrate applies lockgen's schema (the schema pgadvisory: lock IDs in SQL,
fencing, the run-once ledger, the registry, the status view, leader
election) with the migrations and the version table
(public.pgadvisory_db_version) that pgadvisory.Migrate uses, so the two can
be mixed.

	up       apply every pending migration, or those up to -to VERSION;
	         -reconcile first makes the version table agree with the
	         schema's objects (a schema another tool applied, or a version
	         table whose schema a restore left out: up says when)
	down     roll back the last applied migration, or every one above
	         -to VERSION (-to 0 removes lockgen's schema); a migration whose
	         rollback drops data (the run-once ledger, published fencing
	         tokens and their sequence, the registry, leaders' terms) needs
	         -force, and down says what it would drop
	status   list the migrations, applied or pending, and whether the
	         schema's objects agree; changes nothing
	sql      print the SQL of the migrations, for teams whose own migration
	         tool applies lockgen's schema; needs no database. Up SQL of the
	         versions after -from (default 0) up to -to (default the
	         latest), or with -down the down SQL from -from (default the
	         latest) down to, not including, -to (default 0), newest first.
	         Without -goose it is for psql and tools that run a file as one
	         script (flyway, golang-migrate): apply each migration in its
	         own transaction. With -goose it is one goose migration file
	         (Up and Down sections, goose's statement annotations) to save
	         in your goose directory under a version of yours

up and down say which database they change and where its address came
from, take the migration lock (a session advisory lock; while another
session holds it they say who, every few seconds) and so need a direct
connection: through PgBouncer in transaction mode they are refused, as is a
hot standby. What ran is reported, also when a later migration fails. A
wrong URL, a database lockgen never migrated (for down), an unknown version
or a version below zero is reported and changes nothing.
`,
	flags: func(c *cli, fs *flag.FlagSet) {
		dbFlag(c, fs)
		fs.Var(&c.migrate.to, "to", "target `VERSION`")
		fs.Var(&c.migrate.from, "from", "sql: first `VERSION` excluded (up) or included (-down)")
		fs.BoolVar(&c.migrate.down, "down", false, "sql: print the down SQL")
		fs.BoolVar(&c.migrate.goose, "goose", false, "sql: print one goose migration file")
		fs.BoolVar(&c.migrate.force, "force", false, "down: drop the data that rolling back destroys")
		fs.BoolVar(&c.migrate.reconcile, "reconcile", false, "up: first make the version table agree with the schema's objects")
	},
	run: runMigrate,
}

// migrateFlags are lockgen migrate's flags besides -db.
type migrateFlags struct {
	to, from         versionFlag
	down, goose      bool
	force, reconcile bool
}

// versionFlag is a migration version given on the command line.
type versionFlag struct {
	v   int64
	set bool
}

func (f *versionFlag) String() string {
	if !f.set {
		return ""
	}
	return strconv.FormatInt(f.v, 10)
}

func (f *versionFlag) Set(s string) error {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("%q is not a version number", s)
	}
	f.v, f.set = v, true
	return nil
}

// flagsOf says which flags belong to which action.
var flagsOf = map[string][]string{
	"from": {"sql"}, "down": {"sql"}, "goose": {"sql"},
	"force": {"down"}, "reconcile": {"up"},
	"to": {"up", "down", "sql"},
}

func runMigrate(c *cli, fs *flag.FlagSet) int {
	if fs.NArg() == 0 {
		return c.usageError("migrate", "missing up, down, status or sql")
	}
	action := fs.Arg(0)
	// Flags may also follow the action: lockgen migrate up -to 2.
	if err := fs.Parse(fs.Args()[1:]); err != nil {
		return c.usageError("migrate", "%v", err)
	}
	if fs.NArg() > 0 {
		return c.usageError("migrate", "unexpected argument %q", fs.Arg(0))
	}
	switch action {
	case "up", "down", "status", "sql":
	default:
		return c.usageError("migrate", "unknown action %q: want up, down, status or sql", action)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for name, actions := range flagsOf {
		if set[name] && !contains(actions, action) {
			return c.usageError("migrate", "-%s is a flag of migrate %s", name, strings.Join(actions, ", "))
		}
	}
	list, err := pgadvisory.Migrations()
	if err != nil {
		return c.fail(err)
	}
	if action == "sql" {
		if set["db"] {
			return c.usageError("migrate", "migrate sql needs no database: -db is not used")
		}
		return c.migrateSQL(list)
	}
	if c.migrate.to.set {
		v := c.migrate.to.v
		switch {
		case v < 0:
			return c.usageError("migrate", "-to %d: below zero: a version is 0 (no migration) or more", v)
		case v == 0 && action == "up":
			return c.usageError("migrate", "-to 0 selects no migration to apply: this lockgen's migrations are %s", versions(list))
		case v != 0 && !known(list, v):
			return c.usageError("migrate", "-to %d: unknown version: this lockgen's migrations are %s (0: none)", v, versions(list))
		}
	}

	db, ctx, done, err := c.openDBWith("migrate", dbOptions{conns: 2, timeout: migrateTimeout})
	if err != nil {
		return c.openFailed("migrate", err)
	}
	defer done()
	m, err := pgadvisory.NewMigrator(db, pgadvisory.WithMigrationLockReport(lockReportEvery, func(h pgadvisory.MigrationLockHolder) {
		fmt.Fprintf(c.stderr, "lockgen migrate: waiting for the migration lock (another migrator's), held by %s, for %v\n", h, h.Waited.Round(time.Second))
	}))
	if err != nil {
		return c.fail(err)
	}
	if action == "status" {
		st, err := m.Status(ctx)
		if err != nil {
			return c.fail(err)
		}
		writeMigrationStatus(c.stdout, st)
		return exitOK
	}
	fmt.Fprintf(c.stdout, "database %s (from %s)\n", c.connected, c.connected.From)
	var res []pgadvisory.MigrationResult
	switch {
	case action == "up" && c.migrate.reconcile:
		if c.migrate.to.set {
			return c.usageError("migrate", "-reconcile applies every pending migration: leave out -to")
		}
		res, err = m.Reconcile(ctx)
	case action == "up" && c.migrate.to.set:
		res, err = m.UpTo(ctx, c.migrate.to.v)
	case action == "up":
		res, err = m.Up(ctx)
	default:
		if code, ok := c.refuseDroppingState(ctx, db, m, list); !ok {
			return code
		}
		if c.migrate.to.set {
			res, err = m.DownTo(ctx, c.migrate.to.v)
		} else {
			res, err = m.Down(ctx)
		}
	}
	for _, r := range res { // what ran, also before an error
		switch {
		case r.Recorded && r.Up:
			fmt.Fprintf(c.stdout, "recorded %s as applied (its objects exist)\n", r.Migration.File)
		case r.Recorded:
			fmt.Fprintf(c.stdout, "removed the record of %s (its objects are gone)\n", r.Migration.File)
		case r.Up:
			fmt.Fprintf(c.stdout, "applied %s (%v)\n", r.Migration.File, r.Duration.Round(time.Millisecond))
		default:
			fmt.Fprintf(c.stdout, "rolled back %s (%v)\n", r.Migration.File, r.Duration.Round(time.Millisecond))
		}
	}
	if err != nil {
		return c.fail(err)
	}
	st, err := m.Status(ctx)
	if err != nil {
		return c.fail(err)
	}
	if len(res) == 0 {
		fmt.Fprintf(c.stdout, "nothing to do: ")
	}
	fmt.Fprintf(c.stdout, "the database is at version %d; this lockgen's latest is %d\n", st.Current, st.Latest)
	return exitOK
}

// stateMeaning says what rows of lockgen's tables and sequences are, for
// down's refusal.
var stateMeaning = map[string]string{
	"pgadvisory.run_once":             "the run-once ledger: those windows would run again",
	"pgadvisory.fence":                "the published fencing tokens that fenced tables check",
	"pgadvisory.fencing_token_seq":    "fencing tokens would start again at 1, below tokens already handed out",
	"pgadvisory.registry":             "lock names for lockgen status; lockgen register fills it again",
	"pgadvisory.registry_declaration": "declared locks for lockgen status and doctor; lockgen register fills it again",
	"pgadvisory.leader":               "leaders' terms, which pgadvisory.CurrentLeader reads",
	"pgadvisory.fenced_table":         "the fenced tables, which the fence triggers check; lockgen fence's migrations list them again",
	"pgadvisory.lease":                "leases: their holders would lose them (a new holder's term still supersedes theirs)",
	"pgadvisory.leader_resigned":      "resigned leaders' terms, without which CurrentLeader could name a resigned leader again",
	"pgadvisory.slot_limit":           "limited locks' registered limits: the next caller of each registers its n again",
	"pgadvisory.waiter":               "the queues of waiting calls: calls waiting now lose their place in arrival order",
}

// refuseDroppingState checks, before down, whether the migrations it would
// roll back drop tables or sequences; without -force it says what they
// hold and returns the usage status with ok false.
func (c *cli) refuseDroppingState(ctx context.Context, db *sql.DB, m *pgadvisory.Migrator, list []pgadvisory.Migration) (int, bool) {
	st, err := m.Status(ctx)
	if err != nil {
		return c.fail(err), false
	}
	floor := st.Current - 1
	if c.migrate.to.set {
		floor = c.migrate.to.v
	}
	var drops []string
	for _, s := range st.Migrations {
		if s.Applied && s.Version > floor {
			for _, d := range s.Drops {
				drops = append(drops, c.describeState(ctx, db, d))
			}
		}
	}
	if len(drops) == 0 || c.migrate.force {
		return 0, true
	}
	step := "rolling back the last migration"
	if c.migrate.to.set {
		step = fmt.Sprintf("rolling back to %d", floor)
	}
	return c.usageError("migrate", "%s drops state that protects data:\n\t%s\nrun it again with -force to drop it", step, strings.Join(drops, "\n\t")), false
}

// describeState says what a table or sequence ("table pgadvisory.fence")
// holds now.
func (c *cli) describeState(ctx context.Context, db *sql.DB, drop string) string {
	kind, name, _ := strings.Cut(drop, " ")
	schema, rel, _ := strings.Cut(name, ".")
	ident := pgx.Identifier{schema, rel}.Sanitize()
	var now string
	switch kind {
	case "sequence":
		var last sql.NullInt64
		if err := db.QueryRowContext(ctx, `SELECT CASE WHEN is_called THEN last_value END FROM `+ident).Scan(&last); err != nil {
			now = "unreadable: " + err.Error()
		} else if last.Valid {
			now = fmt.Sprintf("at %d", last.Int64)
		} else {
			now = "never drawn"
		}
	default:
		var n int64
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+ident).Scan(&n); err != nil {
			now = "unreadable: " + err.Error()
		} else {
			now = fmt.Sprintf("%d rows", n)
		}
	}
	if meaning := stateMeaning[name]; meaning != "" {
		now += ": " + meaning
	}
	return fmt.Sprintf("%s (%s)", drop, now)
}

// writeMigrationStatus prints one line per migration and a summary.
func writeMigrationStatus(w io.Writer, st *pgadvisory.MigrationStatus) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tMIGRATION\tSTATE\tAPPLIED AT")
	for _, m := range st.Migrations {
		state, at := "pending", "-"
		if m.Applied {
			state, at = "applied", m.AppliedAt.Format("2006-01-02 15:04:05")
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", m.Version, m.File, state, at)
	}
	for _, v := range st.Unknown {
		fmt.Fprintf(tw, "%d\t?\tapplied, unknown to this lockgen\t-\n", v)
	}
	tw.Flush()
	pending := len(st.Pending())
	switch {
	case !st.InStep():
		fmt.Fprintln(w, st.Drift())
	case !st.Tracked:
		fmt.Fprintf(w, "lockgen never migrated this database (no table %s, no schema pgadvisory): run lockgen migrate up\n", pgadvisory.MigrationTable)
	case len(st.Unknown) > 0:
		fmt.Fprintf(w, "the database is at version %d, newer than this lockgen (latest %d): upgrade lockgen\n", st.Current, st.Latest)
	case pending > 0:
		fmt.Fprintf(w, "the database is at version %d of %d; %d pending: run lockgen migrate up\n", st.Current, st.Latest, pending)
	default:
		fmt.Fprintf(w, "up to date: version %d, and the objects of every migration exist\n", st.Current)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// known reports whether v is one of list's versions.
func known(list []pgadvisory.Migration, v int64) bool {
	for _, m := range list {
		if m.Version == v {
			return true
		}
	}
	return false
}

// versions lists the versions for messages: "1, 2, 3".
func versions(list []pgadvisory.Migration) string {
	s := make([]string, len(list))
	for i, m := range list {
		s[i] = strconv.FormatInt(m.Version, 10)
	}
	return strings.Join(s, ", ")
}
