package pgadvisory_test

import (
	"context"
	"testing"

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

// TestLeadRefusedBehindTransactionPooler: behind PgBouncer in transaction
// mode, Lead and Campaign are refused with ErrTransactionPooler before any
// lock or term (the lock would follow the server connection to other
// clients, and so would the leadership). Control: connected directly, the
// same calls lead.
func TestLeadRefusedBehindTransactionPooler(t *testing.T) {
	admin := migrated.DB(t)
	w := witness.Of(admin)
	for _, mode := range pgbouncerExecModes {
		t.Run(mode, func(t *testing.T) {
			e := newPgBouncerPools(t, mode)
			ctx := testdb.Context(t) // a refusal that breaks makes Campaign wait: the deadline names this test
			key := testdb.Key(t)
			for _, d := range []frontdoor.Door{frontdoor.OnDB(e.db), frontdoor.OnPool(e.pool)} {
				err := d.Lead(ctx, pgadvisory.ID(key), notCalledLead(t))
				sqlstate.RequireTyped(t, err, pgadvisory.ErrTransactionPooler, "begin", "", d.Label())
				require.ErrorIs(t, d.Campaign(ctx, pgadvisory.ID(key), notCalledLead(t)), pgadvisory.ErrTransactionPooler, "%s: Campaign gives up at once", d.Label())
				require.Empty(t, w.Holds(t, key), d.Label())
				require.Zero(t, fencing.Published(t, admin, key), "%s: no term was published", d.Label())
			}
			for _, d := range []frontdoor.Door{frontdoor.OnDB(e.direct), frontdoor.OnPool(testdb.Pool(t))} {
				require.NoError(t, d.Lead(ctx, pgadvisory.ID(key), func(ctx context.Context, term int64) error {
					w.Holder(t, key)
					return nil
				}), d.Label())
			}
		})
	}
}

// TestLeadThroughDeclaredSessionPooler: behind PgBouncer in session mode,
// declared with WithSessionPooler, a leadership is elected and excludes
// the other candidates, through the pooler or not.
func TestLeadThroughDeclaredSessionPooler(t *testing.T) {
	admin := migrated.DB(t)
	w := witness.Of(admin)
	url := pgcluster.StartPgBouncer(t, testdb.URL(t), "session")
	declared := pgadvisory.WithSessionPooler()
	for _, d := range frontdoor.OpenAll(t, frontdoor.URL(url), frontdoor.MaxConns(2)) {
		t.Run(d.Label(), func(t *testing.T) {
			ctx := testdb.Context(t)
			key := testdb.Key(t)
			sqlstate.RequireTyped(t, d.Lead(ctx, pgadvisory.ID(key), notCalledLead(t)), pgadvisory.ErrTransactionPooler, "begin", "", "not declared")
			require.NoError(t, d.Lead(ctx, pgadvisory.ID(key), func(ctx context.Context, term int64) error {
				require.Equal(t, term, fencing.Published(t, admin, key))
				leader, err := pgadvisory.CurrentLeader(ctx, admin, key)
				require.NoError(t, err)
				require.EqualValues(t, w.Holder(t, key).PID, leader.PID)
				direct := frontdoor.OnDB(admin)
				require.ErrorIs(t, direct.Lead(ctx, pgadvisory.ID(key), notCalledLead(t), pgadvisory.WithWait(1)), pgadvisory.ErrLockTimeout)
				return nil
			}, declared))
			require.Empty(t, w.Holds(t, key))

			// The same declaration for a whole Locker: WithSessionModePooler.
			pooled := d.WithLocker(pgadvisory.WithSessionModePooler())
			require.NoError(t, pooled.Lead(ctx, pgadvisory.ID(key), func(ctx context.Context, term int64) error {
				require.Equal(t, term, fencing.Published(t, admin, key))
				return nil
			}))
			require.NoError(t, pooled.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error { return nil }))
			require.Empty(t, w.Holds(t, key))
		})
	}
}

// notCalledLead is a leader's fn that must not run.
func notCalledLead(t *testing.T) func(context.Context, int64) error {
	return func(context.Context, int64) error {
		t.Error("fn ran")
		return nil
	}
}
