package anchors

// Fixtures: a private database on the server named by LOCKGEN_DATABASE_URL,
// unique lock keys, pools of 16 connections whose round trips are counted,
// and the local Redis. The root module's internal/testdb and
// internal/wirecount cannot be imported from this module, so this file has
// small equivalents.

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"

	"github.com/lockgen/lockgen/pgadvisory"
)

const (
	envURL     = "LOCKGEN_DATABASE_URL"
	defaultURL = "postgres://localhost:5432/test"
	envRedis   = "LOCKGEN_REDIS_ADDR"
	redisAddr  = "127.0.0.1:6379"
	poolSize   = 16
)

var (
	dbOnce sync.Once
	dbURL  string // URL of the private database
	dbName string
	dbErr  error
	keySeq atomic.Int64
	// keyBase is random in the high bits so reruns against a shared server
	// do not collide.
	keyBase = func() int64 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		return int64(binary.BigEndian.Uint64(b[:])>>1) &^ 0xffffffff
	}()
)

func serverURL() string {
	if u := os.Getenv(envURL); u != "" {
		return u
	}
	return defaultURL
}

// TestMain drops the private database after the benchmarks.
func TestMain(m *testing.M) {
	code := m.Run()
	if dbName != "" {
		if err := dropDatabase(dbName); err != nil {
			fmt.Fprintf(os.Stderr, "anchors: dropping %s: %v\n", dbName, err)
		}
	}
	os.Exit(code)
}

// privateURL creates the private database on first use (with lockgen's
// schema applied by pgadvisory.Migrate) and returns its URL; without a
// server the benchmark is skipped with the reason.
func privateURL(b *testing.B) string {
	b.Helper()
	dbOnce.Do(func() { dbURL, dbErr = createDatabase() })
	if dbErr != nil {
		b.Skipf("anchors: PostgreSQL at %s (set %s) is not usable: %v", serverURL(), envURL, dbErr)
	}
	return dbURL
}

func createDatabase() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, serverURL())
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var r [4]byte
	_, _ = rand.Read(r[:])
	name := fmt.Sprintf("lockgen_anchors_%x", r)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("anchors: creating %s: %w", name, err)
	}
	dbName = name
	u, err := withDatabase(serverURL(), name)
	if err != nil {
		return "", err
	}
	db, err := sql.Open("pgx", u)
	if err != nil {
		return "", err
	}
	defer db.Close()
	if err := pgadvisory.Migrate(ctx, db); err != nil {
		return "", err
	}
	return u, nil
}

func dropDatabase(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, serverURL())
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	return err
}

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

// newKey returns a lock key no other benchmark in this process uses.
func newKey() int64 { return keyBase + keySeq.Add(1) }

// newKeys returns n consecutive unused keys.
func newKeys(n int) []int64 {
	last := keySeq.Add(int64(n))
	ks := make([]int64, n)
	for i := range ks {
		ks[i] = keyBase + last - int64(n) + 1 + int64(i)
	}
	return ks
}

// sqlDB is a database/sql handle (pgx stdlib) with size connections, all
// opened before it is returned, whose round trips c counts.
func sqlDB(b *testing.B, c *rtCounter, size int) *sql.DB {
	b.Helper()
	cfg, err := pgx.ParseConfig(privateURL(b))
	if err != nil {
		b.Fatal(err)
	}
	cfg.DialFunc = c.dial(cfg.DialFunc)
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(size)
	db.SetMaxIdleConns(size)
	b.Cleanup(func() { _ = db.Close() })
	ctx := context.Background()
	conns := make([]*sql.Conn, size)
	for i := range conns {
		if conns[i], err = db.Conn(ctx); err != nil {
			b.Fatal(err)
		}
	}
	for _, cn := range conns {
		_ = cn.Close()
	}
	return db
}

// pgxPool is a pgx pool with size connections, all opened before it is
// returned, whose round trips c counts.
func pgxPool(b *testing.B, c *rtCounter, size int) *pgxpool.Pool {
	b.Helper()
	cfg, err := pgxpool.ParseConfig(privateURL(b))
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = int32(size)
	cfg.ConnConfig.DialFunc = c.dial(cfg.ConnConfig.DialFunc)
	ctx := context.Background()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	conns := make([]*pgxpool.Conn, size)
	for i := range conns {
		if conns[i], err = pool.Acquire(ctx); err != nil {
			b.Fatal(err)
		}
	}
	for _, cn := range conns {
		cn.Release()
	}
	return pool
}

// redisClient is a go-redis client on the local Redis (LOCKGEN_REDIS_ADDR,
// default 127.0.0.1:6379) with 16 connections whose round trips c counts,
// or nil with the reason when Redis is unreachable.
func redisClient(b *testing.B, c *rtCounter) (*redis.Client, error) {
	b.Helper()
	addr := redisAddr
	if a := os.Getenv(envRedis); a != "" {
		addr = a
	}
	var d net.Dialer
	rdb := redis.NewClient(&redis.Options{
		Addr:     addr,
		PoolSize: poolSize,
		Dialer:   c.dial(d.DialContext),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("anchors: Redis at %s (set %s) is unreachable: %w", addr, envRedis, err)
	}
	b.Cleanup(func() { _ = rdb.Close() })
	return rdb, nil
}

// rtCounter counts client/server round trips on the connections it dials:
// a round trip starts with the first write after a read (pipelined writes
// count once). It is a small copy of the idea of the root module's
// internal/wirecount, which this module cannot import.
type rtCounter struct{ trips atomic.Int64 }

type dialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

func (c *rtCounter) dial(dial dialFunc) dialFunc {
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &rtConn{Conn: nc, c: c, readSinceWrite: true}, nil
	}
}

type rtConn struct {
	net.Conn
	c              *rtCounter
	mu             sync.Mutex
	readSinceWrite bool
}

func (w *rtConn) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.readSinceWrite {
		w.c.trips.Add(1)
		w.readSinceWrite = false
	}
	w.mu.Unlock()
	return w.Conn.Write(p)
}

func (w *rtConn) Read(p []byte) (int, error) {
	n, err := w.Conn.Read(p)
	if n > 0 {
		w.mu.Lock()
		w.readSinceWrite = true
		w.mu.Unlock()
	}
	return n, err
}
