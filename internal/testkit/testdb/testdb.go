// Package testdb gives lockgen's tests an isolated PostgreSQL database.
//
// Every test binary (one per Go package) gets its own database, created on first
// use from the server named by the LOCKGEN_DATABASE_URL environment
// variable (default postgres://localhost:5432/test) and dropped by [Main] when
// the package's tests end. Advisory locks are scoped to a database, so packages
// that go test runs in parallel cannot see each other's locks. Within a package,
// tests take unique lock keys from [Key] and private schemas from [Schema].
//
// Without a reachable server a test is skipped with a clear message, unless the
// CI environment variable is set (to anything but "false" or "0"): then it fails,
// so a CI run can never pass by skipping.
package testdb

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// EnvURL is the environment variable that names the test server.
const EnvURL = "LOCKGEN_DATABASE_URL"

// DefaultURL is used when EnvURL is unset.
const DefaultURL = "postgres://localhost:5432/test"

var (
	setupOnce sync.Once
	setupErr  error
	pkgURL    string // URL of this package's private database
	pkgDBName string
	adminURL  string

	keySeq atomic.Int64
)

// ServerURL returns the URL of the server's base database, as configured.
func ServerURL() string {
	if u := os.Getenv(EnvURL); u != "" {
		return u
	}
	return DefaultURL
}

// InCI reports whether the CI environment variable asks for hard failures.
func InCI() bool {
	v := strings.ToLower(strings.TrimSpace(os.Getenv("CI")))
	return v != "" && v != "false" && v != "0"
}

// Main runs the package's tests and then drops the package database, if one
// was created. Use it from TestMain:
//
//	func TestMain(m *testing.M) { testdb.Main(m) }
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run is Main without the exit, for a TestMain that exits by itself (such
// as testscript.RunMain's): it runs the tests, drops the package database
// and returns the exit code.
func Run(m interface{ Run() int }) int {
	code := m.Run()
	if pkgDBName != "" {
		if err := dropDatabase(pkgDBName); err != nil {
			fmt.Fprintf(os.Stderr, "testdb: dropping %s: %v\n", pkgDBName, err)
		}
	}
	return code
}

// URL returns the connection URL of this package's private database, creating
// the database on first use. It skips or fails t when no server is reachable.
func URL(t testing.TB) string {
	t.Helper()
	setupOnce.Do(setup)
	if setupErr != nil {
		unavailable(t, setupErr)
	}
	return pkgURL
}

// PackageURL is URL for code that has no testing.TB, such as Example
// functions: it returns the package database's URL, creating the database on
// first use, or the error that made it unavailable. Examples run in the same
// test binary as the package's tests, so they share its private database and
// never the server's base database, whose schema other runs may have changed.
func PackageURL() (string, error) {
	setupOnce.Do(setup)
	if setupErr != nil {
		return "", fmt.Errorf("testdb: PostgreSQL is not reachable at %s (set %s): %w", redact(ServerURL()), EnvURL, setupErr)
	}
	return pkgURL, nil
}

// unavailable skips t locally and fails it under CI.
func unavailable(t testing.TB, err error) {
	t.Helper()
	msg := fmt.Sprintf("PostgreSQL is not reachable at %s (set %s): %v", redact(ServerURL()), EnvURL, err)
	if InCI() {
		t.Fatal("testdb: " + msg + " [CI is set, so this is a failure, not a skip]")
	}
	t.Skip("testdb: " + msg)
}

func setup() {
	base := ServerURL()
	cfg, err := pgx.ParseConfig(base)
	if err != nil {
		setupErr = fmt.Errorf("parsing %s: %w", EnvURL, err)
		return
	}
	_ = cfg
	adminURL = base
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		setupErr = err
		return
	}
	defer conn.Close(ctx)

	name := "lockgen_test_" + sanitize(packageName()) + "_" + randomHex(4)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		setupErr = fmt.Errorf("creating test database %s: %w", name, err)
		return
	}
	pkgDBName = name
	pkgURL, setupErr = withDatabase(base, name)
}

func dropDatabase(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	return err
}

// withDatabase returns base with its database replaced by name. It accepts
// both URL and keyword/value connection strings.
func withDatabase(base, name string) (string, error) {
	if strings.HasPrefix(base, "postgres://") || strings.HasPrefix(base, "postgresql://") {
		u, err := url.Parse(base)
		if err != nil {
			return "", err
		}
		u.Path = "/" + name
		return u.String(), nil
	}
	return base + " dbname=" + name, nil
}

// DB returns a database/sql handle (pgx stdlib driver) on the package
// database, closed when t ends. Pools allow 32 connections.
func DB(t testing.TB) *sql.DB {
	t.Helper()
	u := URL(t)
	db, err := sql.Open("pgx", u)
	if err != nil {
		t.Fatalf("testdb: open: %v", err)
	}
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)
	t.Cleanup(func() { _ = db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		unavailable(t, err)
	}
	return db
}

// Pool returns a pgx pool on the package database, closed when t ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return PoolConfig(t, nil)
}

// PoolConfig is Pool with a hook to adjust the configuration first.
func PoolConfig(t testing.TB, adjust func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(URL(t))
	if err != nil {
		t.Fatalf("testdb: parse: %v", err)
	}
	cfg.MaxConns = 32
	if adjust != nil {
		adjust(cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("testdb: pool: %v", err)
	}
	t.Cleanup(func() { closePool(t, pool) })
	if err := pool.Ping(ctx); err != nil {
		unavailable(t, err)
	}
	return pool
}

// poolCloseWait bounds how long a test's pool may take to close.
const poolCloseWait = 30 * time.Second

// closePool closes pool, which waits for its connections checked out to
// come back: one that never does (a leak) fails the test after
// poolCloseWait instead of hanging it.
func closePool(t testing.TB, pool *pgxpool.Pool) {
	done := make(chan struct{})
	go func() { pool.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(poolCloseWait):
		t.Errorf("testdb: the pool still has %d connections checked out %v after the test ended", pool.Stat().AcquiredConns(), poolCloseWait)
	}
}

// OpenDB wraps a pgx pool as a *sql.DB, for code that needs both front doors
// on the same connections.
func OpenDB(t testing.TB, pool *pgxpool.Pool) *sql.DB {
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// Schema creates a fresh schema for t, dropped when t ends, and returns its
// (already quoted-safe) name.
func Schema(t testing.TB) string {
	t.Helper()
	db := DB(t)
	name := "t_" + sanitize(t.Name()) + "_" + randomHex(4)
	if len(name) > 60 {
		name = name[:51] + "_" + randomHex(4)
	}
	if _, err := db.Exec("CREATE SCHEMA " + pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("testdb: create schema: %v", err)
	}
	t.Cleanup(func() {
		_, _ = db.Exec("DROP SCHEMA IF EXISTS " + pgx.Identifier{name}.Sanitize() + " CASCADE")
	})
	return name
}

// Key returns a lock key no other test in this process uses. Keys are
// random in the high bits so reruns against a shared server do not collide.
func Key(t testing.TB) int64 {
	t.Helper()
	return keyBase + keySeq.Add(1)
}

var keyBase = func() int64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	// Keep 2^32 keys of headroom below the top of the range.
	return int64(binary.BigEndian.Uint64(b[:])>>1) &^ 0xffffffff
}()

func packageName() string {
	wd, err := os.Getwd()
	if err != nil {
		return "pkg"
	}
	return filepath.Base(wd)
}

var nonIdent = regexp.MustCompile(`[^a-z0-9_]+`)

func sanitize(s string) string {
	s = nonIdent.ReplaceAllString(strings.ToLower(s), "_")
	if len(s) > 30 {
		s = s[:30]
	}
	return s
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x", b)
}

func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// Context returns a context for t's calls: canceled when t ends, and
// bounded well above anything a test waits for (two minutes), so that a
// hang fails the test instead of blocking the test binary.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// EmptyDatabase creates a database of t's own on the test server, empty
// (without lockgen's schema), dropped when t ends, and returns its name and
// connection URL. Pools on it must be closed before the drop: open them
// after calling EmptyDatabase, so that their cleanups run first.
func EmptyDatabase(t testing.TB) (name, url string) {
	t.Helper()
	URL(t) // skips or fails t without a server
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, ServerURL())
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	defer conn.Close(ctx)
	name = "lockgen_test_empty_" + randomHex(6)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("testdb: creating %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := dropDatabase(name); err != nil {
			t.Logf("testdb: dropping %s: %v", name, err)
		}
	})
	url, err = withDatabase(ServerURL(), name)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	return name, url
}
