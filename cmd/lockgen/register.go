package main

import (
	"flag"
	"fmt"

	"github.com/lockgen/lockgen/internal/decl"
	"github.com/lockgen/lockgen/internal/gogen"
	"github.com/lockgen/lockgen/pgadvisory"
)

var registerCmd = &command{
	name: "register",
	help: `usage: lockgen register [-f file] [-db URL]

Register records the locks declared in the declarations file in the
database's lock registry (pgadvisory.registry_declaration and
pgadvisory.registry), so that lockgen status and the view pgadvisory.status
show them by name. It does what pgadvisory.Register(ctx, db, Declared) does
for the generated registry: IDs come from the declarations (pins and kept
IDs included), rows are added or updated, never deleted.

Instances of parameterized locks (one ID per parameter value) are registered
one by one, with pgadvisory.RegisterInstance or in SQL:

	SELECT pgadvisory.register_instance('billing.invoice', id::text) FROM tenants;

The database needs lockgen's migrations (pgadvisory.Migrate or goose up).
`,
	flags: func(c *cli, fs *flag.FlagSet) {
		fileFlag(c, fs)
		dbFlag(c, fs)
	},
	run: func(c *cli, fs *flag.FlagSet) int {
		if fs.NArg() > 0 {
			return c.usageError("register", "unexpected argument %q", fs.Arg(0))
		}
		loaded, err := decl.Load(c.file, decl.LoadOptions{})
		if err != nil {
			return c.fail(err)
		}
		decls := declared(loaded.File)
		db, ctx, done, err := c.openDB("register")
		if err != nil {
			return c.openFailed("register", err)
		}
		defer done()
		if err := pgadvisory.Register(ctx, db, decls); err != nil {
			return c.fail(err)
		}
		plain := 0
		for _, d := range decls {
			if d.Params == nil {
				plain++
			}
		}
		fmt.Fprintf(c.stdout, "registered %d lock(s) from %s: %d plain, %d parameterized\n",
			len(decls), c.file, plain, len(decls)-plain)
		return exitOK
	},
}

// declared is the registry the generated file holds as Declared, in the
// declarations' order.
func declared(f *decl.File) []pgadvisory.Declared {
	out := make([]pgadvisory.Declared, 0, len(f.Locks))
	for _, l := range f.Locks {
		out = append(out, gogen.Declared(l))
	}
	return out
}
