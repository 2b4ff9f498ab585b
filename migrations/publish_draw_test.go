package migrations_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// An election or a fenced acquisition that gives up waiting for writers of
// the previous token (55P03) draws no value from
// pgadvisory.fencing_token_seq: a sequence is not transactional, so a value
// drawn before the wait stays used up, and callers that retry would burn a
// term per try. currval is the observer: it is per session, so other tests
// drawing tokens at the same time do not disturb it, and it fails with
// 55000 in a session that never drew a value.

// drewToken reports whether the session of c drew a value from the
// sequence, and the last one it drew.
func drewToken(t *testing.T, ctx context.Context, c *sql.Conn) (bool, int64) {
	t.Helper()
	var v int64
	err := c.QueryRowContext(ctx, `SELECT currval('pgadvisory.fencing_token_seq')`).Scan(&v)
	if err != nil {
		sqlstate.Require(t, err, "55000")
		return false, 0
	}
	return true, v
}

// oldTokenWriter opens a transaction that writes with token for key: it
// holds the key's fence row FOR SHARE until it ends (rolled back when t
// ends, if the test has not ended it).
func oldTokenWriter(t *testing.T, ctx context.Context, db *sql.DB, key, token int64) *sql.Tx {
	t.Helper()
	writer, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = writer.Rollback() })
	_, err = writer.ExecContext(ctx, `SELECT pgadvisory.fence_require_current($1, $2, NULL, NULL)`, key, token)
	require.NoError(t, err)
	return writer
}

// TestLeaderElectGivingUpDrawsNoTerm: while a writer of the published
// token holds the fence row FOR SHARE, leader_elect fails with 55P03 after
// its publish timeout and its session drew no term, on every try; once the
// writer ends, the election draws exactly one term and publishes it.
func TestLeaderElectGivingUpDrawsNoTerm(t *testing.T) {
	db := migrated.DB(t)
	ctx := testdb.Context(t)
	key := testdb.Key(t)
	old := fencing.Publish(t, db, key)

	writer := oldTokenWriter(t, ctx, db, key, old)

	holder := conn(t, db)
	_, err := holder.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, key)
	require.NoError(t, err)
	var term int64
	for range 3 {
		err = holder.QueryRowContext(ctx, `SELECT term FROM pgadvisory.leader_elect($1, 'h', '50ms')`, key).Scan(&term)
		sqlstate.Require(t, err, "55P03")
		drew, v := drewToken(t, ctx, holder)
		require.False(t, drew, "a failed election drew term %d", v)
	}
	require.Equal(t, old, fencing.Published(t, db, key))

	// Control: the election after the writer draws its term.
	require.NoError(t, writer.Rollback())
	require.NoError(t, holder.QueryRowContext(ctx, `SELECT term FROM pgadvisory.leader_elect($1, 'h', '50ms')`, key).Scan(&term))
	drew, v := drewToken(t, ctx, holder)
	require.True(t, drew)
	require.Equal(t, term, v)
	require.Equal(t, term, fencing.Published(t, db, key))
	require.Greater(t, term, old)
}

// TestLeaderElectFirstTermWithoutFenceRow: a lock that never published
// (no fence row) elects a leader, whose term becomes the lock's token.
func TestLeaderElectFirstTermWithoutFenceRow(t *testing.T) {
	db := migrated.DB(t)
	ctx := testdb.Context(t)
	key := testdb.Key(t)
	var rows int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM pgadvisory.fence WHERE lock_id = $1`, key).Scan(&rows))
	require.Zero(t, rows)

	holder := conn(t, db)
	_, err := holder.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, key)
	require.NoError(t, err)
	var term int64
	require.NoError(t, holder.QueryRowContext(ctx, `SELECT term FROM pgadvisory.leader_elect($1, 'h', '50ms')`, key).Scan(&term))
	require.Equal(t, term, fencing.Published(t, db, key))
}

// TestFenceAcquireGivingUpDrawsNoToken: fence_acquire's publish that gives
// up waiting for a writer of the previous token (55P03) drew no token, for
// a set of locks too; the control, after the writer, draws the token it
// publishes.
func TestFenceAcquireGivingUpDrawsNoToken(t *testing.T) {
	db := migrated.DB(t)
	ctx := testdb.Context(t)
	free, key := testdb.Key(t), testdb.Key(t)
	old := fencing.Publish(t, db, key)

	writer := oldTokenWriter(t, ctx, db, key, old)

	c := conn(t, db)
	acquire := func() (int64, error) {
		tx, err := c.BeginTx(ctx, nil)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }()
		var token sql.NullInt64
		err = tx.QueryRowContext(ctx, `SELECT token FROM pgadvisory.fence_acquire(ARRAY[$1, $2]::bigint[], false, NULL, '50ms')`, free, key).Scan(&token)
		if err != nil {
			return 0, err
		}
		require.NoError(t, tx.Commit())
		return token.Int64, nil
	}
	for range 3 {
		_, err := acquire()
		e := sqlstate.Require(t, err, codeLockTimeout)
		require.Contains(t, e.Message, "waited 50ms for writes still in flight with the previous token")
		drew, v := drewToken(t, ctx, c)
		require.False(t, drew, "a failed acquisition drew token %d", v)
	}
	require.Equal(t, old, fencing.Published(t, db, key))

	require.NoError(t, writer.Rollback())
	token, err := acquire()
	require.NoError(t, err)
	drew, v := drewToken(t, ctx, c)
	require.True(t, drew)
	require.Equal(t, token, v)
	require.Equal(t, token, fencing.Published(t, db, key))
	require.Equal(t, token, fencing.Published(t, db, free))
	_, err = c.ExecContext(ctx, `SELECT pg_advisory_unlock_all()`)
	require.NoError(t, err)
}

// TestLeaseAcquireGivingUpDrawsNoTerm: lease_acquire, whose term is an
// election's (leader_elect), fails with 55P03 while a writer of the
// published token is in flight and draws no term; the control, after the
// writer, draws the term it returns.
func TestLeaseAcquireGivingUpDrawsNoTerm(t *testing.T) {
	db := migrated.DB(t)
	ctx := testdb.Context(t)
	key := testdb.Key(t)
	old := fencing.Publish(t, db, key)

	writer := oldTokenWriter(t, ctx, db, key, old)

	c := conn(t, db)
	const acquire = `SELECT pgadvisory.lease_acquire($1, 'h', gen_random_uuid(), '1 minute', '50ms')`
	var term sql.NullInt64
	for range 3 {
		err := c.QueryRowContext(ctx, acquire, key).Scan(&term)
		sqlstate.Require(t, err, codeLockTimeout)
		drew, v := drewToken(t, ctx, c)
		require.False(t, drew, "a failed lease acquisition drew term %d", v)
	}

	require.NoError(t, writer.Rollback())
	require.NoError(t, c.QueryRowContext(ctx, acquire, key).Scan(&term))
	require.True(t, term.Valid)
	drew, v := drewToken(t, ctx, c)
	require.True(t, drew)
	require.Equal(t, term.Int64, v)
	require.Equal(t, term.Int64, fencing.Published(t, db, key))
}
