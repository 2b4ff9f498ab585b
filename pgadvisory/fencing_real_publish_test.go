package pgadvisory_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// The real publish: a fenced call publishes only a token newer than the
// lock's published one. When a newer token is published already (the
// token sequence went backwards: a restored backup, an asynchronous
// failover), the call fails at the publish step with ErrStaleToken, says
// that the sequence is behind and how to advance it, does not run fn,
// leaves the published token as it was and no lock behind. Driven through
// both front doors, with no copy of the publish statement: a publish that
// overwrote newer tokens fails this test.

func TestFencingPublishRefusesToGoBack(t *testing.T) {
	admin := migrated.DB(t)
	for _, door := range fencing.Doors(t, nil) {
		t.Run(door.Label(), func(t *testing.T) {
			ctx := testdb.Context(t)
			key := testdb.Key(t)
			ahead := fencing.PublishAhead(t, admin, key)
			ran := false
			err := door.RunExclusive(ctx, key, func(frontdoor.Tx) error { ran = true; return nil }, pgadvisory.WithFencing())

			pe := sqlstate.RequireTyped(t, err, pgadvisory.ErrStaleToken, "publish", "LF004")
			require.Equal(t, []int64{key}, pe.LockIDs)
			pg := sqlstate.Require(t, err, "LF004")
			require.Contains(t, pg.Message, "the fencing token sequence is behind")
			require.Contains(t, pg.Message, "a newer token than the one it issued is already published")
			require.NotContains(t, pg.Message+pg.Detail+pg.Hint, fmt.Sprint(ahead), "no published token in the error")
			require.Contains(t, pg.Hint, "SELECT setval('pgadvisory.fencing_token_seq', ")
			require.Contains(t, err.Error(), pg.Hint, "Error() gives the advice")
			require.NotContains(t, err.Error(), "newer holder", "the sequence, not a holder, is behind")
			require.False(t, ran, "fn must not run")
			require.Equal(t, ahead, fencing.Published(t, admin, key), "the published token stays")
			require.Empty(t, witness.Of(admin).Holds(t, key), "no lock left behind")
			frontdoor.RequireIdle(t, door)

			// Control: the hint's advice works; the next call publishes a
			// token above the one that was ahead.
			var advance string
			require.NoError(t, admin.QueryRow(`SELECT substring($1 from 'SELECT setval[^;]*')`, pg.Hint).Scan(&advance))
			_, err = admin.Exec(advance)
			require.NoError(t, err)
			tok := fencing.Holder(t, ctx, door, key, nil)
			require.Greater(t, tok, ahead)
			require.Equal(t, tok, fencing.Published(t, admin, key))
		})
	}
}

// TestFencingPublishRefusesEqualToken: the sequence set back so that
// nextval returns exactly the published token (a backup restored from just
// before that publish) fails the call as any sequence behind does: an equal
// token is not newer, and two holders with one token could not be told
// apart by a fenced table. The control is the first call, which published
// that token; the sequence ends where it was.
func TestFencingPublishRefusesEqualToken(t *testing.T) {
	admin := migrated.DB(t)
	for _, door := range fencing.Doors(t, nil) {
		t.Run(door.Label(), func(t *testing.T) {
			ctx := testdb.Context(t)
			key := testdb.Key(t)
			tok := fencing.Holder(t, ctx, door, key, nil)
			require.Equal(t, tok, fencing.Published(t, admin, key), "control: the first holder published its token")
			_, err := admin.Exec(`SELECT setval('pgadvisory.fencing_token_seq', $1, false)`, tok)
			require.NoError(t, err)

			ran := false
			err = door.RunExclusive(ctx, key, func(frontdoor.Tx) error { ran = true; return nil }, pgadvisory.WithFencing())
			sqlstate.RequireTyped(t, err, pgadvisory.ErrStaleToken, "publish", "LF004")
			pg := sqlstate.Require(t, err, "LF004")
			require.Contains(t, pg.Message, "the fencing token sequence is behind")
			require.False(t, ran, "fn must not run")
			require.Equal(t, tok, fencing.Published(t, admin, key))
			require.Equal(t, tok, fencing.LastToken(t, admin), "the sequence is back where it was")
			require.Empty(t, witness.Of(admin).Holds(t, key), "no lock left behind")
			frontdoor.RequireIdle(t, door)
		})
	}
}

// TestFencingPublishAllLocksOrNone: with several locks, a newer token on
// one of them fails the call and publishes on none.
func TestFencingPublishAllLocksOrNone(t *testing.T) {
	admin := migrated.DB(t)
	for _, door := range fencing.Doors(t, nil) {
		t.Run(door.Label(), func(t *testing.T) {
			ctx := testdb.Context(t)
			first, second := testdb.Key(t), testdb.Key(t)
			before := fencing.Holder(t, ctx, door, first, nil)
			ahead := fencing.PublishAhead(t, admin, second)
			err := door.RunExclusive(ctx, first, func(frontdoor.Tx) error { return nil }, pgadvisory.WithFencing(), pgadvisory.WithLocks(second))
			sqlstate.RequireTyped(t, err, pgadvisory.ErrStaleToken, "publish", "LF004")
			require.Equal(t, before, fencing.Published(t, admin, first), "nothing published on the other lock either")
			require.Equal(t, ahead, fencing.Published(t, admin, second))
			require.Empty(t, witness.Of(admin).Holds(t, first, second))
		})
	}
}
