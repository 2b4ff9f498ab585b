package pgadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Fencing tokens: they increase across holders, are visible inside fn and
// nowhere else, are never drawn by a contended call, are refused for
// session locks, and need lockgen's schema (ErrNotMigrated without it).

func TestFencingTokens(t *testing.T) {
	admin := migrated.DB(t)
	doors := fencing.Doors(t, nil)

	t.Run("increase_across_holders", func(t *testing.T) {
		ctx := testdb.Context(t)
		key := testdb.Key(t)
		var prev int64
		for i := range 6 {
			door := doors[i%2]
			tok := fencing.Holder(t, ctx, door, key, nil)
			require.Greater(t, tok, prev, "holder %d (%s)", i, door.Label())
			require.Equal(t, tok, fencing.Published(t, admin, key))
			prev = tok
		}
	})

	for _, door := range doors {
		t.Run("inside_fn/"+door.Label(), func(t *testing.T) {
			ctx := testdb.Context(t)
			key := testdb.Key(t)
			tbl := fencing.Table(t, admin, testdb.Schema(t), "accounts", key, "strict")
			var inside frontdoor.Tx
			var tok, setting int64
			var ok bool
			require.NoError(t, door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
				inside = tx
				tok, ok = tx.FencingToken()
				var err error
				setting, err = tx.QueryInt(ctx, `SELECT current_setting('pgadvisory.fencing_token')::bigint`)
				if err != nil {
					return err
				}
				// The lock transaction's own writes carry the token.
				err = tx.Exec(ctx, `INSERT INTO `+tbl+` (id, balance) VALUES (1, 10)`)
				return err
			}, pgadvisory.WithFencing()))
			require.True(t, ok)
			require.Positive(t, tok)
			require.Equal(t, tok, setting)
			require.Equal(t, map[int64]fencing.Row{1: {Balance: 10, Token: tok}}, fencing.Rows(t, admin, tbl))
			_, ok = inside.FencingToken()
			require.False(t, ok, "no token once fn has returned")

			// An unfenced call has no token and sets none.
			require.NoError(t, door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
				_, ok = tx.FencingToken()
				setting, err := tx.QueryInt(ctx, `SELECT count(*) FROM (SELECT NULLIF(current_setting('pgadvisory.fencing_token', true), '') AS s) x WHERE s IS NOT NULL`)
				if err == nil && setting != 0 {
					err = errors.New("fencing test: unfenced transaction carries a token")
				}
				return err
			}))
			require.False(t, ok)
			tokNil, okNil := pgadvisory.FencingToken(nil)
			require.False(t, okNil)
			require.Zero(t, tokNil)
			_, okNil = pgadvisory.FencingTokenPgx(nil)
			require.False(t, okNil)
		})
	}

	for _, door := range doors {
		t.Run("contended_draws_nothing/"+door.Label(), func(t *testing.T) {
			ctx := testdb.Context(t)
			key := testdb.Key(t)
			entered := make(chan int64, 1)
			rel := make(chan struct{})
			release := sync.OnceFunc(func() { close(rel) })
			t.Cleanup(release)
			done := make(chan error, 1)
			go func() {
				done <- door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
					tok, _ := tx.FencingToken()
					entered <- tok
					<-rel
					return nil
				}, pgadvisory.WithFencing())
			}()
			held := frontdoor.Await(t, entered, "the holder")
			seq := fencing.LastToken(t, admin)
			called := false
			for range 3 {
				err := door.RunExclusive(ctx, key, func(frontdoor.Tx) error { called = true; return nil }, pgadvisory.WithFencing())
				require.ErrorIs(t, err, pgadvisory.ErrLocked)
			}
			require.False(t, called)
			require.Equal(t, seq, fencing.LastToken(t, admin), "a contended call must not draw a token")
			require.Equal(t, held, fencing.Published(t, admin, key), "nor publish one")
			// CONTROL: the sequence check sees a call that draws.
			fencing.Holder(t, ctx, door, testdb.Key(t), nil)
			require.Greater(t, fencing.LastToken(t, admin), seq)
			release()
			require.NoError(t, frontdoor.Await(t, done, "the holder"))
		})
	}

	for _, door := range doors {
		t.Run("session_lock_refused/"+door.Label(), func(t *testing.T) {
			err := door.RunSession(testdb.Context(t), pgadvisory.ID(testdb.Key(t)), func(context.Context) error { return nil }, pgadvisory.WithFencing())
			require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument)
		})
	}

	t.Run("invalid_run_fenced", func(t *testing.T) {
		ctx := testdb.Context(t)
		noop := func(*sql.Tx) error { return nil }
		require.ErrorIs(t, pgadvisory.RunFenced(ctx, nil, 1, noop), pgadvisory.ErrInvalidArgument)
		require.ErrorIs(t, pgadvisory.RunFenced(ctx, admin, 1, nil), pgadvisory.ErrInvalidArgument)
		require.ErrorIs(t, pgadvisory.RunFencedPgx(ctx, nil, 1, func(pgx.Tx) error { return nil }), pgadvisory.ErrInvalidArgument)
	})

	t.Run("not_migrated", func(t *testing.T) {
		ctx := testdb.Context(t)
		name, _ := testdb.EmptyDatabase(t)
		onEmpty := frontdoor.Configure(func(c *pgx.ConnConfig) { c.Database = name })
		// Opened after the database, so closed before it is dropped
		// (cleanups run last-in first-out).
		for _, door := range frontdoor.OpenAll(t, frontdoor.MaxConns(2), onEmpty) {
			called := false
			fn := func(frontdoor.Tx) error { called = true; return nil }
			err := door.RunExclusive(ctx, testdb.Key(t), fn, pgadvisory.WithFencing())
			require.ErrorIs(t, err, pgadvisory.ErrNotMigrated, door.Label())
			err = door.RunOnce(ctx, testdb.Key(t), "2026-12-02", fn)
			require.ErrorIs(t, err, pgadvisory.ErrNotMigrated, door.Label())
			require.False(t, called)
			// CONTROL: an unfenced call works there.
			require.NoError(t, door.RunExclusive(ctx, testdb.Key(t), fn))
			require.True(t, called)
		}
	})
}
