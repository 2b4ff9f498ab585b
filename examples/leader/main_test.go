package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// TestRunTellsTheStory runs the example against the package's test
// database: one leader elected and reported, its backend killed, its
// context canceled with ErrLockLost, another replica elected with a higher
// term, the deposed leader's late write rejected, and nothing left behind.
func TestRunTellsTheStory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var buf bytes.Buffer
	require.NoError(t, run(ctx, testdb.URL(t), &buf), buf.String())
	out := buf.String()
	t.Log("\n" + out)

	require.Equal(t, 2, strings.Count(out, ": elected, term "), out)
	require.Contains(t, out, "postgres: the leader's backend (pid ")
	require.Contains(t, out, "leadership context canceled after")
	require.Contains(t, out, "lock lost: true")
	require.Regexp(t, `late write with term \d+: rejected by the fenced table \(ErrStaleToken\)`, out)
	require.True(t, strings.HasSuffix(out, "ok: one leader at a time, the deposed leader's write rejected\n"), out)

	db := testdb.DB(t)
	var schemas, held int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'leader\_%'`).Scan(&schemas))
	require.Zero(t, schemas, "the private schema is dropped")
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM pgadvisory.status WHERE lock_id = $1`, OutboxRelay.ID).Scan(&held))
	require.Zero(t, held, "every replica released the lock")
}

// TestCheckDetectsBrokenInvariants is the control for run's exit status:
// the invariant check accepts a good story and rejects each broken one.
func TestCheckDetectsBrokenInvariants(t *testing.T) {
	lost := &pgadvisory.Error{Op: "watch", Kind: pgadvisory.ErrLockLost}
	stale := &pgadvisory.Error{Op: "fenced write", Kind: pgadvisory.ErrStaleToken}
	good := func() result {
		return result{
			first:    event{replica: "replica-a", term: 10},
			second:   event{replica: "replica-b", term: 11},
			reported: pgadvisory.Leader{Holder: "replica-a", Term: 10},
			lost:     lost,
			late:     stale,
			lateDone: true,
		}
	}
	require.NoError(t, good().check())
	broken := map[string]func(*result){
		"reported another":    func(r *result) { r.reported.Holder = "replica-c" },
		"reported old term":   func(r *result) { r.reported.Term = 9 },
		"not lost":            func(r *result) { r.lost = context.Canceled },
		"nobody elected":      func(r *result) { r.second = event{} },
		"same replica":        func(r *result) { r.second.replica = "replica-a" },
		"lower term":          func(r *result) { r.second.term = 10 },
		"late write accepted": func(r *result) { r.late = nil },
		"late write other":    func(r *result) { r.late = errors.New("boom") },
	}
	for name, breakIt := range broken {
		t.Run(name, func(t *testing.T) {
			r := good()
			breakIt(&r)
			require.ErrorContains(t, r.check(), "invariant failed")
		})
	}
	require.Equal(t, "ACCEPTED (no fencing!)", lateText(nil))
}
