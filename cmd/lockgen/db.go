package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// The database that register and status talk to, as the README documents it.
const (
	envDatabaseURL     = "LOCKGEN_DATABASE_URL"
	defaultDatabaseURL = "postgres://localhost:5432/test"
)

// dbTimeout bounds one database command, connecting included.
const dbTimeout = time.Minute

// dbFlags are the flags of the commands that connect to PostgreSQL.
type dbFlags struct {
	url    string // -db
	json   bool   // status -json
	prefix string // status -name
}

// dbFlag adds -db. Its default is resolved when connecting, so that help
// does not depend on the environment.
func dbFlag(c *cli, fs *flag.FlagSet) {
	fs.StringVar(&c.db.url, "db", "", "PostgreSQL connection `URL` (default $"+envDatabaseURL+", else "+defaultDatabaseURL+")")
}

// databaseURL is -db, else $LOCKGEN_DATABASE_URL, else the default.
func (c *cli) databaseURL() string {
	if c.db.url != "" {
		return c.db.url
	}
	if u := os.Getenv(envDatabaseURL); u != "" {
		return u
	}
	return defaultDatabaseURL
}

// openDB connects to the database URL, as application_name "lockgen <cmd>" unless
// the URL sets one, with one connection, and returns the handle with a
// context that ends on interrupt or after dbTimeout.
func (c *cli) openDB(cmd string) (*sql.DB, context.Context, func(), error) {
	return c.openDBWith(cmd, dbOptions{conns: 1, timeout: dbTimeout})
}

// dbOptions adjust openDBWith.
type dbOptions struct {
	conns   int           // the pool's maximum number of connections
	timeout time.Duration // bounds the whole command
	// adjust changes the parsed configuration, e.g. the query exec mode.
	adjust func(*pgx.ConnConfig)
}

// openDBWith is openDB with other limits.
func (c *cli) openDBWith(cmd string, o dbOptions) (*sql.DB, context.Context, func(), error) {
	cfg, err := pgx.ParseConfig(c.databaseURL())
	if err != nil {
		return nil, nil, nil, fmt.Errorf("-db: %w", err)
	}
	if _, ok := cfg.RuntimeParams["application_name"]; !ok {
		cfg.RuntimeParams["application_name"] = "lockgen " + cmd
	}
	if o.adjust != nil {
		o.adjust(cfg)
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
		return nil, nil, nil, fmt.Errorf("connecting to %s: %w", redactURL(cfg), err)
	}
	return db, ctx, closeAll, nil
}

// redactURL names the server without credentials.
func redactURL(cfg *pgx.ConnConfig) string {
	return fmt.Sprintf("%s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
}
