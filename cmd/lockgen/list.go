package main

import (
	"cmp"
	"encoding/json"
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
	help: `usage: lockgen list [-f file] [-json]

List prints every declared lock, sorted by name: its parameters, its ID
(for plain locks; parameterized locks have one ID per parameter value) and
its declared options.

-json prints an array of objects with the fields name, params (an array of
{"name", "type"}), lock_id (a decimal string; null for a parameterized
lock), id_pinned (the ID is pinned with id:), kept_from (the old name whose
ID a rename kept, else null), shared, wait (null, or the wait's timeout in
milliseconds, 0 meaning until the context is done) and fencing.
`,
	flags: func(c *cli, fs *flag.FlagSet) {
		fileFlag(c, fs)
		fs.BoolVar(&c.db.json, "json", false, "print JSON for tools")
	},
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
		if c.db.json {
			enc := json.NewEncoder(c.stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(listJSON(locks)); err != nil {
				return c.fail(err)
			}
			return exitOK
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tPARAMS\tID\tOPTIONS")
		for _, l := range locks {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", l.Name, paramsText(l), idText(l), optionsText(l))
		}
		tw.Flush()
		return exitOK
	},
}

// listedLock is one lock of list -json.
type listedLock struct {
	Name     string        `json:"name"`
	Params   []listedParam `json:"params"`
	LockID   *string       `json:"lock_id"`
	IDPinned bool          `json:"id_pinned"`
	KeptFrom *string       `json:"kept_from"`
	Shared   bool          `json:"shared"`
	Wait     *int64        `json:"wait"`
	Fencing  bool          `json:"fencing"`
}

// listedParam is one parameter of a listed lock.
type listedParam struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// listJSON is list -json's array.
func listJSON(locks []*decl.Lock) []listedLock {
	out := make([]listedLock, 0, len(locks))
	for _, l := range locks {
		e := listedLock{Name: l.Name, Params: []listedParam{}, IDPinned: l.HasPin, Shared: l.Shared, Fencing: l.Fencing}
		for _, p := range l.Params {
			e.Params = append(e.Params, listedParam{Name: p.Name, Type: string(p.Type)})
		}
		if l.Plain() {
			id := strconv.FormatInt(l.ID, 10)
			e.LockID = &id
			if l.Pinned && !l.HasPin {
				from := l.RenamedFrom
				e.KeptFrom = &from
			}
		}
		if l.Wait {
			ms := l.WaitTimeout.Milliseconds()
			e.Wait = &ms
		}
		out = append(out, e)
	}
	return out
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
