// Package dbenv resolves the PostgreSQL database a lockgen program
// connects to, as programs built on libpq do: a connection string given
// explicitly (a flag), else the first of a list of environment variables
// that is set, else libpq's PG* variables (PGHOST, PGPORT, PGDATABASE,
// PGUSER, PGPASSWORD, PGSSLMODE, …) and its defaults, which pgx reads as
// libpq does. The lockgen command (-db, $LOCKGEN_DATABASE_URL,
// $DATABASE_URL) and package lockgentest ($LOCKGEN_TEST_DATABASE_URL,
// $DATABASE_URL) follow this one rule.
package dbenv

import (
	"errors"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
)

// FromPG names where the connection string came from when neither the
// flag nor any of the variables gave one.
const FromPG = "the PG* environment variables and libpq's defaults"

// ErrURL marks a connection string that cannot be parsed.
var ErrURL = errors.New("cannot parse the connection string")

// Target is a resolved database and where its connection string came
// from.
type Target struct {
	Config *pgx.ConnConfig
	Raw    string // the connection string as given ("" for the PG* variables)
	From   string // "-db", "$DATABASE_URL", or FromPG
	// Note is set when a variable after the one used is set too and names
	// another database: a program says which one it used.
	Note string
}

// String names the database without credentials: "app@db.internal:5432/orders".
func (t Target) String() string {
	if t.Config == nil {
		return "(unresolved)"
	}
	return fmt.Sprintf("%s@%s:%d/%s", t.Config.User, t.Config.Host, t.Config.Port, t.Config.Database)
}

// Resolve returns the database named by flagValue (from the flag called
// flagName) when it is not empty, else by the first of vars that is set,
// else by the PG* variables. A connection string that cannot be parsed is
// an error wrapping ErrURL that names where it came from; pgx's message
// never carries the password.
func Resolve(flagName, flagValue string, vars ...string) (Target, error) {
	var t Target
	raw := ""
	switch {
	case flagValue != "":
		raw, t.From = flagValue, flagName
	default:
		t.From = FromPG
		for i, v := range vars {
			val := os.Getenv(v)
			if val == "" {
				continue
			}
			raw, t.From = val, "$"+v
			for _, later := range vars[i+1:] {
				if other := os.Getenv(later); other != "" && other != raw {
					t.Note = fmt.Sprintf("$%s is set too and names another database; $%s wins", later, v)
					break
				}
			}
			break
		}
	}
	cfg, err := pgx.ParseConfig(raw)
	if err != nil {
		return t, fmt.Errorf("%s: %w: %w", t.From, ErrURL, err)
	}
	t.Config, t.Raw = cfg, raw
	return t, nil
}
