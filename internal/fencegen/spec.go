package fencegen

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/lockgen/lockgen/internal/decl"
)

// ErrInvalid marks a request that cannot be right whatever the files
// contain: a bad table or column name, a wrong number of columns, an unknown
// policy or version. Commands report it as a usage error.
var ErrInvalid = errors.New("invalid request")

// Policy says what the triggers do with a write that carries no token.
type Policy string

// The policies of the fence triggers.
const (
	Strict     Policy = "strict"     // refuse it (SQLSTATE LF002)
	Permissive Policy = "permissive" // let it pass untouched
)

// Column is the column the migration adds and the triggers stamp.
const Column = "fencing_token"

// Trigger names. PostgreSQL fires a table's BEFORE triggers in name order;
// the zz_ prefix makes the row trigger, which stamps the row, run after the
// table's own BEFORE triggers in most schemas. The check does not depend on
// it: the AFTER ... FOR EACH STATEMENT triggers see the rows as written,
// after every BEFORE trigger.
const (
	RowTrigger      = "zz_pgadvisory_fence"          // BEFORE INSERT OR UPDATE FOR EACH ROW: stamps
	InsertTrigger   = "zz_pgadvisory_fence_insert"   // AFTER INSERT FOR EACH STATEMENT: checks
	UpdateTrigger   = "zz_pgadvisory_fence_update"   // AFTER UPDATE FOR EACH STATEMENT: checks
	DeleteTrigger   = "zz_pgadvisory_fence_delete"   // AFTER DELETE FOR EACH STATEMENT: checks
	TruncateTrigger = "zz_pgadvisory_fence_truncate" // BEFORE TRUNCATE FOR EACH STATEMENT: guards
)

// Spec is a checked request for one fencing migration.
type Spec struct {
	Lock    *decl.Lock // the declared lock, checked by decl.Check
	Schema  string     // the table's schema
	Table   string     // the table's name
	Columns []string   // parameterized lock: the row's parameter columns, in declaration order
	Policy  Policy
	Upgrade bool // move a table fenced in the first layout to the current one (EmitUpgrade)
}

// ident is what the generator accepts as a schema, table or column name: a
// lowercase identifier, which means the same quoted and unquoted.
var ident = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// maxIdent is PostgreSQL's identifier length limit (NAMEDATALEN - 1).
const maxIdent = 63

func identProblem(s string) string {
	switch {
	case s == "":
		return "is empty"
	case len(s) > maxIdent:
		return fmt.Sprintf("is longer than PostgreSQL's %d bytes", maxIdent)
	case !ident.MatchString(s):
		return "must be a lowercase SQL identifier: [a-z_][a-z0-9_]*"
	}
	return ""
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// ParseTable splits "schema.table". Both parts must be lowercase SQL
// identifiers ([a-z_][a-z0-9_]*, at most 63 bytes), so that the names in the
// migration mean the same as in the application's unquoted SQL.
func ParseTable(s string) (schema, table string, err error) {
	schema, table, ok := strings.Cut(s, ".")
	if !ok || strings.Contains(table, ".") {
		return "", "", invalid("table %q: want schema.table, e.g. public.accounts", s)
	}
	if why := identProblem(schema); why != "" {
		return "", "", invalid("table %q: the schema %s", s, why)
	}
	if why := identProblem(table); why != "" {
		return "", "", invalid("table %q: the table name %s", s, why)
	}
	return schema, table, nil
}

// ParseColumns splits a comma-separated column list; "" gives none.
func ParseColumns(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	cols := strings.Split(s, ",")
	for i, c := range cols {
		c = strings.TrimSpace(c)
		if why := identProblem(c); why != "" {
			return nil, invalid("column %q %s", c, why)
		}
		if c == Column {
			return nil, invalid("column %q is the fencing column itself; name the columns holding the lock's parameters", c)
		}
		cols[i] = c
	}
	return cols, nil
}

// ParsePolicy reads "strict" or "permissive".
func ParsePolicy(s string) (Policy, error) {
	switch p := Policy(s); p {
	case Strict, Permissive:
		return p, nil
	}
	return "", invalid("policy %q: want strict (writes without a token are refused) or permissive (they pass)", s)
}

// NewSpec checks a request for lock, which must have passed decl.Check:
// table is "schema.table", columns the comma-separated parameter columns of
// a parameterized lock (empty for a plain lock), policy strict or permissive.
// Its errors wrap [ErrInvalid].
func NewSpec(lock *decl.Lock, table, columns, policy string) (*Spec, error) {
	if lock == nil || lock.GoName == "" {
		return nil, errors.New("fencegen: the lock must be a declaration checked by decl.Check")
	}
	s := &Spec{Lock: lock}
	var err error
	if s.Schema, s.Table, err = ParseTable(table); err != nil {
		return nil, err
	}
	if s.Columns, err = ParseColumns(columns); err != nil {
		return nil, err
	}
	if s.Policy, err = ParsePolicy(policy); err != nil {
		return nil, err
	}
	if lock.Shared {
		return nil, invalid("lock %q is shared: shared holders run at once, so no single holder's fencing token can guard the table", lock.Name)
	}
	switch {
	case lock.Plain() && len(s.Columns) > 0:
		return nil, invalid("lock %q has no parameters, so it takes no -columns; got %d", lock.Name, len(s.Columns))
	case len(s.Columns) != len(lock.Params):
		return nil, invalid("lock %q takes %d parameter(s): %s; -columns names %d column(s)", lock.Name, len(lock.Params), lock.ParamList(), len(s.Columns))
	}
	return s, nil
}
