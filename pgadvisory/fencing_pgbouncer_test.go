package pgadvisory_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Fencing through PgBouncer (1.18) in pool_mode=transaction, for both pgx
// query modes that work there: the fenced acquisition's message keeps its
// transaction open from BEGIN to fn's COMMIT, so PgBouncer keeps the server
// connection for the whole call, and a failure part-way leaves no session
// lock on a server connection PgBouncer would hand to another client (the
// front doors close their connection; PgBouncer drops a server connection
// whose client left inside a transaction). Lock state is read from pg_locks
// on a direct connection. The control shows what a client that rolled back
// and went on would leave behind.

func TestPgBouncerFencing(t *testing.T) {
	admin := migrated.DB(t)
	for _, mode := range pgbouncerExecModes {
		t.Run(mode, func(t *testing.T) {
			e := newPgBouncerPools(t, mode)
			for _, door := range e.doors() {
				t.Run(door.Label(), func(t *testing.T) {
					ctx := testdb.Context(t)
					key := testdb.Key(t)
					tbl := fencing.Table(t, admin, testdb.Schema(t), "accounts", key, "strict")
					// A fenced call through PgBouncer: the lock is held on the
					// server while fn runs, the token is published and fn's
					// writes carry it.
					var tok int64
					require.NoError(t, door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
						tok, _ = tx.FencingToken()
						if n := len(witness.Of(admin).Holds(t, key)); n != 1 {
							t.Errorf("pg_locks shows %d locks on the key while fn runs", n)
						}
						return tx.Exec(ctx, `INSERT INTO `+tbl+` (id, balance) VALUES (1, 10)`)
					}, pgadvisory.WithFencing()))
					require.Equal(t, tok, fencing.Published(t, admin, key))
					require.Equal(t, map[int64]fencing.Row{1: {Balance: 10, Token: tok}}, fencing.Rows(t, admin, tbl))

					for _, step := range fencingFailureSteps {
						t.Run(step.name, func(t *testing.T) { runFencingFailure(t, admin, door, step, nil) })
					}
				})
			}
		})
	}
}

// TestPgBouncerFencingLeakControl: a client of PgBouncer whose hand-over
// failed and that rolls back and disconnects, instead of dropping its
// connection mid-transaction, leaves the session lock on the server
// connection, which PgBouncer keeps for its next client.
func TestPgBouncerFencingLeakControl(t *testing.T) {
	admin := migrated.DB(t)
	url := pgcluster.StartPgBouncer(t, testdb.URL(t), "transaction") + "&default_query_exec_mode=simple_protocol"
	ctx := testdb.Context(t)
	key := testdb.Key(t)
	breakHandover(t, admin, key)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `BEGIN`)
	require.NoError(t, err)
	var granted bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT granted FROM pgadvisory.fence_acquire(ARRAY[$1]::bigint[], false, NULL, '5000ms')`, key).Scan(&granted))
	require.True(t, granted)
	_, err = conn.Exec(ctx, `COMMIT AND CHAIN`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SELECT pgadvisory.fence_handover()`)
	sqlstate.Require(t, err, "22P02")
	_, err = conn.Exec(ctx, `ROLLBACK`)
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))

	w := witness.Of(admin)
	time.Sleep(100 * time.Millisecond)
	holds := w.Holds(t, key)
	require.Len(t, holds, 1, "the session lock stays on PgBouncer's server connection")
	t.Cleanup(func() {
		_, _ = admin.ExecContext(context.Background(), `SELECT pg_terminate_backend($1)`, holds[0].PID)
	})
	// The next client that gets that server connection holds the key
	// without having asked for it: an unfenced call is refused meanwhile.
	require.ErrorIs(t, frontdoor.OnDB(admin).RunExclusive(ctx, key, func(frontdoor.Tx) error { return nil }), pgadvisory.ErrLocked)
}
