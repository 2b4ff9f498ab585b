package doctor

import (
	"fmt"
	"slices"
	"strings"
)

// Use is a family of lockgen entry points that a service calls: what it
// needs from the connection path differs (a transaction pooler serves
// transaction locks, not session locks).
type Use string

// The uses, as lockgen doctor -uses names them.
const (
	// UseExclusive is the transaction-level locks: RunExclusive, RunOnce
	// and fenced calls (WithFencing), each lock held by one transaction.
	UseExclusive Use = "exclusive"
	// UseSession is RunSession: a session-level lock held across
	// transactions on one server connection.
	UseSession Use = "session"
	// UseLead is leader election (Lead, Campaign), on session-level locks.
	UseLead Use = "lead"
	// UseLease is leader election and session-like locks with leases
	// (Lead, Campaign, RunSession with WithLease): a row renewed in short
	// transactions, no session-level lock.
	UseLease Use = "lease"
	// UseMigrate is pgadvisory.Migrate (or a Migrator) run by the service
	// through this URL, which holds a session-level lock while it migrates.
	UseMigrate Use = "migrate"
)

// useInfo describes a use for the messages.
type useInfo struct {
	use  Use
	what string // the entry points, for people
	// throughTxPooler is true when the use works through a transaction
	// pooler (PgBouncer's pool_mode=transaction): every lock it takes ends
	// with a transaction, which such a pooler keeps on one server
	// connection. Entry points added later that keep that property (for
	// example table-based leases) join with true.
	throughTxPooler bool
}

// uses lists every use, in the order messages name them.
var uses = []useInfo{
	{UseExclusive, "transaction locks (RunExclusive, RunOnce, fencing)", true},
	{UseSession, "session locks (RunSession)", false},
	{UseLead, "leader election (Lead, Campaign)", false},
	{UseLease, "leases (Lead, Campaign, RunSession with WithLease)", true},
	{UseMigrate, "pgadvisory.Migrate", false},
}

// Uses are every use's name, in order.
func Uses() []Use {
	out := make([]Use, len(uses))
	for i, u := range uses {
		out[i] = u.use
	}
	return out
}

// ParseUses reads a comma-separated list of uses, as lockgen doctor -uses
// takes it: "exclusive,session". Unknown names, an empty list and
// duplicates are errors.
func ParseUses(s string) ([]Use, error) {
	var out []Use
	for _, part := range strings.Split(s, ",") {
		name := Use(strings.TrimSpace(part))
		if name == "" {
			return nil, fmt.Errorf("an empty name in %q; want a comma-separated list of %s", s, useNames())
		}
		if !slices.ContainsFunc(uses, func(u useInfo) bool { return u.use == name }) {
			return nil, fmt.Errorf("unknown use %q; want a comma-separated list of %s", name, useNames())
		}
		if slices.Contains(out, name) {
			return nil, fmt.Errorf("%q is listed twice", name)
		}
		out = append(out, name)
	}
	return out, nil
}

func useNames() string {
	names := make([]string, len(uses))
	for i, u := range uses {
		names[i] = string(u.use)
	}
	return strings.Join(names, ", ")
}

// declared returns the uses e checks for: Config.Uses, or every use when
// none was declared.
func (e *env) declaredUses() []Use {
	if len(e.Uses) == 0 {
		return Uses()
	}
	return e.Uses
}

// needsSessionPath reports whether a declared use needs a server
// connection of its own for longer than a transaction.
func (e *env) needsSessionPath() bool {
	for _, u := range uses {
		if !u.throughTxPooler && slices.Contains(e.declaredUses(), u.use) {
			return true
		}
	}
	return false
}

// txPoolerUses says what works through a transaction pooler and what does
// not, marking the service's declared uses.
func (e *env) txPoolerUses() string {
	var works, fails []string
	for _, u := range uses {
		text := u.what
		if len(e.Uses) > 0 && slices.Contains(e.Uses, u.use) {
			text += " [used]"
		}
		if u.throughTxPooler {
			works = append(works, text)
		} else {
			fails = append(fails, text)
		}
	}
	return fmt.Sprintf("through a transaction pooler, these work: %s; these do not: %s (their lock would stay on a server connection that other clients get)",
		strings.Join(works, ", "), strings.Join(fails, ", "))
}

// usesText says which uses were checked for.
func (e *env) usesText() string {
	if len(e.Uses) == 0 {
		return "checked for every entry point (no -uses given)"
	}
	names := make([]string, len(e.Uses))
	for i, u := range e.Uses {
		names[i] = string(u)
	}
	return "checked for -uses " + strings.Join(names, ",")
}

// uses reports whether u is among the declared uses (every use when none
// was declared).
func (e *env) uses(u Use) bool { return slices.Contains(e.declaredUses(), u) }
