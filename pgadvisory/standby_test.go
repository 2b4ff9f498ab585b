package pgadvisory_test

import (
	"context"
	"database/sql"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

func TestStandbyRefusesEveryFrontDoor(t *testing.T) {
	primary := throwawayCluster(t)
	ctx := testdb.Context(t)
	// lockgen's schema, for the fenced call (the standby copies it).
	migrator, err := sql.Open("pgx", primary.URL())
	require.NoError(t, err)
	require.NoError(t, pgadvisory.Migrate(ctx, migrator))
	require.NoError(t, migrator.Close())
	standby := primary.StartStandby(t)
	key := testdb.Key(t)

	// The primary holds key.
	holder := connectTo(t, primary.URL())
	_, err = holder.Exec(ctx, "SELECT pg_advisory_lock($1)", key)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = holder.Exec(context.Background(), "SELECT pg_advisory_unlock_all()") })
	require.False(t, tryHandWrittenLock(t, connectTo(t, primary.URL()), key), "control: on the primary the key is taken")

	// The trap is real: on the standby a hand-written lock is "granted"
	// while the primary holds the same key.
	raw := connectTo(t, standby.URL())
	require.True(t, tryHandWrittenLock(t, raw, key), "on the standby pg_try_advisory_xact_lock excludes nobody")

	db, err := sql.Open("pgx", standby.URL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	pool, err := pgxpool.New(ctx, standby.URL())
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	entries := []struct {
		name string
		run  func(d frontdoor.Door, called *bool) error
	}{
		{"RunExclusive", func(d frontdoor.Door, called *bool) error {
			return d.RunExclusive(ctx, key, func(frontdoor.Tx) error { *called = true; return nil })
		}},
		{"RunSession", func(d frontdoor.Door, called *bool) error {
			return d.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error { *called = true; return nil })
		}},
		{"RunSession_dedicated", func(d frontdoor.Door, called *bool) error {
			// A connection of the call's own (SetSessionConns 0, which the
			// package-level functions follow) is checked by the call, not as
			// a shared connection is when it opens.
			setSessionConnsOf(t, d, 0)
			defer setSessionConnsOf(t, d, 2)
			fn := func(context.Context) error { *called = true; return nil }
			if d.Driver == frontdoor.SQL {
				return pgadvisory.RunSession(ctx, d.DB(), key, fn)
			}
			return pgadvisory.RunSessionPgx(ctx, d.Pool(), key, fn)
		}},
		{"Lead", func(d frontdoor.Door, called *bool) error {
			return d.Lead(ctx, pgadvisory.ID(key), func(context.Context, int64) error { *called = true; return nil })
		}},
		{"Campaign", func(d frontdoor.Door, called *bool) error {
			// A standby may be promoted: Campaign retries it until ctx ends.
			cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			if err := d.Campaign(cctx, pgadvisory.ID(key), func(context.Context, int64) error { *called = true; return nil }); err != nil {
				return err
			}
			return d.Lead(ctx, pgadvisory.ID(key), func(context.Context, int64) error { *called = true; return nil })
		}},
		{"RunExclusive_fenced", func(d frontdoor.Door, called *bool) error {
			// fence_acquire answers standby before it locks or draws a token.
			return d.RunExclusive(ctx, key, func(frontdoor.Tx) error { *called = true; return nil }, pgadvisory.WithFencing())
		}},
	}
	for _, d := range []frontdoor.Door{frontdoor.OnDB(db), frontdoor.OnPool(pool)} {
		for _, entry := range entries {
			t.Run(d.Label()+"/"+entry.name, func(t *testing.T) {
				called := false
				err := entry.run(d, &called)
				require.ErrorIs(t, err, pgadvisory.ErrStandby)
				require.False(t, called, "fn ran on a standby")
				var e *pgadvisory.Error
				require.ErrorAs(t, err, &e)
				require.Equal(t, []int64{key}, e.LockIDs)
				// Nothing stays locked on the standby's connections.
				require.Zero(t, serverLocks(t, raw, key))
			})
		}
	}
	require.Equal(t, 1, serverLocks(t, holder, key), "the primary still holds the key")

	// A Locker that found its pool's connections direct to a primary opens
	// later shared connections without checking them; one that reaches the
	// standby behind the same address (a failover, a DNS change) is still
	// refused, by the answer of its first lock statement, and gives up
	// whatever that statement took there.
	standbyCfg, err := pgx.ParseConfig(standby.URL())
	require.NoError(t, err)
	sw := openSwitching(t, primary.URL(), net.JoinHostPort(standbyCfg.Host, strconv.Itoa(int(standbyCfg.Port))))
	free := testdb.Key(t)
	for _, d := range sw.doors() {
		for _, entry := range entries[1:4] { // RunSession (a try), RunSession_dedicated (made a queued RunSession below), Lead
			if entry.name == "RunSession_dedicated" {
				entry.name, entry.run = "RunSession_queued", func(d frontdoor.Door, called *bool) error {
					return d.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error { *called = true; return nil }, pgadvisory.WithWait(time.Second))
				}
			}
			t.Run(d.Label()+"/unchecked/"+entry.name, func(t *testing.T) {
				sw.redirect(false) // to the primary
				require.NoError(t, d.RunSession(ctx, pgadvisory.ID(free), func(context.Context) error { return nil }),
					"control: on the primary; the check finds the pool direct")
				sw.redirect(true) // to the standby
				called := false
				err := entry.run(d, &called)
				require.ErrorIs(t, err, pgadvisory.ErrStandby)
				require.False(t, called, "fn ran on a standby")
				// Given up with the session: the backend ends, and its
				// locks with it, as the server processes the connection's
				// end, a moment after the call returned.
				require.Eventually(t, func() bool { return serverLocks(t, raw, key) == 0 }, 10*time.Second, 5*time.Millisecond,
					"nothing stays locked on the standby")
				called = false
				require.ErrorIs(t, entry.run(d, &called), pgadvisory.ErrStandby, "the next connection is checked")
				require.False(t, called)
			})
		}
	}
}

// connectTo opens a pgx connection, closed when t ends.
func connectTo(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(testdb.Context(t), url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// tryHandWrittenLock runs pg_try_advisory_xact_lock(key) on conn, the way a hand-written
// lock would, and rolls back.
func tryHandWrittenLock(t *testing.T, conn *pgx.Conn, key int64) bool {
	t.Helper()
	tx, err := conn.Begin(testdb.Context(t))
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	var got bool
	require.NoError(t, tx.QueryRow(testdb.Context(t), "SELECT pg_try_advisory_xact_lock($1)", key).Scan(&got))
	return got
}

// serverLocks counts advisory locks on key held on conn's server.
func serverLocks(t *testing.T, conn *pgx.Conn, key int64) int {
	t.Helper()
	var n int
	require.NoError(t, conn.QueryRow(testdb.Context(t), `SELECT count(*) FROM pg_catalog.pg_locks
WHERE locktype = 'advisory' AND objsubid = 1
  AND ((classid::bigint << 32) | objid::bigint) = $1`, key).Scan(&n))
	return n
}

// setSessionConnsOf is SetSessionConns or SetSessionConnsPgx for d's pool.
func setSessionConnsOf(t *testing.T, d frontdoor.Door, n int) {
	t.Helper()
	if d.Driver == frontdoor.SQL {
		require.NoError(t, pgadvisory.SetSessionConns(d.DB(), n))
		return
	}
	require.NoError(t, pgadvisory.SetSessionConnsPgx(d.Pool(), n))
}
