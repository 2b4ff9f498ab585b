package anchors

// The design source's Redis lock, from the blog post "Distributed Locking:
// Redis, PostgreSQL và những trade-off" (000_820481cf010be46d.txt):
// redislock.Acquire/Release, copied verbatim; only identifiers were renamed
// (prefix redisLock) so it fits in this package. Its PostgreSQL lock is the root module's
// internal/testkit/designsource/pglock, shared with pgadvisory's benchmarks.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// ---- package redislock -----------------------------------------------------

var redisLockErrNotAcquired = errors.New("redislock: lock đang được giữ bởi client khác")

// Chỉ xoá key nếu giá trị vẫn là token của mình — kiểm tra và xoá trong một bước nguyên tử.
var redisLockReleaseScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0
`)

type redisLock struct {
	rdb   *redis.Client
	key   string
	token string
}

func redisLockAcquire(ctx context.Context, rdb *redis.Client, key string, ttl time.Duration) (*redisLock, error) {
	buf := make([]byte, 16)
	if _, err := rand.Read(buf); err != nil {
		return nil, err
	}
	token := hex.EncodeToString(buf)

	ok, err := rdb.SetNX(ctx, key, token, ttl).Result()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, redisLockErrNotAcquired
	}
	return &redisLock{rdb: rdb, key: key, token: token}, nil
}

func (l *redisLock) Release(ctx context.Context) error {
	return redisLockReleaseScript.Run(ctx, l.rdb, []string{l.key}, l.token).Err()
}
