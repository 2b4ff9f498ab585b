package pgadvisory_test

import (
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// A fenced lock transaction's token belongs to the Locker whose call began
// it: that Locker's FencingToken finds it, another Locker on the same pool
// does not, and the package-level FencingToken (deprecated) finds the
// tokens of the package-level functions' calls only (on both drivers).
func TestFencingTokenBelongsToItsLocker(t *testing.T) {
	migrated.DB(t)
	ctx := testdb.Context(t)
	db, pool := testdb.DB(t), testdb.Pool(t)
	key := testdb.Key(t)
	mine, err := pgadvisory.New(pgadvisory.Stdlib(db))
	require.NoError(t, err)
	another, err := pgadvisory.New(pgadvisory.Stdlib(db))
	require.NoError(t, err)

	require.NoError(t, mine.RunExclusive(ctx, pgadvisory.ID(key), func(tx *sql.Tx) error {
		token, ok := mine.FencingToken(tx)
		require.True(t, ok, "control: the call's own Locker knows the token")
		require.Positive(t, token)
		_, ok = another.FencingToken(tx)
		require.False(t, ok, "another Locker does not")
		_, ok = pgadvisory.FencingToken(tx)
		require.False(t, ok, "nor does the package-level FencingToken")
		return nil
	}, pgadvisory.WithFencing()))

	require.NoError(t, pgadvisory.RunExclusive(ctx, db, key, func(tx *sql.Tx) error {
		token, ok := pgadvisory.FencingToken(tx)
		require.True(t, ok, "the package-level function's token")
		require.Positive(t, token)
		_, ok = mine.FencingToken(tx)
		require.False(t, ok)
		return nil
	}, pgadvisory.WithFencing()))
	require.NoError(t, pgadvisory.RunExclusivePgx(ctx, pool, key, func(tx pgx.Tx) error {
		token, ok := pgadvisory.FencingTokenPgx(tx)
		require.True(t, ok, "the package-level function's token (pgx)")
		require.Positive(t, token)
		return nil
	}, pgadvisory.WithFencing()))
}
