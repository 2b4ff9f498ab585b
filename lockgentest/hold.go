package lockgentest

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockgen/lockgen/keyspace"
	"github.com/lockgen/lockgen/pgadvisory"
)

// holdWait bounds how long Hold waits for a lock that someone else holds.
const holdWait = 30 * time.Second

// holdSQL takes the advisory locks of the keys $1 (the text of a bigint
// array, which every driver can pass, in ascending order, so that two
// Holds of overlapping sets cannot deadlock) at session level, waiting
// for each.
const holdSQL = `SELECT count(pg_catalog.pg_advisory_lock(k.id)) FROM pg_catalog.unnest($1::pg_catalog.text::pg_catalog.int8[]) AS k(id)`

// unholdSQL releases them.
const unholdSQL = `SELECT count(*) FILTER (WHERE pg_catalog.pg_advisory_unlock(k.id)) FROM pg_catalog.unnest($1::pg_catalog.text::pg_catalog.int8[]) AS k(id)`

// registeredLimitSQL reads the limit registered for lock $1, 0 when none
// is.
const registeredLimitSQL = `SELECT COALESCE((SELECT l.n FROM pgadvisory.slot_limit AS l WHERE l.lock_id OPERATOR(pg_catalog.=) $1), 0)`

// holdKeys are the keys Hold takes for lock: its ID, and the keys of its
// slots when it is a limited lock (see Hold), in ascending order.
func holdKeys(ctx context.Context, s *session, lock pgadvisory.Lock) (string, error) {
	n := lock.Limit()
	if n == 0 {
		var registry bool
		if err := s.queryRow(ctx, "SELECT pg_catalog.to_regclass('pgadvisory.slot_limit') IS NOT NULL", nil, &registry); err != nil {
			return "", fmt.Errorf("looking for pgadvisory.slot_limit: %w", err)
		}
		if registry {
			var reg int32
			if err := s.queryRow(ctx, registeredLimitSQL, []any{lock.ID}, &reg); err != nil {
				return "", fmt.Errorf("reading the lock's registered limit: %w", err)
			}
			n = int(reg)
		}
	}
	keys := []int64{lock.ID}
	for slot := range n {
		keys = append(keys, keyspace.SlotID(lock.ID, int32(slot)))
	}
	slices.Sort(keys)
	return arrayText(keys), nil
}

// arrayText is the text of a PostgreSQL bigint array of keys.
func arrayText(keys []int64) string {
	s := make([]string, len(keys))
	for i, k := range keys {
		s[i] = strconv.FormatInt(k, 10)
	}
	return "{" + strings.Join(s, ",") + "}"
}

// Hold takes lock exclusively, at session level, on a connection of its
// own to db's database, and holds it until release is called or t ends.
// While it holds the lock, the code under test finds it taken, as when
// another instance of the application holds it: a call that tries once
// returns an error matching pgadvisory.ErrLocked without running its
// work, a call that waits (pgadvisory.WithWait) waits, a leader candidate
// does not lead and a lease cannot be taken.
//
// A limited lock ([pgadvisory.Locker.RunLimited], RunSessionLimited) is
// held whole: Hold takes every one of its n slots, so the code under test
// finds none free. n is the limit the lock declares
// ([pgadvisory.Lock.Limit], from [pgadvisory.WithLimit] or limit: in
// locks.yaml), else the one registered in pgadvisory.slot_limit by an
// earlier call; a limited lock with neither is held as a plain lock, which
// its slots do not see.
//
// With the pgx stdlib driver the connection is a new one with the
// configuration of db's connections (application_name
// "lockgentest.Hold"), so it takes nothing from db's pool; with another
// driver it is one of db's connections. Hold waits for the lock if it is
// held, and fails t after 30 seconds. release unlocks and disconnects; it
// may be called more than once and is called when t ends. A lock that
// [Depose] took away is gone: release then only disconnects.
func Hold(t testing.TB, db *sql.DB, lock pgadvisory.Lock) (release func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), holdWait)
	defer cancel()
	s := openSession(ctx, t, db, "lockgentest.Hold")
	keys, err := holdKeys(ctx, s, lock)
	if err != nil {
		s.close()
		t.Fatalf("lockgentest: Hold: %v: %v", lock, err)
	}
	var n int64
	if err := s.queryRow(ctx, holdSQL, []any{keys}, &n); err != nil {
		s.close()
		if ctx.Err() != nil {
			t.Fatalf("lockgentest: Hold: %v is still held by another session after %v: %v", lock, holdWait, err)
		}
		t.Fatalf("lockgentest: Hold: taking %v: %v", lock, err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
			defer cancel()
			// Unlock before disconnecting: a backend releases its locks
			// some time after the client hangs up, and the code under test
			// may try the lock at once.
			var unlocked int64
			_ = s.queryRow(ctx, unholdSQL, []any{keys}, &unlocked)
			s.close()
		})
	}
	t.Cleanup(release)
	return release
}
