package pgadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestLeadOldTermWriterBurnsNoTerms: a writer of the previous term keeps
// its transaction open (holding the fence row FOR SHARE, as RunFenced does)
// several times longer than the election's publish bound while a candidate
// calls Lead again and again, on a shared connection (whose election waits
// in short turns and tries again) and on a connection of its own. Every
// try before the writer commits fails with ErrLockTimeout; the election
// after it draws the previous term + 1: the sequence advanced by exactly
// one over the whole episode. The database is the test's own, so no other
// test draws from its sequence.
func TestLeadOldTermWriterBurnsNoTerms(t *testing.T) {
	_, url := testdb.EmptyDatabase(t)
	admin, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	ctx := testdb.Context(t)
	require.NoError(t, pgadvisory.Migrate(ctx, admin))
	_, err = admin.ExecContext(ctx, `CREATE SCHEMA burn`)
	require.NoError(t, err)
	lastValue := func() int64 {
		t.Helper()
		var v int64
		require.NoError(t, admin.QueryRowContext(ctx, `SELECT pg_sequence_last_value('pgadvisory.fencing_token_seq')`).Scan(&v))
		return v
	}

	frontdoor.ForEachDriver(t, func(t *testing.T, drv frontdoor.Driver) {
		for _, mode := range []struct {
			name  string
			conns int
		}{{"shared", 1}, {"dedicated", 0}} {
			t.Run(mode.name, func(t *testing.T) {
				key := testdb.Key(t)
				table := fencing.Table(t, admin, "burn", fmt.Sprintf("w_%s_%s", map[frontdoor.Driver]string{frontdoor.SQL: "sql", frontdoor.Pgx: "pgx"}[drv], mode.name), key, "strict")
				d := frontdoor.Open(t, drv, frontdoor.URL(url), frontdoor.MaxConns(4)).WithLocker(pgadvisory.WithSessionConns(mode.conns))
				writers := frontdoor.Open(t, drv, frontdoor.URL(url), frontdoor.MaxConns(2))

				// The previous leader, whose write is still in flight.
				var oldTerm int64
				require.NoError(t, writers.Lead(ctx, pgadvisory.ID(key), func(_ context.Context, term int64) error { oldTerm = term; return nil }))
				_, release, done := fencing.OpenWriter(t, ctx, writers, table, oldTerm, 1)
				require.Equal(t, oldTerm, lastValue())

				// The publish bound is 4/5 of the check timeout: 400ms. The
				// writer stays open 2s.
				const checkTimeout = 500 * time.Millisecond
				open := time.AfterFunc(2*time.Second, release)
				defer open.Stop()
				var failed int
				var term int64
				for {
					err := d.Lead(ctx, pgadvisory.ID(key), func(_ context.Context, tm int64) error { term = tm; return nil },
						pgadvisory.WithCheckTimeout(checkTimeout))
					if errors.Is(err, pgadvisory.ErrLockTimeout) {
						failed++
						continue
					}
					require.NoError(t, err)
					break
				}
				require.NoError(t, frontdoor.Await(t, done, "the previous term's write"))
				t.Logf("%d elections gave up while the writer was open; sequence %d -> %d", failed, oldTerm, lastValue())
				require.GreaterOrEqual(t, failed, 2, "the writer outlived several publish bounds")
				require.Equal(t, oldTerm+1, term, "the new leader's term is the previous term + 1")
				require.Equal(t, oldTerm+1, lastValue(), "no term was drawn by an election that gave up")
			})
		}
	})
}
