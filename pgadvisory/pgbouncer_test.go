package pgadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Tests through PgBouncer (1.18 on Debian 12 and in CI) in
// pool_mode=transaction, in front of this package's test database. Lock
// state is read from pg_locks on a direct connection to the real server.

func TestPgBouncerRunExclusive(t *testing.T) {
	for _, mode := range pgbouncerExecModes {
		t.Run(mode, func(t *testing.T) {
			e := newPgBouncerPools(t, mode)
			ctx := testdb.Context(t)
			table := pgx.Identifier{testdb.Schema(t), "pb_writes"}.Sanitize()
			_, err := e.direct.ExecContext(ctx, "CREATE TABLE "+table+" (note text NOT NULL)")
			require.NoError(t, err)
			rows := func(note string) int {
				var n int
				require.NoError(t, e.direct.QueryRowContext(ctx, "SELECT count(*) FROM "+table+" WHERE note = $1", note).Scan(&n))
				return n
			}
			insert := func(note string) func(frontdoor.Tx) error {
				return func(tx frontdoor.Tx) error { return tx.Exec(ctx, "INSERT INTO "+table+" (note) VALUES ($1)", note) }
			}

			for _, holder := range e.doors() {
				t.Run(holder.Label()+" holds", func(t *testing.T) {
					key := testdb.Key(t)
					holding, release := make(chan struct{}), make(chan struct{})
					released := false
					releaseOnce := func() {
						if !released {
							released = true
							close(release)
						}
					}
					defer releaseOnce()
					done := make(chan error, 1)
					go func() {
						done <- holder.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
							if err := insert("holder " + holder.Label())(tx); err != nil {
								return err
							}
							close(holding)
							<-release
							return nil
						})
					}()
					select {
					case <-holding:
					case err := <-done:
						t.Fatalf("holder returned before holding: %v", err)
					case <-time.After(30 * time.Second):
						t.Fatal("holder never got the lock")
					}

					// The lock is held on the real server while fn runs, and a
					// second caller through PgBouncer is refused, by either door.
					require.Equal(t, 1, len(witness.Of(e.direct).Holds(t, key)))
					for _, other := range e.doors() {
						called := false
						err := other.RunExclusive(ctx, key, func(frontdoor.Tx) error { called = true; return nil })
						require.ErrorIs(t, err, pgadvisory.ErrLocked, other.Label())
						require.False(t, called, other.Label())
					}

					releaseOnce()
					require.NoError(t, frontdoor.Await(t, done, "the holder's return"))
					require.Equal(t, 1, rows("holder "+holder.Label()), "the holder's write committed")
					require.Eventually(t, func() bool { return len(witness.Of(e.direct).Holds(t, key)) == 0 },
						10*time.Second, 10*time.Millisecond, "the lock was released")

					// Now callers through PgBouncer get the lock and commit, so
					// the ErrLocked above was the holder's doing.
					for _, other := range e.doors() {
						require.NoError(t, other.RunExclusive(ctx, key, insert("after "+other.Label())), other.Label())
						require.Equal(t, 1, rows("after "+other.Label()), other.Label())
						_, err := e.direct.ExecContext(ctx, "DELETE FROM "+table+" WHERE note = $1", "after "+other.Label())
						require.NoError(t, err)
					}

					// Control for the row check: a failing fn's write is rolled
					// back, and rows() sees that it is missing.
					boom := errors.New("boom")
					err := holder.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
						if err := insert("rolled back")(tx); err != nil {
							return err
						}
						return boom
					})
					require.ErrorIs(t, err, boom)
					require.Zero(t, rows("rolled back"))
				})
			}
		})
	}
}

func TestPgBouncerRefusesSessionLocks(t *testing.T) {
	for _, mode := range pgbouncerExecModes {
		t.Run(mode, func(t *testing.T) {
			e := newPgBouncerPools(t, mode)
			ctx := testdb.Context(t)
			key := testdb.Key(t)
			for _, d := range []frontdoor.Door{frontdoor.OnDB(e.db), frontdoor.OnPool(e.pool)} {
				called := false
				err := d.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error { called = true; return nil })
				require.ErrorIs(t, err, pgadvisory.ErrTransactionPooler, d.Label())
				require.False(t, called, d.Label())
				var pe *pgadvisory.Error
				require.ErrorAs(t, err, &pe, d.Label())
				require.Equal(t, pgadvisory.OpBegin, pe.Op, "%s: refused before any lock statement", d.Label())
				require.Zero(t, len(witness.Of(e.direct).Holds(t, key)), "%s left a lock on a server connection", d.Label())
			}

			// Control: connected directly, the same calls take the lock (and
			// the witness sees it) and release it.
			for _, d := range []frontdoor.Door{frontdoor.OnDB(e.direct), frontdoor.OnPool(testdb.Pool(t))} {
				err := d.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error {
					if n := len(witness.Of(e.direct).Holds(t, key)); n != 1 {
						return fmt.Errorf("pg_locks shows %d locks on the key while fn runs", n)
					}
					return nil
				})
				require.NoError(t, err, d.Label())
				require.Zero(t, len(witness.Of(e.direct).Holds(t, key)), d.Label())
			}
		})
	}
}

// TestPgBouncerBehindADirectLocker: a Locker that found its pool's
// connections direct to the server opens later shared connections without
// checking them. When the same address then leads to PgBouncer in
// transaction mode (a pooler put in front of the database), the first
// lock statement's pid guard keeps it from taking the lock on whatever
// backend PgBouncer lends, and the call is refused with
// ErrTransactionPooler; the next connection is checked again, and the
// call refused before any lock statement, as without the shortcut.
func TestPgBouncerBehindADirectLocker(t *testing.T) {
	ctx := testdb.Context(t)
	bouncer := pgcluster.StartPgBouncer(t, testdb.URL(t), "transaction") + "&default_query_exec_mode=exec"
	direct, err := pgx.ParseConfig(testdb.URL(t))
	require.NoError(t, err)
	sw := openSwitching(t, bouncer, net.JoinHostPort(direct.Host, strconv.Itoa(int(direct.Port))))
	w := witness.Of(testdb.DB(t))
	for _, d := range sw.doors() {
		t.Run(d.Label(), func(t *testing.T) {
			key := testdb.Key(t)
			sw.redirect(true) // to the server itself
			require.NoError(t, d.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error { return nil }),
				"control: direct; the check finds the pool direct")
			sw.redirect(false) // to PgBouncer, the URL's address
			for _, op := range []pgadvisory.Op{pgadvisory.OpLock, pgadvisory.OpBegin} {
				called := false
				err := d.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error { called = true; return nil })
				require.ErrorIs(t, err, pgadvisory.ErrTransactionPooler)
				require.False(t, called, "fn ran behind a transaction pooler")
				var pe *pgadvisory.Error
				require.ErrorAs(t, err, &pe)
				require.Equal(t, op, pe.Op, "unchecked: refused by the lock statement's answer; then checked: before it")
				require.Empty(t, w.Holds(t, key), "no lock left on a server connection")
			}
		})
	}
}

// switchingPools are a pgx pool and a database/sql handle on one URL whose
// new connections dial another address while redirected: a server that
// changes behind the address a service connects to.
type switchingPools struct {
	pool       *pgxpool.Pool
	db         *sql.DB
	redirected *atomic.Bool
}

// openSwitching opens switchingPools on url, redirected to addr (host:port)
// when asked, closed when t ends.
func openSwitching(t *testing.T, url, addr string) switchingPools {
	t.Helper()
	redirected := new(atomic.Bool)
	dial := func(ctx context.Context, network, to string) (net.Conn, error) {
		if redirected.Load() {
			to = addr
		}
		return (&net.Dialer{}).DialContext(ctx, network, to)
	}
	poolCfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	poolCfg.ConnConfig.DialFunc = dial
	pool, err := pgxpool.NewWithConfig(testdb.Context(t), poolCfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	connCfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	connCfg.DialFunc = dial
	db := stdlib.OpenDB(*connCfg)
	t.Cleanup(func() { _ = db.Close() })
	return switchingPools{pool: pool, db: db, redirected: redirected}
}

// doors are a front door on each of s's pools.
func (s switchingPools) doors() []frontdoor.Door {
	return []frontdoor.Door{frontdoor.OnDB(s.db), frontdoor.OnPool(s.pool)}
}

// redirect makes the pools' next connections dial the other address (on)
// or the URL's, and closes their idle connections, so that the next call
// opens one.
func (s switchingPools) redirect(on bool) {
	s.redirected.Store(on)
	s.db.SetMaxIdleConns(0)
	s.db.SetMaxIdleConns(2)
	s.pool.Reset()
}

// pgbouncerExecModes are the pgx query modes that work through PgBouncer before
// 1.21 in transaction mode. pgx's default (cache_statement) prepares named
// statements at the protocol level; PgBouncer 1.18 does not track them, so a
// statement prepared on one server connection is unknown on the next one the
// client is given, or clashes with another client's of the same name
// (observed here: "prepared statement stmtcache_… already exists", 42P05). "exec" sends each statement unnamed (Parse, Bind, Execute
// in one round trip); "simple_protocol" interpolates parameters client-side.
// The runtime must work with either, so both are tested.
var pgbouncerExecModes = []string{"exec", "simple_protocol"}

// pgbouncerPools is one test's connections: direct ones to the server, and
// database/sql and pgx pools through PgBouncer.
type pgbouncerPools struct {
	direct *sql.DB
	db     *sql.DB
	pool   *pgxpool.Pool
}

// newPgBouncerPools starts a PgBouncer in transaction mode and opens pools through it
// with the given pgx query mode.
func newPgBouncerPools(t *testing.T, execMode string) *pgbouncerPools {
	t.Helper()
	e := &pgbouncerPools{direct: testdb.DB(t)}
	url := pgcluster.StartPgBouncer(t, testdb.URL(t), "transaction") + "&default_query_exec_mode=" + execMode
	var err error
	e.db, err = sql.Open("pgx", url)
	require.NoError(t, err)
	e.db.SetMaxOpenConns(4)
	t.Cleanup(func() { _ = e.db.Close() })
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = 4
	e.pool, err = pgxpool.NewWithConfig(testdb.Context(t), cfg)
	require.NoError(t, err)
	t.Cleanup(e.pool.Close)

	// The pools really go through a pooler (the pid the server reports is
	// not the one announced at connection start), and the check is able to
	// tell: the direct connection's pids agree.
	require.True(t, behindPooler(t, e.db), "database/sql through PgBouncer")
	require.True(t, behindPoolerPgx(t, e.pool), "pgx through PgBouncer")
	require.False(t, behindPooler(t, e.direct), "direct connection")
	return e
}

// behindPooler reports whether a connection of db announced a backend pid other
// than the server's pg_backend_pid().
func behindPooler(t *testing.T, db *sql.DB) bool {
	t.Helper()
	conn, err := db.Conn(testdb.Context(t))
	require.NoError(t, err)
	defer conn.Close()
	var announced uint32
	require.NoError(t, conn.Raw(func(dc any) error {
		announced = dc.(*stdlib.Conn).Conn().PgConn().PID()
		return nil
	}))
	var pid uint32
	require.NoError(t, conn.QueryRowContext(testdb.Context(t), "SELECT pg_backend_pid()").Scan(&pid))
	return pid != announced
}

func behindPoolerPgx(t *testing.T, pool *pgxpool.Pool) bool {
	t.Helper()
	conn, err := pool.Acquire(testdb.Context(t))
	require.NoError(t, err)
	defer conn.Release()
	var pid uint32
	require.NoError(t, conn.QueryRow(testdb.Context(t), "SELECT pg_backend_pid()").Scan(&pid))
	return pid != conn.Conn().PgConn().PID()
}

// doors are the transaction-lock front doors through PgBouncer.
func (e *pgbouncerPools) doors() []frontdoor.Door {
	return []frontdoor.Door{frontdoor.OnDB(e.db), frontdoor.OnPool(e.pool)}
}
