package pgadvisory

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// TestCommitSentPgxRefusedUnderInterruptedContext: pgx refuses a COMMIT
// whose context (the call's txContext) is already done without writing it,
// and commitSent must say so: nothing was committed, not an unknown outcome.
// The error is pgx's own, from a real connection; fn ending the caller's
// context just before COMMIT reaches this only in a narrow race, so the
// stories cannot pin it. The control is pgx's "conn closed", also safe to
// retry but without txContext's error: it may come after COMMIT was sent.
func TestCommitSentPgxRefusedUnderInterruptedContext(t *testing.T) {
	ctx := testdb.Context(t)
	conn, err := pgx.Connect(ctx, testdb.URL(t))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "BEGIN")
	require.NoError(t, err)

	caller, cancel := context.WithCancel(ctx)
	tctx := newTxContext(caller)
	defer tctx.release()
	stop := tctx.link(caller)
	cancel()
	<-tctx.Done()
	require.True(t, stop(), "the link saw the caller's context end")

	_, err = conn.Exec(tctx, "COMMIT")
	require.Error(t, err)
	require.True(t, pgconn.SafeToRetry(err), "pgx marks a statement it never wrote: %v", err)
	require.ErrorIs(t, err, errInterrupted)
	require.False(t, commitSent(err), "a COMMIT pgx never wrote was not sent: %v", err)

	// The transaction is still open on the server: nothing was committed.
	require.Equal(t, byte('T'), conn.PgConn().TxStatus(), "the server still reports the transaction open")
	var one int
	require.NoError(t, conn.QueryRow(ctx, "SELECT 1").Scan(&one), "the connection still answers")

	// Control: safe to retry, but not txContext's interruption.
	closed := conn.PgConn()
	require.NoError(t, closed.Close(ctx))
	_, err = conn.Exec(ctx, "COMMIT")
	require.Error(t, err)
	require.False(t, errors.Is(err, errInterrupted))
	require.True(t, commitSent(err), "a failure that may follow COMMIT's write leaves the outcome unknown: %v", err)
}
