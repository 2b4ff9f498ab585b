package anchors

// The design source's two locks, from the blog post "Distributed Locking:
// Redis, PostgreSQL và những trade-off"
// (/work/shared/seeds/000_820481cf010be46d.txt): pglock.RunExclusive and
// redislock.Acquire/Release, copied verbatim; only identifiers were renamed
// (prefix designSource/redisLock) so both fit in one package.

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// ---- package pglock --------------------------------------------------------

var designSourceErrLocked = errors.New("pglock: job đang được instance khác chạy")

// RunExclusive chạy fn khi và chỉ khi giành được advisory lock lockID.
// Lock tự giải phóng khi transaction commit hoặc rollback.
func designSourceRunExclusive(ctx context.Context, db *sql.DB, lockID int64, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // no-op nếu đã commit

	var locked bool
	if err := tx.QueryRowContext(ctx, "SELECT pg_try_advisory_xact_lock($1)", lockID).Scan(&locked); err != nil {
		return err
	}
	if !locked {
		return designSourceErrLocked
	}

	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

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
