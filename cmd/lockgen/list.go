package main

import (
	"cmp"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/lockgen/lockgen/internal/decl"
)

var listCmd = &command{
	name: "list",
	help: `usage: lockgen list [-f file]

List prints every declared lock, sorted by name: its parameters, its ID
(for plain locks; parameterized locks have one ID per parameter value) and
its declared options.
`,
	flags: fileFlag,
	run: func(c *cli, fs *flag.FlagSet) int {
		if fs.NArg() > 0 {
			return c.usageError("list", "unexpected argument %q", fs.Arg(0))
		}
		loaded, err := decl.Load(c.file, decl.LoadOptions{})
		if err != nil {
			return c.fail(err)
		}
		locks := slices.Clone(loaded.File.Locks)
		slices.SortFunc(locks, func(a, b *decl.Lock) int { return cmp.Compare(a.Name, b.Name) })
		tw := tabwriter.NewWriter(c.stdout, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tPARAMS\tID\tOPTIONS")
		for _, l := range locks {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", l.Name, paramsText(l), idText(l), optionsText(l))
		}
		tw.Flush()
		return exitOK
	},
}

// paramsText is the PARAMS column: the parameters, or - for a plain lock.
func paramsText(l *decl.Lock) string {
	if l.Plain() {
		return "-"
	}
	return l.ParamList()
}

func idText(l *decl.Lock) string {
	switch {
	case !l.Plain():
		return "per value"
	case l.HasPin:
		return strconv.FormatInt(l.ID, 10) + " (pinned)"
	case l.Pinned:
		return strconv.FormatInt(l.ID, 10) + " (kept from " + l.RenamedFrom + ")"
	}
	return strconv.FormatInt(l.ID, 10)
}

func optionsText(l *decl.Lock) string {
	var opts []string
	if l.Shared {
		opts = append(opts, "shared")
	}
	if l.Wait {
		opts = append(opts, "wait "+l.WaitTimeout.String())
	}
	if l.Fencing {
		opts = append(opts, "fencing")
	}
	if len(opts) == 0 {
		return "-"
	}
	return strings.Join(opts, ", ")
}
