package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockgen/lockgen/internal/decl"
	"github.com/lockgen/lockgen/internal/fencegen"
)

// fenceFlags are lockgen fence's flags besides -f.
type fenceFlags struct {
	lock, table, columns, policy, dir, version string
	upgrade, advance                           bool
}

var fenceCmd = &command{
	name: "fence",
	help: `usage: lockgen fence [-f file] -lock NAME -table SCHEMA.TABLE [-columns COL,...]
                    [-policy strict|permissive] [-dir DIR] [-version N] [-upgrade]
       lockgen fence -advance [-db URL]

Fence writes a goose SQL migration that fences the table with the lock NAME
declared in the declarations file. A write to the table is then accepted
only when its transaction carries the lock's current fencing token (the
lock's own transaction with pgadvisory.WithFencing, or RunFenced); the
table's new column fencing_token is a stamp of it, never a token. Its Up
checks that lockgen's migrations (pgadvisory.Migrate) ran and that the
table is a plain table (partitioned tables, partitions and inheritance are
refused), then adds the column, a row trigger that stamps rows, statement
triggers that check each write once per statement and lock, and a TRUNCATE
guard, and lists the table in pgadvisory.fenced_table
(pgadvisory.fence_register, lockgen's migration 00008): the checks run only
on listed tables. The role that runs it needs EXECUTE on fence_register and
the trigger functions (the owner of lockgen's schema has it). Its Down
removes them.

A plain lock's ID is taken from the declarations, so pins are honoured. A
parameterized lock needs -columns: the table's columns holding its
parameters, in declaration order (int64 in a smallint, integer or bigint
column, uuid in uuid, bool in boolean, string in text or varchar; any other
type, whose text could depend on session settings, is refused when the
migration runs). The migration makes them NOT NULL (a row without its
parameters belongs to no lock), which fails while such rows exist; its
Down leaves NOT NULL. Names are lowercase SQL identifiers.

A table is fenced once: fence refuses a table that a migration in DIR
already fences, naming it. Tables fenced by an earlier lockgen (a row
trigger that checks each row) move to the current layout with -upgrade,
given the same -lock, -columns and -policy.

The file is DIR/<version>_fence_<table>.sql (_upgrade.sql with -upgrade).
The version follows the migrations already in DIR: the next number,
zero-padded the same way (00001 when there are none), or the current UTC
time when they use goose timestamps. An existing file is never replaced.
Fence prints the path it wrote.

-advance writes no migration: it is the step after restoring a copy of the
database (a backup, a cold copy, point-in-time recovery), before
applications take fenced locks on it. The copy brings the token sequence
and the published tokens back to the moment it was taken, so the next
holders would get tokens already handed out after it. fence -advance calls
pgadvisory.fence_advance(), which moves pgadvisory.fencing_token_seq 2^40
past the largest token the sequence, the published tokens, the leaders'
terms and the run-once ledger show, and prints where the sequence was and
where it is now. It runs as the owner of lockgen's schema (or a role it
granted EXECUTE on pgadvisory.fence_advance) and needs lockgen's migration
00008. Exit 0 when the sequence moved, 1 when it could not (no such
function, no privilege, a standby, an unreachable database), 2 for a wrong
command line.
`,
	flags: func(c *cli, fs *flag.FlagSet) {
		fileFlag(c, fs)
		fs.StringVar(&c.fence.lock, "lock", "", "the declared lock `NAME`")
		fs.StringVar(&c.fence.table, "table", "", "the table to fence, as `schema.table`")
		fs.StringVar(&c.fence.columns, "columns", "", "parameterized lock: the row's parameter `columns`, comma-separated, in declaration order")
		fs.StringVar(&c.fence.policy, "policy", "strict", "the `policy` for writes without a token: strict refuses them, permissive lets them pass")
		fs.StringVar(&c.fence.dir, "dir", "migrations", "the goose migrations `directory`")
		fs.StringVar(&c.fence.version, "version", "", "the migration's `version` (default: the next one in -dir)")
		fs.BoolVar(&c.fence.upgrade, "upgrade", false, "move a table fenced by an earlier lockgen to the current layout")
		fs.BoolVar(&c.fence.advance, "advance", false, "after a restore: move the fencing token sequence past every token the database shows (writes no migration)")
		dbFlag(c, fs)
	},
	run: func(c *cli, fs *flag.FlagSet) int {
		switch {
		case fs.NArg() > 0:
			return c.usageError("fence", "unexpected argument %q", fs.Arg(0))
		case c.fence.advance:
			return fenceAdvance(c, fs)
		case c.db.url != "":
			return c.usageError("fence", "-db is only for -advance: fence writes a migration file")
		case c.fence.lock == "":
			return c.usageError("fence", "missing -lock NAME")
		case c.fence.table == "":
			return c.usageError("fence", "missing -table schema.table")
		}
		loaded, err := decl.Load(c.file, decl.LoadOptions{})
		if err != nil {
			return c.fail(err)
		}
		l := loaded.File.Lookup(c.fence.lock)
		if l == nil {
			return c.usageError("fence", "lock %q is not declared in %s", c.fence.lock, c.file)
		}
		path, err := fencegen.Generate(fencegen.Request{
			Lock: l, Table: c.fence.table, Columns: c.fence.columns, Policy: c.fence.policy,
			Dir: c.fence.dir, Version: c.fence.version, Now: time.Now(), Upgrade: c.fence.upgrade,
		})
		if errors.Is(err, fencegen.ErrInvalid) {
			return c.usageError("fence", "%s", strings.TrimPrefix(err.Error(), fencegen.ErrInvalid.Error()+": "))
		}
		if err != nil {
			return c.fail(err)
		}
		fmt.Fprintln(c.stdout, path)
		if !l.Fencing {
			fmt.Fprintf(c.stderr, "lockgen fence: note: lock %q does not declare fencing: true, so its holders get no fencing token unless they pass pgadvisory.WithFencing()\n", l.Name)
		}
		return exitOK
	},
}

// fenceAdvance is lockgen fence -advance: pgadvisory.fence_advance() on the
// database, printing where the token sequence was and where it is.
func fenceAdvance(c *cli, fs *flag.FlagSet) int {
	var other []string
	fs.Visit(func(f *flag.Flag) {
		if f.Name != "advance" && f.Name != "db" {
			other = append(other, "-"+f.Name)
		}
	})
	if len(other) > 0 {
		return c.usageError("fence", "-advance takes only -db (got %s)", strings.Join(other, " "))
	}
	db, ctx, done, err := c.openDB("fence")
	if err != nil {
		return c.openFailed("fence", err)
	}
	defer done()
	// The sequence's value before (setval is not transactional: read it
	// first), then the advance. Both need the owner's rights.
	var before, after int64
	var called bool
	if err := db.QueryRowContext(ctx, `SELECT s.last_value, s.is_called FROM pgadvisory.fencing_token_seq AS s`).Scan(&before, &called); err != nil {
		return c.fail(advanceError("reading pgadvisory.fencing_token_seq", err))
	}
	if err := db.QueryRowContext(ctx, `SELECT pgadvisory.fence_advance()`).Scan(&after); err != nil {
		return c.fail(advanceError("pgadvisory.fence_advance()", err))
	}
	from := "no token issued yet"
	if called {
		from = fmt.Sprintf("%d", before)
	}
	fmt.Fprintf(c.stdout, "lockgen fence -advance on %s: pgadvisory.fencing_token_seq moved from %s to %d, 2^40 past %d, the largest token the database shows; the next token is %d\n",
		c.connected, from, after, after-fenceAdvanceStep, after+1)
	return exitOK
}

// fenceAdvanceStep is pgadvisory.fence_advance's default step, 2^40.
const fenceAdvanceStep = 1 << 40

// advanceError wraps err of step, saying what to do when lockgen's schema
// is missing or older than migration 00008.
func advanceError(step string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42883" || pgErr.Code == "42P01" || pgErr.Code == "3F000") {
		return fmt.Errorf("%s: lockgen's schema is missing or older than migration 00008 (run lockgen migrate up): %w", step, err)
	}
	return fmt.Errorf("%s: %w", step, err)
}
