package main

import (
	"flag"
	"fmt"

	"github.com/lockgen/lockgen/internal/decl"
	"github.com/lockgen/lockgen/internal/gogen"
)

var generateCmd = &command{
	name: "generate",
	help: `usage: lockgen generate [-f file] [-forget-history]

Generate reads the declarations file and writes the Go file it names
(output:, by default <file>_gen.go next to it). The file is replaced
atomically and left untouched when nothing changed; when the declarations
have any problem, all of them are printed and nothing is written.

Generate refuses to drop or re-key a lock it emitted before unless the
declarations say what is meant: renamed_from with on_rename, retired, or
on_id_change. What it emitted before is recorded at the end of the output
file; when that file is missing (deleted, or output: changed), the output
committed at git HEAD is read instead. -forget-history ignores both, to
recover from a damaged output: renames since then go unchecked. When
neither exists (a first generate, or no git), a note on stderr says that
renames were unchecked this time. From go generate:

	//go:generate go tool lockgen generate
`,
	flags: func(c *cli, fs *flag.FlagSet) {
		fileFlag(c, fs)
		fs.BoolVar(&c.forgetHistory, "forget-history", false, "ignore what the previous output emitted (renames go unchecked)")
	},
	run: func(c *cli, fs *flag.FlagSet) int {
		if fs.NArg() > 0 {
			return c.usageError("generate", "unexpected argument %q", fs.Arg(0))
		}
		loaded, err := decl.Load(c.file, decl.LoadOptions{ForgetHistory: c.forgetHistory})
		if err != nil {
			return c.fail(err)
		}
		src, err := gogen.Emit(loaded.File)
		if err != nil {
			return c.fail(err)
		}
		// A CRLF checkout of the same contents is left as it is.
		if !loaded.Output.Fresh(src) {
			if _, err := gogen.WriteFile(loaded.Output.Path, src); err != nil {
				return c.fail(err)
			}
		}
		if loaded.Unchecked != "" {
			fmt.Fprintf(c.stderr, "lockgen generate: note: %s\n", loaded.Unchecked)
		}
		return exitOK
	},
}
