package main

import (
	"flag"
	"fmt"
	"runtime/debug"
)

// modulePath is lockgen's module.
const modulePath = "github.com/lockgen/lockgen"

var versionCmd = &command{
	name: "version",
	help: `usage: lockgen version

Version prints lockgen's module version as recorded in the binary, or
"(devel)" for a build from a working tree.
`,
	run: func(c *cli, fs *flag.FlagSet) int {
		if fs.NArg() > 0 {
			return c.usageError("version", "unexpected argument %q", fs.Arg(0))
		}
		fmt.Fprintln(c.stdout, "lockgen", version())
		return exitOK
	},
}

// version is lockgen's module version. Installed with go install, lockgen's
// module is the main module; run with go tool or go run from another module,
// it is a dependency of that module.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	mods := append([]*debug.Module{&bi.Main}, bi.Deps...)
	for _, m := range mods {
		if m.Path != modulePath {
			continue
		}
		if m.Replace != nil {
			m = m.Replace
		}
		if m.Version != "" {
			return m.Version
		}
	}
	return "(devel)"
}
