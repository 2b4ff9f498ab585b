package migrations_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// A restore hands tokens out again: a copy of the database brings the
// token sequence and the fence rows back together, so LF004 cannot tell,
// and the next holder gets a token already issued after the copy was taken
// (the control). pgadvisory.fence_advance, run after the restore, moves
// the sequence past every token of the old timeline. The restore is
// simulated by putting the sequence and the fence row back as the copy had
// them.
func TestFenceAdvanceAfterRestore(t *testing.T) {
	for _, advance := range []bool{false, true} {
		name := "without fence_advance (control)"
		if advance {
			name = "fence_advance"
		}
		t.Run(name, func(t *testing.T) {
			db := migrated.UpTo(t, 1<<30)
			lock := testdb.Key(t)
			atCopy := publish(t, db, lock)    // the copy is taken here
			afterCopy := publish(t, db, lock) // a holder of the old timeline
			_, err := db.Exec(`SELECT setval('pgadvisory.fencing_token_seq', $1)`, atCopy)
			require.NoError(t, err)
			fencing.ForcePublished(t, db, lock, atCopy)
			if advance {
				var moved int64
				require.NoError(t, db.QueryRow(`SELECT pgadvisory.fence_advance()`).Scan(&moved))
				require.Equal(t, atCopy+1<<40, moved)
			}
			next := publish(t, db, lock)
			if !advance {
				require.Equal(t, afterCopy, next, "the control: a token of the old timeline is handed out again")
				return
			}
			require.Greater(t, next, afterCopy, "no token of the old timeline is handed out again")
		})
	}
	db := migrated.UpTo(t, 1<<30)
	_, err := db.Exec(`SELECT pgadvisory.fence_advance(0)`)
	require.Error(t, err, "a step must be positive")
	role := fencing.AppRole(t, db)
	_, err = fencing.OpenAs(t, db, role).Exec(`SELECT pgadvisory.fence_advance()`)
	require.ErrorContains(t, err, "permission denied", "owner only")
}
