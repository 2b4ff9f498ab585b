package pgadvisory_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// database/sql drivers other than pgx's stdlib (lib/pq, say) get the fenced
// acquisition as one simple-protocol query with its arguments inlined,
// since pgadvisory cannot reach their connection. pgx's stdlib, hidden
// behind a driver that does not expose its *pgx.Conn and told to send
// queries without parameters over the simple protocol (as lib/pq does),
// stands in for them: the fenced call works, publishes, and writes; a
// failure of the message (the publish, or the hand-over after the publish
// committed) leaves no lock and no connection behind.

func TestFencingOtherDatabaseSQLDrivers(t *testing.T) {
	admin := migrated.DB(t)
	app := fmt.Sprintf("fencing-other-driver-%d", testdb.Key(t))
	cfg, err := pgx.ParseConfig(testdb.URL(t))
	require.NoError(t, err)
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	cfg.RuntimeParams["application_name"] = app
	db := sql.OpenDB(hiddenPgxConnector{stdlib.GetConnector(*cfg)})
	db.SetMaxOpenConns(2)
	t.Cleanup(func() { _ = db.Close() })
	door := frontdoor.OnDB(db)
	ctx := testdb.Context(t)
	w := witness.Of(admin)

	key := testdb.Key(t)
	tbl := fencing.Table(t, admin, testdb.Schema(t), "accounts", key, "strict")
	tok := fencing.Holder(t, ctx, door, key, func(tx frontdoor.Tx) error {
		return tx.Exec(ctx, `INSERT INTO `+tbl+` (id, balance) VALUES (1, 10)`)
	})
	require.Equal(t, tok, fencing.Published(t, admin, key))
	require.Equal(t, map[int64]fencing.Row{1: {Balance: 10, Token: tok}}, fencing.Rows(t, admin, tbl))

	// Waiting fenced calls queue (pgadvisory.fence_wait_try in the same
	// one query), on a pool of 2: three queue behind a holder, run in
	// arrival order with growing published tokens, and each hand-over
	// removes its call's row.
	queued := testdb.Key(t)
	release := holdSession(t, admin, queued)
	order, tokens, done := queueFencedWaiters(t, ctx, door, admin, queued, 3, pgadvisory.WithFencing())
	release()
	for range 3 {
		require.NoError(t, frontdoor.Await(t, done, "a queued fenced call"))
	}
	require.Equal(t, []int{0, 1, 2}, order())
	require.True(t, slices.IsSorted(tokens()) && tokens()[0] > tok, "tokens %v after %d", tokens(), tok)
	require.Zero(t, queueRows(t, admin, queued), "the queue is empty")

	for name, arrange := range map[string]func(key int64) (code string){
		"publish_behind": func(key int64) string { fencing.PublishAhead(t, admin, key); return "LF004" },
		"failing_handover": func(key int64) string {
			breakHandover(t, admin, key)
			return "22P02"
		},
	} {
		t.Run(name, func(t *testing.T) {
			key := testdb.Key(t)
			code := arrange(key)
			db.SetMaxIdleConns(0) // no idle connection: the one that ran the message is the only one
			db.SetMaxIdleConns(2)
			ran := false
			err := door.RunExclusive(ctx, key, func(frontdoor.Tx) error { ran = true; return nil }, pgadvisory.WithFencing())
			sqlstate.Require(t, err, code)
			require.False(t, ran)
			require.Eventually(t, func() bool { return len(w.Holds(t, key)) == 0 && backendsNamed(t, admin, app) == 0 },
				30*time.Second, 10*time.Millisecond, "no lock and no connection left behind")
		})
	}
}

// hiddenPgxConnector opens pgx stdlib connections that do not expose their
// *pgx.Conn, as any other database/sql driver's connections do not.
type hiddenPgxConnector struct{ c driver.Connector }

func (h hiddenPgxConnector) Connect(ctx context.Context) (driver.Conn, error) {
	c, err := h.c.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return hiddenPgxConn{c.(*stdlib.Conn)}, nil
}

func (h hiddenPgxConnector) Driver() driver.Driver { return h.c.Driver() }

// hiddenPgxConn forwards what database/sql uses, and nothing else.
type hiddenPgxConn struct{ c *stdlib.Conn }

func (h hiddenPgxConn) Prepare(query string) (driver.Stmt, error) { return h.c.Prepare(query) }
func (h hiddenPgxConn) Close() error                              { return h.c.Close() }
func (h hiddenPgxConn) Begin() (driver.Tx, error)                 { return h.c.Begin() } //nolint:staticcheck // driver.Conn requires it
func (h hiddenPgxConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return h.c.BeginTx(ctx, opts)
}
func (h hiddenPgxConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	return h.c.QueryContext(ctx, query, args)
}
func (h hiddenPgxConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	return h.c.ExecContext(ctx, query, args)
}
func (h hiddenPgxConn) CheckNamedValue(nv *driver.NamedValue) error { return h.c.CheckNamedValue(nv) }
func (h hiddenPgxConn) ResetSession(ctx context.Context) error      { return h.c.ResetSession(ctx) }
func (h hiddenPgxConn) Ping(ctx context.Context) error              { return h.c.Ping(ctx) }
