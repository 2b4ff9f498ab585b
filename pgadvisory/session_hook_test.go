package pgadvisory

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// The onLocked hook (Lead publishes its term through it) runs after the
// grant and before fn, on the backend that holds the lock, shared or
// dedicated; an error from it releases the lock and ends the call without
// fn.
func TestSessionOnLockedHook(t *testing.T) {
	db := testdb.DB(t)
	pool := testdb.Pool(t)
	type door struct {
		name string
		run  func(ctx context.Context, c *callState, fn func(context.Context) error) error
	}
	doors := []door{
		{"database/sql", func(ctx context.Context, c *callState, fn func(context.Context) error) error {
			return runSession(ctx, c, c.locker, databaseSQLSessions(db), fn)
		}},
		{"pgx", func(ctx context.Context, c *callState, fn func(context.Context) error) error {
			return runSession(ctx, c, c.locker, pgxSessions(pool), fn)
		}},
	}
	holderPID := func(t *testing.T, key int64) (pid int32) {
		require.NoError(t, db.QueryRow(`SELECT pid FROM pg_catalog.pg_locks WHERE locktype = 'advisory' AND granted
  AND ((classid::bigint << 32) | objid::bigint) = $1`, key).Scan(&pid))
		return pid
	}
	for _, d := range doors {
		for _, dedicated := range []bool{false, true} {
			name := d.name + "/shared"
			if dedicated {
				name = d.name + "/dedicated"
			}
			t.Run(name, func(t *testing.T) {
				s := newLockerState()
				if dedicated {
					s.setSessionConns(0)
				}
				ctx := testdb.Context(t)
				key := testdb.Key(t)
				c, err := newCall(s, key, nil, famSession, "pool", false, false)
				require.NoError(t, err)
				var hookPID int32
				c.onLocked = func(ctx context.Context, q sessionQuerier) error {
					return q.queryRow(ctx, "SELECT pg_backend_pid()", nil, &hookPID)
				}
				require.NoError(t, d.run(ctx, c, func(context.Context) error {
					require.Equal(t, holderPID(t, key), hookPID, "the hook ran on the lock's backend")
					return nil
				}))

				c, err = newCall(s, key, nil, famSession, "pool", false, false)
				require.NoError(t, err)
				refused := errors.New("hook refused")
				c.onLocked = func(ctx context.Context, q sessionQuerier) error {
					var n int
					if err := q.queryRow(ctx, "SELECT 1", nil, &n); err != nil {
						return err
					}
					return refused
				}
				err = d.run(ctx, c, func(context.Context) error { t.Error("fn ran after the hook failed"); return nil })
				require.ErrorIs(t, err, refused)
				var free bool
				require.NoError(t, db.QueryRow("SELECT pg_try_advisory_xact_lock($1)", key).Scan(&free))
				require.True(t, free, "the lock was released")

				// A statement the server rejects does not cost the connection.
				c, err = newCall(s, key, nil, famSession, "pool", false, false)
				require.NoError(t, err)
				c.onLocked = func(ctx context.Context, q sessionQuerier) error {
					var n int
					return q.queryRow(ctx, "SELECT 1/0", nil, &n)
				}
				err = d.run(ctx, c, func(context.Context) error { return nil })
				require.Error(t, err)
				require.Equal(t, "22012", SQLState(err))
				require.NotErrorIs(t, err, ErrLockLost)
			})
		}
	}
}
