package pgadvisory_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/generatedlocks"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/wirecount"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Options that do not apply to a call, and combinations that cannot work,
// are refused with ErrInvalidArgument (Op "options") before any round trip,
// whether passed to the call or declared with the lock (Lock.With, as
// generated from locks.yaml); the message names the option and where it
// came from. The control: the same options on the calls they apply to are
// accepted.

func TestOptionRefusals(t *testing.T) {
	migrated.DB(t)
	c := wirecount.New()
	doors := []frontdoor.Door{frontdoor.OnDB(countedDB(t, c)), frontdoor.OnPool(countedPool(t, c))}
	readOnlySQL := pgadvisory.WithTxOptions(sql.TxOptions{ReadOnly: true})
	readOnlyPgx := pgadvisory.WithPgxTxOptions(pgx.TxOptions{AccessMode: pgx.ReadOnly})
	noopTx := func(frontdoor.Tx) error { return nil }
	noopSession := func(context.Context) error { return nil }
	type call func(ctx context.Context, d frontdoor.Door, l pgadvisory.Lock, opts ...pgadvisory.Option) error
	exclusive := func(ctx context.Context, d frontdoor.Door, l pgadvisory.Lock, opts ...pgadvisory.Option) error {
		return d.RunExclusiveLock(ctx, l, noopTx, opts...)
	}
	once := func(ctx context.Context, d frontdoor.Door, l pgadvisory.Lock, opts ...pgadvisory.Option) error {
		return d.RunOnceLock(ctx, l, "refusal-window", noopTx, opts...)
	}
	session := func(ctx context.Context, d frontdoor.Door, l pgadvisory.Lock, opts ...pgadvisory.Option) error {
		return d.RunSession(ctx, l, noopSession, opts...)
	}
	for _, tc := range []struct {
		name     string
		call     call
		declared []pgadvisory.Option // Lock.With
		opts     []pgadvisory.Option // the call's
		says     []string
	}{
		{"RunOnce+WithShared", once, nil, []pgadvisory.Option{pgadvisory.WithShared()}, []string{"WithShared does not apply to RunOnce", "two shared holders would both run fn"}},
		{"RunOnce+declared shared", once, []pgadvisory.Option{pgadvisory.WithShared()}, nil, []string{"WithShared (declared with the lock", "does not apply to RunOnce"}},
		{"RunOnce+read-only", once, nil, []pgadvisory.Option{readOnlySQL}, []string{"RunOnce in a read-only transaction (WithTxOptions)", "claim of the window is a write"}},
		{"RunOnce+read-only pgx", once, nil, []pgadvisory.Option{readOnlyPgx}, []string{"RunOnce in a read-only transaction (WithPgxTxOptions)"}},
		{"RunOnce+declared read-only", once, []pgadvisory.Option{readOnlySQL}, nil, []string{"WithTxOptions (declared with the lock"}},
		{"RunExclusive+WithHolder", exclusive, nil, []pgadvisory.Option{pgadvisory.WithHolder("me")}, []string{"WithHolder does not apply to RunExclusive"}},
		{"RunExclusive+WithCheckInterval", exclusive, nil, []pgadvisory.Option{pgadvisory.WithCheckInterval(time.Second)}, []string{"WithCheckInterval does not apply to RunExclusive"}},
		{"RunOnce+WithCheckInterval", once, nil, []pgadvisory.Option{pgadvisory.WithCheckInterval(time.Second)}, []string{"WithCheckInterval does not apply to RunOnce"}},
		{"RunExclusive+WithCheckTimeout", exclusive, nil, []pgadvisory.Option{pgadvisory.WithCheckTimeout(time.Second)}, []string{"WithCheckTimeout does not apply to RunExclusive"}},
		{"RunOnce+WithSessionPooler", once, nil, []pgadvisory.Option{pgadvisory.WithSessionPooler()}, []string{"WithSessionPooler does not apply to RunOnce"}},
		{"RunSession+WithTxOptions", session, nil, []pgadvisory.Option{pgadvisory.WithTxOptions(sql.TxOptions{})}, []string{"WithTxOptions does not apply to RunSession"}},
		{"RunSession+WithPgxTxOptions", session, nil, []pgadvisory.Option{pgadvisory.WithPgxTxOptions(pgx.TxOptions{})}, []string{"WithPgxTxOptions does not apply to RunSession"}},
		{"RunSession+WithHolder", session, nil, []pgadvisory.Option{pgadvisory.WithHolder("me")}, []string{"WithHolder does not apply to RunSession"}},
		{"RunSession+WithFencing", session, nil, []pgadvisory.Option{pgadvisory.WithFencing()}, []string{"WithFencing does not apply to RunSession"}},
		{"RunSession+declared fencing", session, []pgadvisory.Option{pgadvisory.WithFencing()}, nil, []string{"WithFencing (declared with the lock"}},
		{"both tx options", exclusive, nil, []pgadvisory.Option{pgadvisory.WithTxOptions(sql.TxOptions{}), pgadvisory.WithPgxTxOptions(pgx.TxOptions{})}, []string{"both WithTxOptions and WithPgxTxOptions"}},
		{"both tx options, one declared", once, []pgadvisory.Option{pgadvisory.WithPgxTxOptions(pgx.TxOptions{})}, []pgadvisory.Option{pgadvisory.WithTxOptions(sql.TxOptions{})}, []string{"both WithTxOptions and WithPgxTxOptions (declared with the lock"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, d := range doors {
				ctx := testdb.Context(t)
				l := pgadvisory.Lock{Name: "reports.refused", ID: testdb.Key(t)}
				if tc.declared != nil {
					l = l.With(tc.declared...)
				}
				before := c.RoundTrips()
				err := tc.call(ctx, d, l, tc.opts...)
				require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument, d.Label())
				var pe *pgadvisory.Error
				require.ErrorAs(t, err, &pe)
				require.Equal(t, pgadvisory.OpOptions, pe.Op)
				for _, s := range tc.says {
					require.Contains(t, err.Error(), s, d.Label())
				}
				require.Equal(t, 1, strings.Count(err.Error(), "pgadvisory: "), "one prefix: %v", err)
				require.Zero(t, c.RoundTrips()-before, "%s: refused before any round trip", d.Label())
			}
		})
	}

	// CONTROL: each option on a call it applies to is accepted.
	t.Run("control", func(t *testing.T) {
		for _, d := range doors {
			ctx := testdb.Context(t)
			l := pgadvisory.Lock{Name: "reports.accepted", ID: testdb.Key(t)}
			require.NoError(t, once(ctx, d, l, pgadvisory.WithHolder("me")), d.Label())
			require.NoError(t, exclusive(ctx, d, l, pgadvisory.WithShared(), readOnlySQL), d.Label())
			require.NoError(t, exclusive(ctx, d, l, readOnlyPgx), d.Label())
			require.NoError(t, session(ctx, d, l, pgadvisory.WithShared(), pgadvisory.WithCheckInterval(time.Second),
				pgadvisory.WithCheckTimeout(time.Second), pgadvisory.WithSessionPooler()), d.Label())
			require.NoError(t, session(ctx, d, l.With(pgadvisory.WithShared(), pgadvisory.WithWait(time.Second))), d.Label())
		}
	})
}

// TestGeneratedLockRefusals: a lock generated from locks.yaml with shared:
// true cannot RunOnce; the refusal says the option was declared with it.
func TestGeneratedLockRefusals(t *testing.T) {
	frontdoor.ForEach(t, func(t *testing.T, d frontdoor.Door) {
		ctx := testdb.Context(t)
		err := d.RunOnceLock(ctx, generatedlocks.ReportsRebuildIndex, "2026-12-02", func(frontdoor.Tx) error {
			t.Error("fn called")
			return nil
		})
		require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument)
		require.Contains(t, err.Error(), "WithShared (declared with the lock reports.rebuild_index: Lock.With or locks.yaml) does not apply to RunOnce")
		// CONTROL: the same lock runs RunExclusive.
		require.NoError(t, d.RunExclusiveLock(ctx, generatedlocks.ReportsRebuildIndex, func(frontdoor.Tx) error { return nil }))
	}, frontdoor.MaxConns(2))
}
