package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/lockgen/lockgen/pgadvisory"
)

// migrateTimeout bounds lockgen migrate: longer than the wait for another
// migrator's lock (pgadvisory's default, five minutes).
const migrateTimeout = 10 * time.Minute

var migrateCmd = &command{
	name: "migrate",
	help: `usage: lockgen migrate up|down|status|sql [-db URL] [-to VERSION] [-from VERSION] [-down]

Migrate applies lockgen's schema (the schema pgadvisory: lock IDs in SQL,
fencing, the run-once ledger, the registry and the status view) with the
migrations and the version table (public.pgadvisory_db_version) that
pgadvisory.Migrate uses, so the two can be mixed.

	up       apply every pending migration, or those up to -to VERSION
	down     roll back the last applied migration, or every one above
	         -to VERSION (-to 0 removes lockgen's schema)
	status   list the migrations, applied or pending; changes nothing
	sql      print the SQL of the migrations, for teams whose own migration
	         tool (goose, atlas, flyway, golang-migrate) applies lockgen's
	         schema; needs no database. Up SQL of the versions after -from
	         (default 0) up to -to (default the latest), or with -down the
	         down SQL from -from (default the latest) down to, not
	         including, -to (default 0), newest first

up and down take the migration lock (a session advisory lock), so they need
a direct connection: through PgBouncer in transaction mode they are refused.
A wrong URL, a database lockgen never migrated (for down), an unknown version
or a version below zero is reported and changes nothing.
`,
	flags: func(c *cli, fs *flag.FlagSet) {
		dbFlag(c, fs)
		fs.Var(&c.migrate.to, "to", "target `VERSION`")
		fs.Var(&c.migrate.from, "from", "sql: first `VERSION` excluded (up) or included (-down)")
		fs.BoolVar(&c.migrate.down, "down", false, "sql: print the down SQL")
	},
	run: runMigrate,
}

// migrateFlags are lockgen migrate's flags besides -db.
type migrateFlags struct {
	to, from versionFlag
	down     bool
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
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, name := range []string{"from", "down"} {
		if set[name] && action != "sql" {
			return c.usageError("migrate", "-%s is a flag of migrate sql", name)
		}
	}
	switch action {
	case "sql":
		if set["db"] {
			return c.usageError("migrate", "migrate sql needs no database: -db is not used")
		}
		return c.migrateSQL()
	case "status":
		if set["to"] {
			return c.usageError("migrate", "-to is a flag of up, down and sql")
		}
	case "up", "down":
	default:
		return c.usageError("migrate", "unknown action %q: want up, down, status or sql", action)
	}

	db, ctx, done, err := c.openDBWith("migrate", dbOptions{conns: 2, timeout: migrateTimeout})
	if err != nil {
		return c.fail(err)
	}
	defer done()
	m, err := pgadvisory.NewMigrator(db)
	if err != nil {
		return c.fail(err)
	}
	var res []pgadvisory.MigrationResult
	switch {
	case action == "status":
		st, err := m.Status(ctx)
		if err != nil {
			return c.fail(err)
		}
		writeMigrationStatus(c.stdout, st)
		return exitOK
	case action == "up" && c.migrate.to.set:
		res, err = m.UpTo(ctx, c.migrate.to.v)
	case action == "up":
		res, err = m.Up(ctx)
	case c.migrate.to.set:
		res, err = m.DownTo(ctx, c.migrate.to.v)
	default:
		res, err = m.Down(ctx)
	}
	for _, r := range res { // what ran, also before an error
		verb := "applied"
		if !r.Up {
			verb = "rolled back"
		}
		fmt.Fprintf(c.stdout, "%s %s (%v)\n", verb, r.Migration.File, r.Duration.Round(time.Millisecond))
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
	case !st.Tracked:
		fmt.Fprintf(w, "lockgen never migrated this database (no table %s): run lockgen migrate up; "+
			"if your own migration tool applied lockgen's schema, lockgen cannot tell which migrations it has\n", pgadvisory.MigrationTable)
	case len(st.Unknown) > 0:
		fmt.Fprintf(w, "the database is at version %d, newer than this lockgen (latest %d): upgrade lockgen\n", st.Current, st.Latest)
	case pending > 0:
		fmt.Fprintf(w, "the database is at version %d of %d; %d pending: run lockgen migrate up\n", st.Current, st.Latest, pending)
	default:
		fmt.Fprintf(w, "up to date: version %d\n", st.Current)
	}
}

// migrateSQL prints the SQL of the migrations that -from, -to and -down
// select.
func (c *cli) migrateSQL() int {
	list, err := pgadvisory.Migrations()
	if err != nil {
		return c.fail(err)
	}
	latest := list[len(list)-1].Version
	known := func(v int64, zeroOK bool) bool {
		if v == 0 {
			return zeroOK
		}
		for _, m := range list {
			if m.Version == v {
				return true
			}
		}
		return false
	}
	versions := func() string {
		s := ""
		for i, m := range list {
			if i > 0 {
				s += ", "
			}
			s += strconv.FormatInt(m.Version, 10)
		}
		return s
	}
	up := !c.migrate.down
	lo, hi := int64(0), latest // up: (lo, hi]; down: hi down to lo, excluding lo
	if up {
		if c.migrate.from.set {
			lo = c.migrate.from.v
		}
		if c.migrate.to.set {
			hi = c.migrate.to.v
		}
	} else {
		if c.migrate.from.set {
			hi = c.migrate.from.v
		}
		if c.migrate.to.set {
			lo = c.migrate.to.v
		}
	}
	for _, v := range []int64{lo, hi} {
		switch {
		case v < 0:
			return c.usageError("migrate", "version %d is below zero", v)
		case !known(v, true):
			return c.usageError("migrate", "unknown version %d: this lockgen's migrations are %s (0: none)", v, versions())
		}
	}
	if lo >= hi {
		if up {
			return c.usageError("migrate", "-from %d -to %d selects no migration: -from is excluded, -to included", lo, hi)
		}
		return c.usageError("migrate", "-down -from %d -to %d selects no migration: -from is included, -to excluded", hi, lo)
	}
	direction := "up"
	if !up {
		direction = "down"
		for i, j := 0, len(list)-1; i < j; i, j = i+1, j-1 {
			list[i], list[j] = list[j], list[i]
		}
	}
	first, last := lo+1, hi
	if !up {
		first, last = hi, lo+1
	}
	fmt.Fprintf(c.stdout, "-- lockgen's schema: the %s SQL of migrations %d to %d, to apply in this order,\n"+
		"-- each in its own transaction. lockgen migrate and pgadvisory.Migrate record them in\n"+
		"-- %s; your migration tool records them in its own table.\n",
		direction, first, last, pgadvisory.MigrationTable)
	for _, m := range list {
		if m.Version <= lo || m.Version > hi {
			continue
		}
		note := ""
		if m.NoTransaction {
			note = "; run it outside a transaction"
		}
		fmt.Fprintf(c.stdout, "\n-- lockgen migration %d, %s (%s)%s\n%s", m.Version, m.File, direction, note, m.SQL(up))
	}
	return exitOK
}
