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

	"github.com/lockgen/lockgen/internal/dbenv"
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
	// conformance is doctor -conformance.
	conformance bool
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
type dbTarget = dbenv.Target

// errDBURL marks a connection string that cannot be parsed: a usage error.
var errDBURL = dbenv.ErrURL

// target resolves the database as a CLI that follows libpq does: -db, else
// $LOCKGEN_DATABASE_URL, else $DATABASE_URL, else pgx's reading of the PG*
// variables and its defaults (package dbenv, which lockgentest shares). A
// string that cannot be parsed is an error wrapping errDBURL that names
// where it came from.
func (c *cli) target() (dbTarget, error) {
	return dbenv.Resolve("-db", c.db.url, envLockgenDatabaseURL, envDatabaseURL)
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
	if t.Note != "" {
		fmt.Fprintf(c.stderr, "lockgen %s: note: using %s (from %s); %s\n", cmd, t, t.From, t.Note)
	}
	cfg := t.Config
	if _, ok := cfg.RuntimeParams["application_name"]; !ok {
		cfg.RuntimeParams["application_name"] = appName + " " + cmd
	}
	if o.adjust != nil {
		o.adjust(cfg, t.Raw)
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
		return nil, nil, nil, fmt.Errorf("connecting to %s (from %s): %w", t, t.From, err)
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
