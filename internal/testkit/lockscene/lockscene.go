// Package lockscene sets up, for tests of lockgen status, a database in which
// advisory locks are held and awaited by other sessions: a declared plain
// lock held by RunExclusive and awaited by a SQL job in the server's lock
// queue, a registered and an unregistered instance of a declared
// parameterized lock, and a key nobody declared.
package lockscene

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/keyspace"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Scene is the locks of one test. Names start with Prefix, unique per
// scene, and every key is unique, so scenes do not see each other's locks.
type Scene struct {
	Prefix string // e.g. "scene.s1a2b3c4d.", the start of every declared name

	// Plain is a declared plain lock (pinned to a unique key). HolderPID
	// holds it in RunExclusive (idle in its transaction), WaiterPID waits
	// for it in the server's lock queue (pg_advisory_xact_lock).
	Plain                pgadvisory.Declared
	HolderPID, WaiterPID int
	HolderApp, WaiterApp string // their application_name

	// Invoice is a declared lock with one int64 parameter, tenant_id. The
	// instance Tenant is registered and held exclusively, the instance
	// OtherTenant is not registered and held shared, and RawKey (negative)
	// was never declared; one idle session (SessionPID, SessionApp) holds
	// all three at session level.
	Invoice                 pgadvisory.Declared
	Tenant, OtherTenant     int64
	InstanceID, UnknownID   int64
	RawKey                  int64
	SessionPID              int
	SessionApp              string
	Declared                []pgadvisory.Declared // Plain and Invoice
	release                 chan struct{}
	releaseOnce             sync.Once
	cancelWait              context.CancelFunc
	running                 sync.WaitGroup // the holder and the waiter
	holderDone, waiterDone  chan error
	holderDB, waiterDB, sDB *sql.DB
}

// Start migrates and registers db's database, then takes the locks and
// returns once the waiter is seen waiting. Everything is released when t
// ends; Release releases the plain lock's holder earlier.
func Start(t *testing.T, db *sql.DB) *Scene {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, pgadvisory.Migrate(ctx, db))

	tag := randomHex(5)
	s := &Scene{
		Prefix:      "scene.s" + tag + ".",
		HolderApp:   "scene-holder-" + tag,
		WaiterApp:   "scene-waiter-" + tag,
		SessionApp:  "scene-session-" + tag,
		Tenant:      testdb.Key(t),
		OtherTenant: testdb.Key(t),
		RawKey:      -testdb.Key(t),
		release:     make(chan struct{}),
		holderDone:  make(chan error, 1),
		waiterDone:  make(chan error, 1),
	}
	s.Plain = pgadvisory.Declared{Name: s.Prefix + "plain", Doc: "The scene's plain lock.", ID: testdb.Key(t), Pinned: true}
	s.Invoice = pgadvisory.Declared{Name: s.Prefix + "invoice",
		Params: []pgadvisory.DeclaredParam{{Name: "tenant_id", Type: keyspace.Int64}}}
	s.Declared = []pgadvisory.Declared{s.Plain, s.Invoice}
	s.InstanceID = keyspace.ParamID(s.Invoice.Name, keyspace.Int64Param(s.Tenant))
	s.UnknownID = keyspace.ParamID(s.Invoice.Name, keyspace.Int64Param(s.OtherTenant))
	require.NoError(t, pgadvisory.Register(ctx, db, s.Declared))
	require.NoError(t, pgadvisory.RegisterInstance(ctx, db,
		pgadvisory.Lock{Name: s.Invoice.Name, ID: s.InstanceID}, keyspace.Int64Param(s.Tenant)))

	s.holderDB = open(t, s.HolderApp)
	s.waiterDB = open(t, s.WaiterApp)
	s.sDB = open(t, s.SessionApp)
	t.Cleanup(s.stop)

	// The holder: RunExclusive, parked in fn until Release.
	pids := make(chan int, 1)
	s.running.Go(func() {
		s.holderDone <- pgadvisory.RunExclusive(ctx, s.holderDB, s.Plain.ID, func(tx *sql.Tx) error {
			var pid int
			if err := tx.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
				return err
			}
			pids <- pid
			<-s.release
			return nil
		})
	})
	select {
	case s.HolderPID = <-pids:
	case err := <-s.holderDone:
		t.Fatalf("lockscene: holder: %v", err)
	}

	// The waiter: a SQL job waiting in the server's lock queue for the same
	// lock (pg_advisory_xact_lock in a transaction). A waiting RunExclusive
	// would not do: with migration 00011 it waits in pgadvisory.waiter,
	// holding no connection, so pg_locks never shows it.
	waitCtx, cancelWait := context.WithCancel(ctx)
	s.cancelWait = cancelWait
	s.running.Go(func() {
		s.waiterDone <- waitInServerQueue(waitCtx, s.waiterDB, s.Plain.ID)
	})
	// Seen waiting in pg_locks itself (not through the view under test).
	require.Eventually(t, func() bool {
		err := db.QueryRowContext(ctx, `SELECT pid FROM pg_catalog.pg_locks
			WHERE locktype = 'advisory' AND objsubid = 1 AND NOT granted
			  AND classid = $1::bigint::oid AND objid = $2::bigint::oid`,
			uint32(uint64(s.Plain.ID)>>32), uint32(s.Plain.ID)).Scan(&s.WaiterPID)
		return err == nil
	}, 30*time.Second, 20*time.Millisecond, "the waiter never showed up in pg_locks")

	// The session: three session-level locks on an idle connection.
	conn, err := s.sDB.Conn(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	require.NoError(t, conn.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&s.SessionPID))
	_, err = conn.ExecContext(ctx, `SELECT pg_advisory_lock($1), pg_advisory_lock_shared($2), pg_advisory_lock($3)`,
		s.InstanceID, s.UnknownID, s.RawKey)
	require.NoError(t, err)
	return s
}

// Release lets the plain lock's holder commit; the waiter then takes the
// lock and both RunExclusive calls return. It waits for that and requires
// both to succeed.
func (s *Scene) Release(t *testing.T) {
	t.Helper()
	s.releaseOnce.Do(func() { close(s.release) })
	require.NoError(t, <-s.holderDone, "holder")
	require.NoError(t, <-s.waiterDone, "waiter")
}

// stop ends the holder and the waiter (canceling a waiter still waiting)
// and waits for them, before the connections close.
func (s *Scene) stop() {
	if s.cancelWait != nil {
		s.cancelWait()
	}
	s.releaseOnce.Do(func() { close(s.release) })
	s.running.Wait()
}

// Keys are the lock IDs of the scene, for filtering a status listing.
func (s *Scene) Keys() []int64 {
	return []int64{s.Plain.ID, s.InstanceID, s.UnknownID, s.RawKey}
}

// open returns a database/sql handle on the package database whose sessions
// carry application_name app, closed when t ends.
func open(t *testing.T, app string) *sql.DB {
	t.Helper()
	u := testdb.URL(t)
	switch {
	case !strings.Contains(u, "://"): // keyword/value form
		u += " application_name=" + app
	case strings.Contains(u, "?"):
		u += "&application_name=" + app
	default:
		u += "?application_name=" + app
	}
	db, err := sql.Open("pgx", u)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// waitInServerQueue takes the transaction-level advisory lock id, waiting in
// the server's lock queue, and commits at once.
func waitInServerQueue(ctx context.Context, db *sql.DB, id int64) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `SELECT pg_catalog.pg_advisory_xact_lock($1::pg_catalog.int8)`, id); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}
