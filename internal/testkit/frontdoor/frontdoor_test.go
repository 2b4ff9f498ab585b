package frontdoor_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// TestDoorsReachTheirDriver: each door runs its own driver's entry points,
// hands fn a working Tx, and the label says which door it is.
func TestDoorsReachTheirDriver(t *testing.T) {
	var labels []string
	frontdoor.ForEach(t, func(t *testing.T, d frontdoor.Door) {
		labels = append(labels, d.Label())
		require.Equal(t, d.Driver == frontdoor.SQL, d.DB() != nil)
		require.Equal(t, d.Driver == frontdoor.Pgx, d.Pool() != nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		key := testdb.Key(t)

		require.NoError(t, d.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
			n, err := tx.ExecCount(ctx, "SELECT 1 FROM generate_series(1, 3)")
			require.NoError(t, err)
			require.EqualValues(t, 3, n)
			held, err := tx.QueryInt(ctx, `SELECT count(*) FROM pg_catalog.pg_locks
				WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
				  AND ((classid::bigint << 32) | objid::bigint) = $1`, key)
			require.NoError(t, err)
			require.EqualValues(t, 1, held, "fn runs in the lock's transaction")
			var level string
			require.NoError(t, tx.QueryRow(ctx, "SELECT current_setting('transaction_isolation')").Scan(&level))
			require.Equal(t, "read committed", level)
			_, ok := tx.FencingToken()
			require.False(t, ok)
			return tx.Exec(ctx, "SELECT 1")
		}))

		release := d.Hold(t, key, nil)
		called := false
		other := frontdoor.Open(t, d.Driver, frontdoor.MaxConns(1))
		require.ErrorIs(t, other.RunExclusive(ctx, key, func(frontdoor.Tx) error { called = true; return nil }), pgadvisory.ErrLocked)
		require.ErrorIs(t, other.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error { called = true; return nil }), pgadvisory.ErrLocked)
		require.False(t, called)
		require.NoError(t, release())
		require.NoError(t, other.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error { called = true; return nil }))
		require.True(t, called)

		require.Zero(t, other.InUse())
		put := other.Checkout(t)
		require.Equal(t, 1, other.InUse())
		put()
		require.True(t, other.Idle())
	}, frontdoor.MaxConns(2))
	require.Equal(t, []string{"database/sql", "pgx"}, labels)
}

// TestOpenOptions: settings and the pool size reach the pool.
func TestOpenOptions(t *testing.T) {
	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		d := frontdoor.Open(t, drv, frontdoor.MaxConns(1),
			frontdoor.Settings(map[string]string{"application_name": "frontdoor-test"}))
		var app string
		require.NoError(t, d.RunExclusive(ctx, testdb.Key(t), func(tx frontdoor.Tx) error {
			require.Equal(t, 1, d.InUse(), "the pool's only connection")
			return tx.QueryRow(ctx, "SELECT current_setting('application_name')").Scan(&app)
		}))
		require.Equal(t, "frontdoor-test", app)
	})
	require.Panics(t, func() {
		frontdoor.OnDB(nil).WithWrites(frontdoor.OnPool(nil))
	}, "writes through the other driver")
}
