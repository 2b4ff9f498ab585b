package dbenv_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/lockgen/lockgen/internal/dbenv"
)

// TestResolveOrder: the flag wins, then the variables in the order given,
// then the PG* variables; a later variable naming another database is
// noted; an unparsable string names its source.
func TestResolveOrder(t *testing.T) {
	t.Setenv("PGHOST", "pg.example")
	t.Setenv("PGDATABASE", "frompg")
	t.Setenv("FIRST_URL", "")
	t.Setenv("SECOND_URL", "")

	got, err := dbenv.Resolve("-db", "", "FIRST_URL", "SECOND_URL")
	if err != nil || got.From != dbenv.FromPG || got.Config.Host != "pg.example" || got.Config.Database != "frompg" {
		t.Errorf("nothing set: %+v, %v; want the PG* variables", got, err)
	}

	t.Setenv("SECOND_URL", "postgres://second.example/two")
	got, err = dbenv.Resolve("-db", "", "FIRST_URL", "SECOND_URL")
	if err != nil || got.From != "$SECOND_URL" || got.Config.Database != "two" || got.Note != "" {
		t.Errorf("second set: %+v, %v", got, err)
	}

	t.Setenv("FIRST_URL", "postgres://first.example/one")
	got, err = dbenv.Resolve("-db", "", "FIRST_URL", "SECOND_URL")
	if err != nil || got.From != "$FIRST_URL" || got.Config.Database != "one" ||
		got.Note != "$SECOND_URL is set too and names another database; $FIRST_URL wins" {
		t.Errorf("both set: %+v, %v", got, err)
	}

	got, err = dbenv.Resolve("-db", "postgres://flag.example/flag", "FIRST_URL", "SECOND_URL")
	if err != nil || got.From != "-db" || got.Config.Database != "flag" || got.Note != "" || got.String() != got.Config.User+"@flag.example:5432/flag" {
		t.Errorf("flag given: %+v (%s), %v", got, got, err)
	}

	t.Setenv("FIRST_URL", "postgres://first.example:notaport/one")
	_, err = dbenv.Resolve("-db", "", "FIRST_URL", "SECOND_URL")
	if !errors.Is(err, dbenv.ErrURL) || !strings.HasPrefix(err.Error(), "$FIRST_URL: ") {
		t.Errorf("unparsable: %v; want ErrURL naming $FIRST_URL", err)
	}
}
