// Command lockgen turns a locks.yaml declarations file into typed Go helpers
// for pgadvisory: a pgadvisory.Lock value for every plain lock, a small
// constructor for every parameterized lock, and a registry of all of them.
//
// Install it as a tool of your module and run it from go generate:
//
//	go get -tool github.com/lockgen/lockgen/cmd/lockgen
//	//go:generate go tool lockgen generate
//
// and check in CI that the generated file is fresh:
//
//	go tool lockgen check -f path/to/locks.yaml
//
// and write the goose migration that fences a table with a declared lock:
//
//	go tool lockgen fence -lock ledger.post -table app.entries -dir migrations
//
// and see who holds and who awaits which lock, by name (after lockgen
// register or pgadvisory.Register filled the database's registry):
//
//	go tool lockgen status -db "$DATABASE_URL"
//
// and apply lockgen's schema, or print its SQL for your own migration tool
// (one goose migration with -goose, else SQL for psql):
//
//	go tool lockgen migrate up -db "$DATABASE_URL"
//	go tool lockgen migrate sql -goose > db/migrations/20261203120000_lockgen.sql
//	go tool lockgen migrate sql > db/migrations/V100__lockgen.sql
//
// Commands that connect take -db, else $LOCKGEN_DATABASE_URL, else
// $DATABASE_URL, else libpq's PG* variables. Every command exits 0 when
// done, 1 when a check or an operation failed, 2 when the command line is
// wrong.
//
// Run "lockgen -h" for the commands.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockgen/lockgen/internal/decl"
)

// Exit statuses, the same for every command (lockgen -h says so).
const (
	exitOK    = 0
	exitFail  = 1 // a check or an operation failed: invalid declarations, stale output, a failing doctor check, an unreachable database
	exitUsage = 2 // the command line is wrong
)

const usage = `lockgen turns a locks.yaml declarations file into typed Go helpers for
pgadvisory, and checks that they are up to date.

Usage:

	lockgen <command> [flags] [arguments]

Commands:

	generate   write the Go file declared by locks.yaml
	check      fail with a diff when the generated file is stale or missing
	list       print every declared lock: name, parameters, ID, options
	id         print the advisory-lock ID of a name and parameters
	fence      write a goose migration that fences a table with a declared lock
	register   record the declared locks in the database's lock registry
	status     list the advisory locks held and awaited in the database, by name
	doctor     check the server and connection path for lockgen's traps
	migrate    apply, roll back, list or print lockgen's schema migrations
	version    print lockgen's version

Run "lockgen <command> -h" for a command's flags. From go generate:

	//go:generate go tool lockgen generate

Commands that connect take -db URL; without it they read
$LOCKGEN_DATABASE_URL, else $DATABASE_URL, else libpq's PGHOST, PGPORT,
PGDATABASE, PGUSER, … as psql does.

Exit status, for every command:

	0  done: the command did what it says, every check passed (or warned)
	1  a check or an operation failed: invalid declarations, stale
	   generated code, a failing doctor check, a database that cannot be
	   reached or refuses the operation
	2  the command line is wrong: an unknown command, flag or argument, a
	   version that does not exist, a connection string that cannot be
	   parsed, a change that needs -force
`

// command is one subcommand.
type command struct {
	name string
	help string // usage line and description, printed by -h
	run  func(c *cli, fs *flag.FlagSet) int
	// flags adds the command's flags before parsing.
	flags func(c *cli, fs *flag.FlagSet)
}

var commands = []*command{generateCmd, checkCmd, listCmd, idCmd, fenceCmd, registerCmd, statusCmd, doctorCmd, migrateCmd, versionCmd}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// cli is one run of lockgen.
type cli struct {
	stdout, stderr io.Writer
	file           string     // -f
	forgetHistory  bool       // generate -forget-history
	fence          fenceFlags // lockgen fence's other flags
	db             dbFlags    // the database flags of register, status, doctor and migrate
	migrate        migrateFlags
	connected      dbTarget // the database openDB connected to
}

func run(args []string, stdout, stderr io.Writer) int {
	c := &cli{stdout: stdout, stderr: stderr}
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && args[0] == "help" {
			return c.run(args[1], []string{"-h"})
		}
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	return c.run(args[0], args[1:])
}

func (c *cli) run(name string, args []string) int {
	for _, cmd := range commands {
		if cmd.name != name {
			continue
		}
		fs := flag.NewFlagSet("lockgen "+name, flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		if cmd.flags != nil {
			cmd.flags(c, fs)
		}
		printHelp := func(w io.Writer) {
			fmt.Fprint(w, cmd.help)
			if hasFlags(fs) {
				fmt.Fprint(w, "\nFlags:\n")
				fs.SetOutput(w)
				fs.PrintDefaults()
				fs.SetOutput(io.Discard)
			}
		}
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				printHelp(c.stdout)
				return exitOK
			}
			fmt.Fprintf(c.stderr, "lockgen %s: %v\n", name, err)
			printHelp(c.stderr)
			return exitUsage
		}
		return cmd.run(c, fs)
	}
	fmt.Fprintf(c.stderr, "lockgen: unknown command %q\n\n%s", name, usage)
	return exitUsage
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// fileFlag adds -f.
func fileFlag(c *cli, fs *flag.FlagSet) {
	fs.StringVar(&c.file, "f", "locks.yaml", "declarations `file`")
}

// usageError reports a wrong command line.
func (c *cli) usageError(cmd string, format string, args ...any) int {
	fmt.Fprintf(c.stderr, "lockgen %s: %s\nRun \"lockgen %s -h\" for usage.\n", cmd, fmt.Sprintf(format, args...), cmd)
	return exitUsage
}

// fail prints err: every problem of a declarations file on its own line
// ("locks.yaml:3:9: message"), anything else prefixed with "lockgen: ".
func (c *cli) fail(err error) int {
	var list decl.ErrorList
	if errors.As(err, &list) {
		for _, e := range list {
			msg := e.Error()
			if e.File == "" {
				msg = "lockgen: " + msg
			}
			fmt.Fprintln(c.stderr, msg)
		}
		return exitFail
	}
	// The internal packages and pgadvisory prefix their errors with their
	// names; the user ran lockgen.
	msg := strings.TrimPrefix(err.Error(), "decl: ")
	msg = strings.TrimPrefix(msg, "pgadvisory: ")
	msg = strings.TrimPrefix(msg, "gogen: ")
	msg = strings.TrimPrefix(msg, "fencegen: ")
	fmt.Fprintf(c.stderr, "lockgen: %s\n", msg)
	// The server's detail and hint say why (which object depends on the one
	// a migration drops, which grant is missing); err's text leaves them out.
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if pgErr.Detail != "" {
			fmt.Fprintf(c.stderr, "\tdetail: %s\n", pgErr.Detail)
		}
		if pgErr.Hint != "" {
			fmt.Fprintf(c.stderr, "\thint: %s\n", pgErr.Hint)
		}
	}
	return exitFail
}
