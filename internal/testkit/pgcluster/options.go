package pgcluster

import (
	"fmt"
	"slices"
	"strings"
)

// Option configures a cluster or a PgBouncer.
type Option func(*options)

type options struct {
	settings []setting
}

type setting struct{ name, value string }

// WithSetting sets a configuration parameter. For [Start] and [Shared] it is
// a server parameter, e.g. WithSetting("max_locks_per_transaction", "10");
// a standby inherits its primary's. For [StartPgBouncer] it is a key of the
// [pgbouncer] section, e.g. WithSetting("default_pool_size", "4"). Later
// settings win over earlier ones and over the defaults. The listen address,
// port and socket directory are chosen by this package and cannot be set.
func WithSetting(name, value string) Option {
	return func(o *options) { o.settings = append(o.settings, setting{name, value}) }
}

// resolve merges defaults and opts (later wins) and checks that no reserved
// name is set. The result is sorted by name.
func resolve(defaults []setting, reserved []string, opts []Option) ([]setting, error) {
	var o options
	o.settings = append(o.settings, defaults...)
	for _, opt := range opts {
		opt(&o)
	}
	byName := map[string]string{}
	for _, s := range o.settings {
		name := strings.ToLower(strings.TrimSpace(s.name))
		if name == "" || strings.ContainsAny(name, " \t\n=#'\"") {
			return nil, fmt.Errorf("pgcluster: invalid setting name %q", s.name)
		}
		if strings.ContainsAny(s.value, "\n\r") {
			return nil, fmt.Errorf("pgcluster: setting %s: value contains a line break", name)
		}
		if slices.Contains(reserved, name) {
			return nil, fmt.Errorf("pgcluster: setting %s is managed by pgcluster", name)
		}
		byName[name] = s.value
	}
	out := make([]setting, 0, len(byName))
	for name, value := range byName {
		out = append(out, setting{name, value})
	}
	slices.SortFunc(out, func(a, b setting) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

// describe renders settings as "a=1 b=2", for messages and comparisons.
func describe(settings []setting) string {
	parts := make([]string, len(settings))
	for i, s := range settings {
		parts[i] = s.name + "=" + s.value
	}
	return strings.Join(parts, " ")
}
