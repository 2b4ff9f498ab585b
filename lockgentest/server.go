package lockgentest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockgen/lockgen/internal/dbenv"
)

// EnvDatabaseURL names the server the helpers use. When it is not set,
// $DATABASE_URL is used, and without that libpq's PG* variables (PGHOST,
// PGPORT, PGUSER, PGPASSWORD, PGDATABASE, …) and their defaults. The
// database it names is the one the helpers connect to for creating and
// dropping databases; tests never run in it.
const EnvDatabaseURL = "LOCKGEN_TEST_DATABASE_URL"

// fixCommand is the one command that gives a machine without a server one
// the helpers find.
const fixCommand = "docker run -d --rm -p 5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres:17 && " +
	"export " + EnvDatabaseURL + "=postgres://postgres@localhost:5432/postgres"

// connectTimeout bounds connecting to the server and every administrative
// statement (creating and dropping a database, building the template).
const connectTimeout = 30 * time.Second

// errUnavailable marks a server that cannot be reached or refuses the
// connection: the test skips, or fails under CI.
var errUnavailable = errors.New("lockgentest: PostgreSQL is not available")

// server is the resolved server: its configuration, the connection string
// it was parsed from and where that came from.
type server struct {
	target dbenv.Target
}

// resolveServer reads the environment, each time: a test may change it
// with t.Setenv.
func resolveServer() (server, error) {
	t, err := dbenv.Resolve("", "", EnvDatabaseURL, "DATABASE_URL")
	if err != nil {
		return server{}, fmt.Errorf("lockgentest: %w", err)
	}
	return server{target: t}, nil
}

// config returns a copy of the server's configuration naming database
// (the server's own database when database is "").
func (s server) config(database string) *pgx.ConnConfig {
	cfg := s.target.Config.Copy()
	if database != "" {
		cfg.Database = database
	}
	if _, ok := cfg.RuntimeParams["application_name"]; !ok {
		cfg.RuntimeParams["application_name"] = "lockgentest"
	}
	return cfg
}

// connect opens an administrative connection to the server's database.
// An error wraps errUnavailable when the server cannot be used at all.
func (s server) connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, s.config(""))
	if err != nil {
		return nil, fmt.Errorf("%w at %s (from %s): %w", errUnavailable, s.target, s.target.From, err)
	}
	return conn, nil
}

// inCI reports whether the CI variable asks for failures instead of
// skips: set to anything but "", "false" or "0".
func inCI() bool {
	v := strings.ToLower(strings.TrimSpace(os.Getenv("CI")))
	return v != "" && v != "false" && v != "0"
}

// unavailable skips t, or fails it under CI, saying how to get a server.
func unavailable(t testing.TB, err error) {
	t.Helper()
	msg := fmt.Sprintf("%v\nto run these tests, start a server and point them at it:\n\t%s", err, fixCommand)
	if inCI() {
		t.Fatalf("%s\n(CI is set: failing instead of skipping)", msg)
	}
	t.Skip(msg)
}

// adminContext bounds an administrative step by connectTimeout and by
// t's deadline, if it has one (go test -timeout).
func adminContext(t testing.TB) (context.Context, context.CancelFunc) {
	ctx := context.Background()
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := d.Deadline(); ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, dl)
			ctx2, cancel2 := context.WithTimeout(ctx, connectTimeout)
			return ctx2, func() { cancel2(); cancel() }
		}
	}
	return context.WithTimeout(ctx, connectTimeout)
}
