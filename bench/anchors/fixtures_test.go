package anchors

// Fixtures: the package database that the root module's internal/testkit/testdb
// gives this test package on the server named by LOCKGEN_DATABASE_URL (with
// lockgen's schema applied once), unique lock keys, pools of 16 connections
// whose round trips are counted, and the local Redis.

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

const (
	envRedis  = "LOCKGEN_REDIS_ADDR"
	redisAddr = "127.0.0.1:6379"
	poolSize  = 16
)

var (
	migrateOnce sync.Once
	migrateErr  error
	keySeq      atomic.Int64
	// keyBase is random in the high bits so reruns against a shared server
	// do not collide.
	keyBase = func() int64 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		return int64(binary.BigEndian.Uint64(b[:])>>1) &^ 0xffffffff
	}()
)

// TestMain gives the package its own database and drops it afterwards.
func TestMain(m *testing.M) { testdb.Main(m) }

// privateURL returns the package database's URL, with lockgen's schema
// applied by pgadvisory.Migrate on first use. Without a server the benchmark
// is skipped (failed when CI is set), as testdb does.
func privateURL(b *testing.B) string {
	b.Helper()
	u := testdb.URL(b)
	migrateOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		migrateErr = pgadvisory.Migrate(ctx, testdb.DB(b))
	})
	if migrateErr != nil {
		b.Fatalf("anchors: applying lockgen's migrations: %v", migrateErr)
	}
	return u
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
// count once), as in the root module's internal/testkit/wirecount. It is kept
// separate because wirecount serializes every read and write of all its
// connections on one mutex (for its gate), which would throttle the
// 16-goroutine rows; here each connection has its own lock and the total
// is one atomic counter.
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
