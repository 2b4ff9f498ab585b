package frontdoor

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// DefaultMaxConns is the pool size of a door opened without [MaxConns].
const DefaultMaxConns = 32

// Option adjusts a pool that [Open] opens.
type Option func(*openConfig)

type openConfig struct {
	maxConns  int
	url       string // "" means the package database (testdb)
	configure []func(*pgx.ConnConfig)
	locker    []pgadvisory.LockerOption
}

// MaxConns bounds the pool to n connections (database/sql: open and idle).
func MaxConns(n int) Option { return func(c *openConfig) { c.maxConns = n } }

// URL opens the pool on the database at url (a throwaway cluster's, a
// PgBouncer's) instead of the package database.
func URL(url string) Option { return func(c *openConfig) { c.url = url } }

// Settings sets server settings (runtime parameters, such as
// idle_in_transaction_session_timeout) on every connection of the pool.
func Settings(params map[string]string) Option {
	return Configure(func(cfg *pgx.ConnConfig) {
		for k, v := range params {
			cfg.RuntimeParams[k] = v
		}
	})
}

// Configure edits the connection configuration before the pool is opened:
// a fault proxy's address, a tracer, another cluster. Configure options
// apply in order, after the package database's URL was parsed.
func Configure(edit func(*pgx.ConnConfig)) Option {
	return func(c *openConfig) { c.configure = append(c.configure, edit) }
}

// Locker passes opts to the door's Locker (pgadvisory.New).
func Locker(opts ...pgadvisory.LockerOption) Option {
	return func(c *openConfig) { c.locker = append(c.locker, opts...) }
}

// Open opens a new pool of driver drv on the package database (testdb), or
// on the database given with [URL], and returns its door. The pool is pinged before Open returns and closed when t
// ends; closing a pgx pool waits at most 30s for connections a failed test
// left checked out, and reports them.
func Open(t testing.TB, drv Driver, opts ...Option) Door {
	t.Helper()
	c := openConfig{maxConns: DefaultMaxConns}
	for _, o := range opts {
		o(&c)
	}
	if c.url == "" {
		c.url = testdb.URL(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch drv {
	case SQL:
		cfg, err := pgx.ParseConfig(c.url)
		require.NoError(t, err)
		for _, edit := range c.configure {
			edit(cfg)
		}
		db := stdlib.OpenDB(*cfg)
		db.SetMaxOpenConns(c.maxConns)
		db.SetMaxIdleConns(c.maxConns)
		t.Cleanup(func() { _ = db.Close() })
		require.NoError(t, db.PingContext(ctx))
		return OnDB(db, c.locker...)
	case Pgx:
		cfg, err := pgxpool.ParseConfig(c.url)
		require.NoError(t, err)
		cfg.MaxConns = int32(c.maxConns)
		for _, edit := range c.configure {
			edit(cfg.ConnConfig)
		}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(func() {
			// pool.Close waits for every connection to come back: bounded, so
			// that a leaked connection fails the test instead of hanging it.
			closed := make(chan struct{})
			go func() { pool.Close(); close(closed) }()
			select {
			case <-closed:
			case <-time.After(30 * time.Second):
				t.Errorf("frontdoor: pgx pool.Close blocked: %d connections never returned", pool.Stat().AcquiredConns())
			}
		})
		require.NoError(t, pool.Ping(ctx))
		return OnPool(pool, c.locker...)
	}
	t.Fatalf("frontdoor: unknown driver %q", drv)
	return Door{}
}

// OpenAll opens one door per driver, in the order of [Drivers].
func OpenAll(t testing.TB, opts ...Option) []Door {
	t.Helper()
	doors := make([]Door, len(Drivers))
	for i, drv := range Drivers {
		doors[i] = Open(t, drv, opts...)
	}
	return doors
}

// ForEach runs fn as one subtest per driver, named by its label, with a
// door opened in the subtest with opts.
func ForEach(t *testing.T, fn func(t *testing.T, d Door), opts ...Option) {
	t.Helper()
	ForEachDriver(t, func(t *testing.T, drv Driver) { fn(t, Open(t, drv, opts...)) })
}

// ForEachDriver runs fn as one subtest per driver, named by its label, for
// tests that open their doors themselves (through a fault proxy, on another
// cluster, several per driver).
func ForEachDriver(t *testing.T, fn func(t *testing.T, drv Driver)) {
	t.Helper()
	for _, drv := range Drivers {
		t.Run(string(drv), func(t *testing.T) { fn(t, drv) })
	}
}
