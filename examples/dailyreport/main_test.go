package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// TestRunTellsTheScenario runs the example against the package's test
// database: exactly one report, every re-fire skipped, replica A's lock lost
// to its idle-in-transaction timeout, the stale write rejected, B's balance
// kept, and nothing left behind.
func TestRunTellsTheScenario(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var buf bytes.Buffer
	require.NoError(t, run(ctx, testdb.URL(t), &buf), buf.String())
	out := buf.String()
	t.Log("\n" + out)

	act1, rest, ok := strings.Cut(out, "act 2:")
	require.True(t, ok, out)
	act2, act3, ok := strings.Cut(rest, "act 3:")
	require.True(t, ok, out)
	require.Equal(t, 1, strings.Count(act1, ": sent the report"), act1)
	require.Equal(t, 2, strings.Count(act1, "(ErrLocked)")+strings.Count(act1, "(ErrAlreadyDone)"), act1)
	require.Equal(t, 3, strings.Count(act2, "(ErrAlreadyDone)"), act2)
	require.Contains(t, act2, "reports sent for "+pgadvisory.DailyWindow(time.Now(), mustZone(t))+": 1")
	require.Contains(t, act3, "idle in transaction over 1s; the lock is released")
	require.Contains(t, act3, "replica-a: its commit finds the session gone (ErrConnLost, SQLSTATE 25P03)")
	require.Contains(t, act3, "replica-b: took billing.close_day after waiting")
	require.Contains(t, act3, "rejected by the fenced table (ErrStaleToken)")
	require.Contains(t, act3, "final balance of acme: 140")
	require.True(t, strings.HasSuffix(out, "ok: exactly one report, stale write rejected\n"), out)

	db := testdb.DB(t)
	var schemas, ledger int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'dailyreport\_%'`).Scan(&schemas))
	require.Zero(t, schemas, "the private schema is dropped")
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM pgadvisory.run_once WHERE lock_id = $1`, ReportsDailyEmail.ID).Scan(&ledger))
	require.Zero(t, ledger, "the ledger row is cleared, so the example runs again the same day")
}

// TestCheckDetectsBrokenInvariants is the control for run's exit status:
// the invariant check accepts a good run and rejects each broken one.
func TestCheckDetectsBrokenInvariants(t *testing.T) {
	good := func() result {
		return result{
			day: "2026-12-02",
			first: []outcome{
				{"replica-a", pgadvisory.ErrLocked},
				{"replica-b", nil},
				{"replica-c", pgadvisory.ErrAlreadyDone},
			},
			second: []outcome{
				{"replica-a", pgadvisory.ErrAlreadyDone},
				{"replica-b", pgadvisory.ErrAlreadyDone},
				{"replica-c", pgadvisory.ErrAlreadyDone},
			},
			reports: 1,
			fence: fenceResult{
				errA:    &pgadvisory.Error{Kind: pgadvisory.ErrConnLost, Err: &pgconn.PgError{Code: "25P03"}},
				lateErr: &pgadvisory.Error{Kind: pgadvisory.ErrStaleToken, Err: errors.New("LF001")},
				final:   openingBalance + dayCharges,
			},
		}
	}
	require.NoError(t, good().check())

	broken := map[string]func(*result){
		"two senders":         func(r *result) { r.first[0].err = nil },
		"no sender":           func(r *result) { r.first[1].err = pgadvisory.ErrLocked },
		"act 1 failure":       func(r *result) { r.first[2].err = errors.New("boom") },
		"second run sent":     func(r *result) { r.second[1].err = nil },
		"two outbox rows":     func(r *result) { r.reports = 2 },
		"late write accepted": func(r *result) { r.fence.lateErr = nil },
		"late write other":    func(r *result) { r.fence.lateErr = pgadvisory.ErrConnLost },
		"b failed":            func(r *result) { r.fence.errB = pgadvisory.ErrLocked },
		"a kept its lock":     func(r *result) { r.fence.errA = nil },
		"a terminated": func(r *result) {
			r.fence.errA = &pgadvisory.Error{Kind: pgadvisory.ErrConnLost, Err: &pgconn.PgError{Code: "57P01"}}
		},
		"charges applied 2x": func(r *result) { r.fence.final = openingBalance + 2*dayCharges },
	}
	for name, breakIt := range broken {
		t.Run(name, func(t *testing.T) {
			r := good()
			breakIt(&r)
			require.ErrorContains(t, r.check(), "invariant failed")
		})
	}
	r := good()
	r.fence.lateErr = nil
	require.Contains(t, strings.Join(r.fence.lines(), "\n"), "ACCEPTED (no fencing!)")
}

func mustZone(t *testing.T) *time.Location {
	loc, err := time.LoadLocation(zone)
	require.NoError(t, err)
	return loc
}
