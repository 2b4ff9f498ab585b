package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// The environment variables that name the database, in the order they are
// read when -db is not given. After them come libpq's variables (PGHOST,
// PGPORT, PGDATABASE, PGUSER, PGPASSWORD, PGSSLMODE, …), which pgx reads
// as libpq does.
const (
	envLockgenDatabaseURL = "LOCKGEN_DATABASE_URL"
	envDatabaseURL        = "DATABASE_URL"
)

// appName is the application_name of lockgen's own connections, followed
// by the command ("lockgen migrate"), unless the connection string or
// PGAPPNAME sets one.
const appName = "lockgen"

// dbTimeout bounds one database command, connecting included.
const dbTimeout = time.Minute

// dbFlags are the flags of the commands that connect to PostgreSQL.
type dbFlags struct {
	url    string // -db
	json   bool   // status -json
	prefix string // status -name
	uses   string // doctor -uses
}

// dbFlagHelp is -db's help, shared by every command that connects.
const dbFlagHelp = "PostgreSQL connection `URL` or key=value string (default $" + envLockgenDatabaseURL +
	", else $" + envDatabaseURL + ", else libpq's PGHOST, PGPORT, PGDATABASE, PGUSER, … as psql reads them)"

// dbFlag adds -db. Its default is resolved when connecting, so that help
// does not depend on the environment.
func dbFlag(c *cli, fs *flag.FlagSet) {
	fs.StringVar(&c.db.url, "db", "", dbFlagHelp)
}

// dbTarget is the database a command connects to and where its
// connection string came from.
type dbTarget struct {
	cfg  *pgx.ConnConfig
	raw  string // the connection string as given ("" for the PG* variables)
	from string // "-db", "$DATABASE_URL", or "the PG* environment variables"
	// note is set when another variable names a different database: the
	// command says which one it used.
	note string
}

// String names the database without credentials: "app@db.internal:5432/orders".
func (t dbTarget) String() string {
	return fmt.Sprintf("%s@%s:%d/%s", t.cfg.User, t.cfg.Host, t.cfg.Port, t.cfg.Database)
}

// errDBURL marks a connection string that cannot be parsed: a usage error.
var errDBURL = errors.New("cannot parse the connection string")

// target resolves the database as a CLI that follows libpq does: -db, else
// $LOCKGEN_DATABASE_URL, else $DATABASE_URL, else pgx's reading of the PG*
// variables and its defaults. A string that cannot be parsed is an error
// wrapping errDBURL that names where it came from.
func (c *cli) target() (dbTarget, error) {
	var t dbTarget
	raw := ""
	switch {
	case c.db.url != "":
		raw, t.from = c.db.url, "-db"
	case os.Getenv(envLockgenDatabaseURL) != "":
		raw, t.from = os.Getenv(envLockgenDatabaseURL), "$"+envLockgenDatabaseURL
		if other := os.Getenv(envDatabaseURL); other != "" && other != raw {
			t.note = fmt.Sprintf("$%s is set too and names another database; $%s wins", envDatabaseURL, envLockgenDatabaseURL)
		}
	case os.Getenv(envDatabaseURL) != "":
		raw, t.from = os.Getenv(envDatabaseURL), "$"+envDatabaseURL
	default:
		t.from = "the PG* environment variables and libpq's defaults"
	}
	cfg, err := pgx.ParseConfig(raw)
	if err != nil {
		// pgx's message never carries the password; it names the part it
		// could not read.
		return t, fmt.Errorf("%s: %w: %w", t.from, errDBURL, err)
	}
	t.cfg, t.raw = cfg, raw
	return t, nil
}

// openDB connects to the target database, as application_name "lockgen
// <cmd>" unless the connection string sets one, with one connection, and
// returns the handle with a context that ends on interrupt or after
// dbTimeout.
func (c *cli) openDB(cmd string) (*sql.DB, context.Context, func(), error) {
	return c.openDBWith(cmd, dbOptions{conns: 1, timeout: dbTimeout})
}

// dbOptions adjust openDBWith.
type dbOptions struct {
	conns   int           // the pool's maximum number of connections
	timeout time.Duration // bounds the whole command
	// adjust changes the parsed configuration, e.g. the query exec mode;
	// raw is the connection string it was parsed from.
	adjust func(cfg *pgx.ConnConfig, raw string)
}

// openDBWith is openDB with other limits.
func (c *cli) openDBWith(cmd string, o dbOptions) (*sql.DB, context.Context, func(), error) {
	t, err := c.target()
	if err != nil {
		return nil, nil, nil, err
	}
	if t.note != "" {
		fmt.Fprintf(c.stderr, "lockgen %s: note: using %s (from %s); %s\n", cmd, t, t.from, t.note)
	}
	cfg := t.cfg
	if _, ok := cfg.RuntimeParams["application_name"]; !ok {
		cfg.RuntimeParams["application_name"] = appName + " " + cmd
	}
	if o.adjust != nil {
		o.adjust(cfg, t.raw)
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(o.conns)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	closeAll := func() {
		cancel()
		stop()
		_ = db.Close()
	}
	if err := db.PingContext(ctx); err != nil {
		closeAll()
		return nil, nil, nil, fmt.Errorf("connecting to %s (from %s): %w", t, t.from, err)
	}
	c.connected = t
	return db, ctx, closeAll, nil
}

// openFailed reports openDB's error: a connection string that cannot be
// parsed is a usage error (exit 2), anything else a failure (exit 1).
func (c *cli) openFailed(cmd string, err error) int {
	if errors.Is(err, errDBURL) {
		return c.usageError(cmd, "%v", err)
	}
	return c.fail(err)
}
