package lockgentest

import (
	"context"
	"database/sql"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// NewDB returns a database/sql handle (the pgx stdlib driver) on a new
// database of t's own with lockgen's schema applied, as
// pgadvisory.Migrate leaves it. The handle is closed and the database
// dropped (WITH (FORCE), ending sessions still in it) when t ends.
//
// The database is a copy of a template database
// (CREATE DATABASE ... TEMPLATE), which the first call on a server builds
// once per version of lockgen's schema, named lockgentest_tpl_ and a
// digest of the migrations; test binaries that start together wait for
// one build (an advisory lock around it). Databases are named
// lockgentest_, part of t's name and a random suffix. The role needs the
// CREATEDB privilege.
//
// The server is named by $LOCKGEN_TEST_DATABASE_URL, else $DATABASE_URL,
// else the PG* variables ([EnvDatabaseURL]). Without a server t is
// skipped, or fails when the CI variable is set, with the command that
// starts one.
func NewDB(t testing.TB) *sql.DB {
	t.Helper()
	s, name := newDatabase(t)
	db := stdlib.OpenDB(*s.config(name))
	t.Cleanup(func() { _ = db.Close() })
	ctx, cancel := adminContext(t)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("lockgentest: connecting to the new database %s: %v", name, err)
	}
	return db
}

// NewPool is [NewDB] for pgx: a pool on a new database of t's own with
// lockgen's schema, closed and dropped when t ends.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	s, name := newDatabase(t)
	cfg, err := pgxpool.ParseConfig(s.target.Raw)
	if err != nil {
		t.Fatalf("lockgentest: %v", err) // parsed once already by resolveServer
	}
	cfg.ConnConfig = s.config(name)
	ctx, cancel := adminContext(t)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("lockgentest: connecting to the new database %s: %v", name, err)
	}
	t.Cleanup(pool.Close)
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("lockgentest: connecting to the new database %s: %v", name, err)
	}
	return pool
}

// newDatabase creates t's database from the template and registers its
// drop with t.Cleanup (registered first, so it runs after the cleanups
// that close handles on it).
func newDatabase(t testing.TB) (server, string) {
	t.Helper()
	s, err := resolveServer()
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := templateName()
	if err != nil {
		t.Fatalf("lockgentest: reading lockgen's migrations: %v", err)
	}
	ctx, cancel := adminContext(t)
	defer cancel()
	conn, err := s.connect(ctx)
	if err != nil {
		unavailable(t, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := ensureTemplate(ctx, s, conn, tpl); err != nil {
		t.Fatal(err)
	}
	name := databaseName(t.Name())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{tpl}.Sanitize()); err != nil {
		t.Fatalf("lockgentest: creating database %s from template %s: %v%s", name, tpl, err, createdbHint(err))
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
		defer cancel()
		conn, err := s.connect(ctx)
		if err == nil {
			defer conn.Close(ctx)
			err = dropDatabase(ctx, conn, name)
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("lockgentest: the test's database %s is left on the server: %v", name, err)
		}
	})
	return s, name
}

var nonIdent = regexp.MustCompile(`[^a-z0-9]+`)

// databaseName is lockgentest_, up to 30 characters of the test's name
// and 12 random hex digits: at most 55 bytes, under PostgreSQL's 63.
func databaseName(test string) string {
	part := strings.Trim(nonIdent.ReplaceAllString(strings.ToLower(test), "_"), "_")
	if len(part) > 30 {
		part = part[:30]
	}
	return "lockgentest_" + part + "_" + randomHex(6)
}
