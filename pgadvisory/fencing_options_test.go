package pgadvisory_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/wirecount"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Options that cannot go with fencing are refused with ErrInvalidArgument
// before anything is sent: WithShared (shared holders would each publish
// over the others, and the first, still holding its lock, would be told it
// lost it) and a read-only transaction (the publish is a write; it used to
// fail with an untyped 25006 after a wasted round trip). The wire counter
// shows no round trip; no token is drawn. Controls: each option alone
// works.

func TestFencingRefusesSharedAndReadOnly(t *testing.T) {
	admin := migrated.DB(t)
	ctx := context.Background()
	c := wirecount.New()
	doors := []frontdoor.Door{frontdoor.OnPool(countedPool(t, c)), frontdoor.OnDB(countedDB(t, c))}
	refused := map[string][]pgadvisory.Option{
		"WithShared":       {pgadvisory.WithFencing(), pgadvisory.WithShared()},
		"shared first":     {pgadvisory.WithShared(), pgadvisory.WithFencing()},
		"WithTxOptions":    {pgadvisory.WithFencing(), pgadvisory.WithTxOptions(sql.TxOptions{ReadOnly: true})},
		"WithPgxTxOptions": {pgadvisory.WithPgxTxOptions(pgx.TxOptions{AccessMode: pgx.ReadOnly}), pgadvisory.WithFencing()},
	}
	for _, door := range doors {
		for name, opts := range refused {
			t.Run(door.Label()+"/"+name, func(t *testing.T) {
				key := testdb.Key(t)
				seq := fencing.LastToken(t, admin)
				before := c.RoundTrips()
				ran := false
				err := door.RunExclusive(ctx, key, func(frontdoor.Tx) error { ran = true; return nil }, opts...)
				require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument)
				var pe *pgadvisory.Error
				require.ErrorAs(t, err, &pe)
				require.Equal(t, pgadvisory.OpOptions, pe.Op)
				require.ErrorContains(t, err, "WithFencing")
				require.Zero(t, c.RoundTrips()-before, "refused before any round trip")
				require.False(t, ran)
				require.Equal(t, seq, fencing.LastToken(t, admin), "no token drawn")
				// Through a Lock's declared defaults too.
				l := pgadvisory.Lock{Name: "tests.fenced", ID: key}.With(opts[0])
				err = door.RunExclusiveLock(ctx, l, func(frontdoor.Tx) error { ran = true; return nil }, opts[1:]...)
				require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument)
				require.False(t, ran)

				// CONTROL: each option alone is fine.
				for _, opt := range opts {
					require.NoError(t, door.RunExclusive(ctx, key, func(frontdoor.Tx) error { ran = true; return nil }, opt))
				}
				require.True(t, ran)
			})
		}
	}
}
