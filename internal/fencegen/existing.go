package fencegen

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Fenced is a migration that lockgen fence wrote, as [Scan] finds it in a
// migrations directory.
type Fenced struct {
	File    string // the file name, e.g. 00002_fence_entries.sql
	Lock    string // -lock
	Table   string // -table, schema.table
	Columns string // -columns, comma-separated; "" for a plain lock
	Policy  string // -policy
	Upgrade bool   // written with -upgrade
	Current bool   // its triggers are the current layout's (not the first layout's)
}

// Scan lists the migrations in dir that lockgen fence wrote: .sql files
// whose first line is [Header], described by the command line each records.
func Scan(dir string) ([]Fenced, error) {
	files, err := scan(dir)
	if err != nil {
		return nil, err
	}
	var out []Fenced
	for _, f := range files {
		if !strings.HasSuffix(f.file, ".sql") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, f.file))
		if err != nil {
			return nil, fmt.Errorf("fencegen: reading %s: %w", f.file, err)
		}
		if !bytes.HasPrefix(data, []byte(Header+"\n")) {
			continue
		}
		fd := Fenced{File: f.file, Current: bytes.Contains(data, []byte("pgadvisory.fence_stamp("))}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), commandPrefix)
			if !ok || !strings.HasPrefix(line, "-") {
				continue
			}
			fields := strings.Fields(line)
			for i := 0; i < len(fields); i++ {
				switch fields[i] {
				case "-upgrade":
					fd.Upgrade = true
				case "-lock", "-table", "-columns", "-policy":
					if i+1 < len(fields) {
						v := fields[i+1]
						switch fields[i] {
						case "-lock":
							fd.Lock = v
						case "-table":
							fd.Table = v
						case "-columns":
							fd.Columns = v
						case "-policy":
							fd.Policy = v
						}
						i++
					}
				}
			}
			break
		}
		if fd.Table != "" {
			out = append(out, fd)
		}
	}
	return out, nil
}

// checkExisting refuses a request that would fence a table that the
// migrations in dir fence already (naming the file), and an upgrade of a
// table that has nothing to upgrade.
func checkExisting(dir string, s *Spec) error {
	found, err := Scan(dir)
	if err != nil {
		return err
	}
	table := s.Schema + "." + s.Table
	var first, upgraded *Fenced
	for i := range found {
		f := &found[i]
		if f.Table != table {
			continue
		}
		switch {
		case f.Upgrade:
			upgraded = f
		case first == nil:
			first = f
		}
	}
	if !s.Upgrade {
		switch {
		case first == nil && upgraded == nil:
			return nil
		case first != nil && !first.Current && upgraded == nil:
			return fmt.Errorf("fencegen: %s is already fenced by %s, in the first layout; to move it to the current one: lockgen fence -upgrade -lock %s -table %s%s -policy %s",
				table, first.File, first.Lock, table, columnsFlag(splitColumns(first.Columns)), first.Policy)
		case first != nil:
			return fmt.Errorf("fencegen: %s is already fenced by %s; a second migration would fail at goose up", table, first.File)
		default:
			return fmt.Errorf("fencegen: %s is already fenced (%s upgraded it); a second migration would fail at goose up", table, upgraded.File)
		}
	}
	switch {
	case upgraded != nil:
		return fmt.Errorf("fencegen: %s was already upgraded by %s", table, upgraded.File)
	case first == nil:
		return fmt.Errorf("fencegen: -upgrade: no migration in %s fences %s; without -upgrade, lockgen fence writes one in the current layout", dir, table)
	case first.Current:
		return fmt.Errorf("fencegen: -upgrade: %s fences %s in the current layout already; there is nothing to upgrade", first.File, table)
	}
	same := first.Lock == s.Lock.Name && first.Policy == string(s.Policy) &&
		first.Columns == strings.Join(s.Columns, ",")
	if !same {
		return invalid("-upgrade keeps the lock, columns and policy of %s: -lock %s%s -policy %s",
			first.File, first.Lock, columnsFlag(splitColumns(first.Columns)), first.Policy)
	}
	return nil
}

func splitColumns(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
