package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/lockgen/lockgen/internal/decl"
	"github.com/lockgen/lockgen/internal/fencegen"
)

// fenceFlags are lockgen fence's flags besides -f.
type fenceFlags struct {
	lock, table, columns, policy, dir, version string
}

var fenceCmd = &command{
	name: "fence",
	help: `usage: lockgen fence [-f file] -lock NAME -table SCHEMA.TABLE [-columns COL,...]
                    [-policy strict|permissive] [-dir DIR] [-version N]

Fence writes a goose SQL migration that fences the table with the lock NAME
declared in the declarations file: its Up adds the column fencing_token
bigint, a row trigger that accepts a write only when it carries the lock's
current fencing token, and a TRUNCATE guard; its Down removes them. Apply
lockgen's own migrations (pgadvisory.Migrate) before it.

A plain lock's ID is taken from the declarations, so pins are honoured. A
parameterized lock needs -columns: the table's columns holding its
parameters, in declaration order (int64 in a smallint, integer or bigint
column, uuid in uuid, bool in boolean, string in text or varchar). Names
are lowercase SQL identifiers.

The file is DIR/<version>_fence_<table>.sql. The version follows the
migrations already in DIR: the next number, zero-padded the same way
(00001 when there are none), or the current UTC time when they use goose
timestamps. An existing file is never replaced. Fence prints the path it
wrote.
`,
	flags: func(c *cli, fs *flag.FlagSet) {
		fileFlag(c, fs)
		fs.StringVar(&c.fence.lock, "lock", "", "the declared lock `NAME`")
		fs.StringVar(&c.fence.table, "table", "", "the table to fence, as `schema.table`")
		fs.StringVar(&c.fence.columns, "columns", "", "parameterized lock: the row's parameter `columns`, comma-separated, in declaration order")
		fs.StringVar(&c.fence.policy, "policy", "strict", "the `policy` for writes without a token: strict refuses them, permissive lets them pass")
		fs.StringVar(&c.fence.dir, "dir", "migrations", "the goose migrations `directory`")
		fs.StringVar(&c.fence.version, "version", "", "the migration's `version` (default: the next one in -dir)")
	},
	run: func(c *cli, fs *flag.FlagSet) int {
		switch {
		case fs.NArg() > 0:
			return c.usageError("fence", "unexpected argument %q", fs.Arg(0))
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
			Dir: c.fence.dir, Version: c.fence.version, Now: time.Now(),
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
