package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/lockgen/lockgen/internal/decl"
	"github.com/lockgen/lockgen/keyspace"
)

var idCmd = &command{
	name: "id",
	help: `usage: lockgen id [-f file] NAME [PARAM...]

Id prints the decimal advisory-lock ID of the lock NAME with the given
parameter values (keyspace.ParamID). Without -f the values are taken as
canonical text: int64 in decimal, uuid in lowercase hyphenated form, bool as
true or false, strings as they are. With -f, NAME must be declared in the
file: its declared parameter types canonicalize the values ("+042" becomes
"42") and a pinned or kept ID is printed as declared. Without -f, when
locks.yaml in the current directory declares NAME and its declared ID would
differ (a pin, non-canonical values, another parameter count), a note on
stderr says so. Flags go before NAME; a parameter after NAME that starts
with '-' (other than a negative number) is refused unless it follows --:

	lockgen id -f locks.yaml reports.export -- -draft
`,
	flags: fileFlag,
	run: func(c *cli, fs *flag.FlagSet) int {
		args := fs.Args()
		if len(args) == 0 {
			return c.usageError("id", "missing lock NAME")
		}
		name, params := args[0], args[1:]
		params, flagLike := paramsAfterName(params)
		if flagLike != "" {
			return c.usageError("id", "parameter %q looks like a flag: flags go before NAME (lockgen id -f locks.yaml NAME PARAM...); "+
				"put -- before parameters that start with '-' (lockgen id NAME -- %s)", flagLike, flagLike)
		}
		if err := keyspace.ValidateName(name); err != nil {
			var ne *keyspace.NameError
			if errors.As(err, &ne) {
				return c.usageError("id", "invalid lock name %q: %s (at byte %d)", name, ne.Reason, ne.Offset)
			}
			return c.usageError("id", "%v", err)
		}
		fileSet := false
		fs.Visit(func(f *flag.Flag) { fileSet = fileSet || f.Name == "f" })
		if !fileSet {
			raw := keyspace.ParamID(name, params...)
			fmt.Fprintln(c.stdout, raw)
			c.noteDeclared(name, params, raw)
			return exitOK
		}
		loaded, err := decl.Load(c.file, decl.LoadOptions{})
		if err != nil {
			return c.fail(err)
		}
		id, problem := declaredID(loaded.File.Lookup(name), name, params)
		if problem != "" {
			if loaded.File.Lookup(name) == nil {
				problem += " in " + c.file
			}
			return c.usageError("id", "%s", problem)
		}
		fmt.Fprintln(c.stdout, id)
		return exitOK
	},
}

// paramsAfterName drops the first "--" from the parameters and returns the
// first parameter before it that looks like a flag ("-f", "--json"): the
// flag package stops at NAME, so a flag written after it would otherwise be
// hashed as a parameter. A negative number ("-7") and "-" are parameters.
func paramsAfterName(args []string) (params []string, flagLike string) {
	for i, a := range args {
		if a == "--" {
			return append(append(params, args[:i]...), args[i+1:]...), ""
		}
		if flagLike == "" && len(a) > 1 && a[0] == '-' && (a[1] < '0' || a[1] > '9') {
			flagLike = a
		}
	}
	return args, flagLike
}

// declaredID is the ID of the declared lock l (nil: not declared) with the
// parameter values params, canonicalized by their declared types; a
// non-empty problem says why there is none.
func declaredID(l *decl.Lock, name string, params []string) (id int64, problem string) {
	switch {
	case l == nil:
		return 0, fmt.Sprintf("lock %q is not declared", name)
	case len(params) != len(l.Params):
		want := "no parameters"
		if !l.Plain() {
			want = fmt.Sprintf("%d parameter(s): %s", len(l.Params), l.ParamList())
		}
		return 0, fmt.Sprintf("lock %q takes %s; got %d", name, want, len(params))
	case l.Plain():
		return l.ID, ""
	}
	canon := make([]string, len(params))
	for i, p := range l.Params {
		s, err := keyspace.Canonical(p.Type, params[i])
		if err != nil {
			return 0, fmt.Sprintf("parameter %s: %s", p.Name, strings.TrimPrefix(err.Error(), "keyspace: "))
		}
		canon[i] = s
	}
	return keyspace.ParamID(name, canon...), ""
}

// noteDeclared warns, on stderr, when the declarations file in the current
// directory (the -f default) declares name and the ID it would give differs
// from raw, the rule applied to the text as written: a pinned or kept ID,
// values that are not canonical, a wrong parameter count. stdout keeps the
// rule's answer; the note says how to get the declared one.
func (c *cli) noteDeclared(name string, params []string, raw int64) {
	if _, err := os.Stat(c.file); err != nil {
		return
	}
	loaded, err := decl.Load(c.file, decl.LoadOptions{})
	if err != nil {
		return
	}
	l := loaded.File.Lookup(name)
	if l == nil {
		return
	}
	id, problem := declaredID(l, name, params)
	switch {
	case problem != "":
		fmt.Fprintf(c.stderr, "lockgen id: note: %s declares %s differently: %s; this is the rule's ID for the text as given\n", c.file, name, problem)
	case id != raw:
		fmt.Fprintf(c.stderr, "lockgen id: note: %s declares %s with ID %d; run lockgen id -f %s for the declared ID\n", c.file, name, id, c.file)
	}
}
