package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lockgen/lockgen/pgadvisory"
)

// migrateSQL prints the SQL of the migrations that -from, -to and -down
// select: for psql, or with -goose as one goose migration file.
func (c *cli) migrateSQL(list []pgadvisory.Migration) int {
	latest := list[len(list)-1].Version
	up := !c.migrate.down
	lo, hi := int64(0), latest // up: (lo, hi]; down: hi down to lo, excluding lo
	if up {
		if c.migrate.from.set {
			lo = c.migrate.from.v
		}
		if c.migrate.to.set {
			hi = c.migrate.to.v
		}
	} else {
		if c.migrate.from.set {
			hi = c.migrate.from.v
		}
		if c.migrate.to.set {
			lo = c.migrate.to.v
		}
	}
	for _, v := range []int64{lo, hi} {
		switch {
		case v < 0:
			return c.usageError("migrate", "version %d is below zero", v)
		case v != 0 && !known(list, v):
			return c.usageError("migrate", "unknown version %d: this lockgen's migrations are %s (0: none)", v, versions(list))
		}
	}
	if lo >= hi {
		if up {
			return c.usageError("migrate", "-from %d -to %d selects no migration: -from is excluded, -to included", lo, hi)
		}
		return c.usageError("migrate", "-down -from %d -to %d selects no migration: -from is included, -to excluded", hi, lo)
	}
	var selected []pgadvisory.Migration
	for _, m := range list {
		if m.Version > lo && m.Version <= hi {
			selected = append(selected, m)
		}
	}
	if c.migrate.goose {
		if c.migrate.down {
			return c.usageError("migrate", "-goose prints both directions in one file: leave out -down")
		}
		text, err := gooseFile(selected)
		if err != nil {
			return c.usageError("migrate", "%v", err)
		}
		fmt.Fprint(c.stdout, text)
		return exitOK
	}
	direction := "up"
	if !up {
		direction = "down"
		slices.Reverse(selected)
	}
	first, last := selected[0].Version, selected[len(selected)-1].Version
	fmt.Fprintf(c.stdout, "-- lockgen's schema: the %s SQL of migrations %d to %d, to apply in this order,\n"+
		"-- each in its own transaction, with psql or a tool that runs a file as one script.\n"+
		"-- (For goose: lockgen migrate sql -goose.) lockgen migrate and pgadvisory.Migrate\n"+
		"-- record them in %s; your migration tool records them in its own table.\n",
		direction, first, last, pgadvisory.MigrationTable)
	for _, m := range selected {
		note := ""
		if m.NoTransaction {
			note = "; run it outside a transaction"
		}
		fmt.Fprintf(c.stdout, "\n-- lockgen migration %d, %s (%s)%s\n%s", m.Version, m.File, direction, note, m.SQL(up))
	}
	return exitOK
}

// gooseFile joins migrations into one goose migration: their Up sections
// in order under one "-- +goose Up", their Down sections newest first
// under one "-- +goose Down", each with goose's statement annotations as
// lockgen's files have them. goose runs the file in one transaction, so a
// migration that must run outside one can only be printed alone.
func gooseFile(selected []pgadvisory.Migration) (string, error) {
	noTx := false
	for _, m := range selected {
		if m.NoTransaction {
			if len(selected) > 1 {
				return "", fmt.Errorf("migration %s must run outside a transaction and goose runs one file in one: print it alone (-from %d -to %d -goose)", m.File, m.Version-1, m.Version)
			}
			noTx = true
		}
	}
	sections := make([][2]string, len(selected))
	for i, m := range selected {
		up, down, err := gooseSections(m)
		if err != nil {
			return "", err
		}
		sections[i] = [2]string{up, down}
	}
	first, last := selected[0], selected[len(selected)-1]
	var b strings.Builder
	fmt.Fprintf(&b, "-- lockgen's schema, migrations %d to %d (%s to %s), as one goose migration:\n", first.Version, last.Version, first.File, last.File)
	fmt.Fprintf(&b, "-- lockgen migrate sql -goose -from %d -to %d. Save it in your goose directory under a\n", first.Version-1, last.Version)
	b.WriteString("-- version of yours. After upgrading lockgen, add the new migrations the same way\n")
	fmt.Fprintf(&b, "-- (lockgen migrate sql -goose -from %d). Your goose table records it, not\n", last.Version)
	fmt.Fprintf(&b, "-- %s: do not also call pgadvisory.Migrate on this database.\n", pgadvisory.MigrationTable)
	if noTx {
		b.WriteString("\n-- +goose NO TRANSACTION\n")
	}
	b.WriteString("\n-- +goose Up\n")
	for i, m := range selected {
		fmt.Fprintf(&b, "\n-- lockgen migration %d, %s (up)\n%s", m.Version, m.File, sections[i][0])
	}
	b.WriteString("\n-- +goose Down\n")
	for i := len(selected) - 1; i >= 0; i-- {
		m := selected[i]
		fmt.Fprintf(&b, "\n-- lockgen migration %d, %s (down)\n%s", m.Version, m.File, sections[i][1])
	}
	return b.String(), nil
}

// gooseSections splits a goose file into the text of its Up section
// (with the file's leading documentation comment) and of its Down
// section, keeping the StatementBegin and StatementEnd annotations.
func gooseSections(m pgadvisory.Migration) (up, down string, err error) {
	var doc, upB, downB strings.Builder
	cur := &doc
	for _, line := range strings.SplitAfter(m.Goose, "\n") {
		if ann, ok := strings.CutPrefix(strings.TrimSpace(line), "-- +goose "); ok {
			switch strings.TrimSpace(ann) {
			case "Up":
				cur = &upB
				continue
			case "Down":
				cur = &downB
				continue
			case "NO TRANSACTION":
				continue
			}
		}
		cur.WriteString(line)
	}
	if upB.Len() == 0 || downB.Len() == 0 {
		return "", "", fmt.Errorf("migration %s: no -- +goose Up or Down section", m.File)
	}
	return strings.TrimSpace(doc.String()+upB.String()) + "\n", strings.TrimSpace(downB.String()) + "\n", nil
}
