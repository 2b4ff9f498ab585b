package main

import (
	"flag"
	"fmt"

	"github.com/lockgen/lockgen/internal/decl"
	"github.com/lockgen/lockgen/internal/gogen"
)

var checkCmd = &command{
	name: "check",
	help: `usage: lockgen check [-f file]

Check generates in memory and compares with the file on disk. When the file
is stale or missing it prints a unified diff (the changes generate would
make) and exits with status 1; when it is up to date it exits with 0. Run it
in CI, from your module's root (lockgen installed with go get -tool), e.g.:

	go tool lockgen check -f internal/locks/locks.yaml
`,
	flags: fileFlag,
	run: func(c *cli, fs *flag.FlagSet) int {
		if fs.NArg() > 0 {
			return c.usageError("check", "unexpected argument %q", fs.Arg(0))
		}
		loaded, err := decl.Load(c.file, decl.LoadOptions{})
		if err != nil {
			return c.fail(err)
		}
		src, err := gogen.Emit(loaded.File)
		if err != nil {
			return c.fail(err)
		}
		out := loaded.Output
		if out.Fresh(src) {
			return exitOK
		}
		old := out.Path
		state := "stale"
		if !out.Exists {
			old, state = "/dev/null", "missing"
		}
		c.stdout.Write(gogen.Diff(old, out.Path+" (generated)", out.Src, src))
		fmt.Fprintf(c.stderr, "lockgen: %s is %s: run lockgen generate -f %s\n", out.Path, state, c.file)
		return exitFail
	},
}
