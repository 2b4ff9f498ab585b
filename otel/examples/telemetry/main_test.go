package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// TestRunRecordsEveryOutcome runs the example against the package's test
// database: the four acts go as expected, every outcome appears in the
// metrics (three report attempts, one of which sent it), the relay's work
// nests under its lock's span, and the run-once row is cleared.
func TestRunRecordsEveryOutcome(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var buf bytes.Buffer
	require.NoError(t, run(ctx, testdb.URL(t), &buf), buf.String())
	out := buf.String()
	t.Log("\n" + out)

	require.Contains(t, out, "act 2: nightly cleanup: replica-a ran it; replica-b waited 100ms: timed out (ErrLockTimeout)")
	require.Contains(t, out, "act 3: outbox relay: its backend terminated; the lock is lost (ErrLockLost)")
	require.Contains(t, out, "act 4: replica-c shutting down: context canceled before anything was sent")
	require.True(t, strings.HasSuffix(out, "ok: every outcome recorded\n"), out)

	attempts := attemptLines(t, out)
	require.Equal(t, 3, attempts["reports.daily_email"], "three replicas fired")
	require.Contains(t, out, "lockgen.lock.attempts{lockgen.call=run_once,lockgen.lock.name=reports.daily_email,lockgen.outcome=acquired} 1\n",
		"exactly one sent the report")
	for _, outcome := range []string{"acquired", "timeout", "lost", "error"} {
		require.Contains(t, out, "lockgen.outcome="+outcome+"} ", outcome)
	}
	require.Contains(t, out, "lockgen.lock.hold.duration{lockgen.call=run_session,lockgen.lock.name=outbox.relay,lockgen.outcome=lost} count=1")
	require.Contains(t, out, "\n    lockgen.run_session outbox.relay [outcome=lost error.type=lock_lost status=Error] events: acquired, error\n      relay batch\n",
		"the relay's work nests under its lock's span")

	var rows int
	require.NoError(t, testdb.DB(t).QueryRowContext(ctx, `SELECT count(*) FROM pgadvisory.run_once WHERE lock_id = $1`, ReportsDailyEmail.ID).Scan(&rows))
	require.Zero(t, rows, "the run-once row is cleared")
}

var attemptLine = regexp.MustCompile(`(?m)^  lockgen\.lock\.attempts\{.*lockgen\.lock\.name=([a-z._]+),.*\} (\d+)$`)

// attemptLines sums the printed attempts by lock name.
func attemptLines(t *testing.T, out string) map[string]int {
	t.Helper()
	sums := map[string]int{}
	for _, m := range attemptLine.FindAllStringSubmatch(out, -1) {
		n, err := strconv.Atoi(m[2])
		require.NoError(t, err)
		sums[m[1]] += n
	}
	return sums
}
