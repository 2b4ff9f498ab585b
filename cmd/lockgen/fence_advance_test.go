package main

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// TestFenceAdvance: lockgen fence -advance, the step after a restore, moves
// the token sequence 2^40 past the largest token the database shows (here
// a published token ahead of the sequence) and says where it was and is;
// without lockgen's schema it fails (exit 1) saying to migrate; a wrong
// command line is exit 2 and moves nothing.
func TestFenceAdvance(t *testing.T) {
	ctx := testdb.Context(t)
	_, url := testdb.EmptyDatabase(t)
	db := openTestDB(t, url)

	code, _, errOut := lockgen("fence", "-advance", "-db", url)
	require.Equal(t, exitFail, code, errOut)
	require.Contains(t, errOut, "older than migration 00008 (run lockgen migrate up)")

	code, _, errOut = lockgen("migrate", "up", "-db", url)
	require.Equal(t, exitOK, code, errOut)
	var issued int64
	require.NoError(t, db.QueryRowContext(ctx, `SELECT nextval('pgadvisory.fencing_token_seq')`).Scan(&issued))
	published := issued + 1000
	_, err := db.ExecContext(ctx, `INSERT INTO pgadvisory.fence (lock_id, token) VALUES ($1, $2)`, testdb.Key(t), published)
	require.NoError(t, err)

	code, out, errOut := lockgen("fence", "-advance", "-db", url)
	require.Equal(t, exitOK, code, errOut)
	want := published + 1<<40
	require.Contains(t, out, fmt.Sprintf("pgadvisory.fencing_token_seq moved from %d to %d, 2^40 past %d, the largest token the database shows; the next token is %d", issued, want, published, want+1))
	var next int64
	require.NoError(t, db.QueryRowContext(ctx, `SELECT nextval('pgadvisory.fencing_token_seq')`).Scan(&next))
	require.Equal(t, want+1, next, "the next holder's token is past everything the copy showed")

	for _, args := range [][]string{
		{"fence", "-advance", "-lock", "a.b", "-db", url},
		{"fence", "-advance", "-upgrade"},
		{"fence", "-advance", "extra"},
		{"fence", "-lock", "a.b", "-table", "app.t", "-db", url},
		{"fence", "-advance", "-db", "postgres://%zz"},
	} {
		code, out, errOut := lockgen(args...)
		require.Equal(t, exitUsage, code, "%v: %s%s", args, out, errOut)
	}
	var after int64
	require.NoError(t, db.QueryRowContext(ctx, `SELECT last_value FROM pgadvisory.fencing_token_seq`).Scan(&after))
	require.Equal(t, next, after, "usage errors moved nothing")
}
