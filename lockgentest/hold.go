package lockgentest

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/lockgen/lockgen/pgadvisory"
)

// holdWait bounds how long Hold waits for a lock that someone else holds.
const holdWait = 30 * time.Second

// Hold takes lock exclusively, at session level, on a connection of its
// own to db's database, and holds it until release is called or t ends.
// While it holds the lock, the code under test finds it taken, as when
// another instance of the application holds it: a call that tries once
// returns an error matching pgadvisory.ErrLocked without running its
// work, a call that waits (pgadvisory.WithWait) waits, a leader candidate
// does not lead and a lease cannot be taken.
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
	var ok bool
	if err := s.queryRow(ctx, "SELECT pg_catalog.pg_advisory_lock($1) IS NULL", []any{lock.ID}, &ok); err != nil {
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
			var unlocked bool
			_ = s.queryRow(ctx, "SELECT pg_catalog.pg_advisory_unlock($1)", []any{lock.ID}, &unlocked)
			s.close()
		})
	}
	t.Cleanup(release)
	return release
}
