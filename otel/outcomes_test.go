package lockgenotel_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	lockgenotel "github.com/lockgen/lockgen/otel"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Every outcome, against the real server over both front doors: one
// attempt with its outcome (and error.type when the call failed), the wait
// when the server answered, the hold when the locks were granted, one span
// with the same attributes, its events and its status; the lock's name and
// ID on every metric.

// outcomeCase is one call and what it must record.
type outcomeCase struct {
	name string
	// run makes the call on lock with observe, and returns its error.
	run       func(t *testing.T, ctx context.Context, door frontdoor.Door, lock pgadvisory.Lock, observe pgadvisory.Option) error
	call      string // lockgen.call
	outcome   string
	errorType string // "" when the call succeeded
	wait      string // the outcome the wait is recorded with; "" when no wait is recorded
	hold      bool
	status    codes.Code
	events    []string // span events: the grant, a failed step or a lost lock
}

var outcomeCases = []outcomeCase{
	{
		name: "acquired",
		run: func(t *testing.T, ctx context.Context, door frontdoor.Door, lock pgadvisory.Lock, observe pgadvisory.Option) error {
			return door.RunExclusiveLock(ctx, lock, noop, observe)
		},
		call: "run_exclusive", outcome: "acquired", wait: "acquired", hold: true,
		status: codes.Unset, events: []string{"acquired"},
	},
	{
		name: "fn fails",
		run: func(t *testing.T, ctx context.Context, door frontdoor.Door, lock pgadvisory.Lock, observe pgadvisory.Option) error {
			return door.RunExclusiveLock(ctx, lock, func(frontdoor.Tx) error { return errors.New("boom") }, observe)
		},
		call: "run_exclusive", outcome: "acquired", errorType: "_OTHER", wait: "acquired", hold: true,
		status: codes.Error, events: []string{"acquired"},
	},
	{
		name: "locked",
		run: func(t *testing.T, ctx context.Context, door frontdoor.Door, lock pgadvisory.Lock, observe pgadvisory.Option) error {
			release := door.Hold(t, lock.ID, nil)
			defer func() { require.NoError(t, release()) }()
			return door.RunExclusiveLock(ctx, lock, notCalled(t), observe)
		},
		call: "run_exclusive", outcome: "locked", errorType: "locked", wait: "locked",
		status: codes.Unset,
	},
	{
		name: "timeout",
		run: func(t *testing.T, ctx context.Context, door frontdoor.Door, lock pgadvisory.Lock, observe pgadvisory.Option) error {
			release := door.Hold(t, lock.ID, nil)
			defer func() { require.NoError(t, release()) }()
			return door.RunExclusiveLock(ctx, lock, notCalled(t), observe, pgadvisory.WithWait(20*time.Millisecond))
		},
		call: "run_exclusive", outcome: "timeout", errorType: "lock_timeout", wait: "timeout",
		status: codes.Error,
	},
	{
		name: "error",
		run: func(t *testing.T, ctx context.Context, door frontdoor.Door, lock pgadvisory.Lock, observe pgadvisory.Option) error {
			canceled, cancel := context.WithCancel(ctx)
			cancel()
			return door.RunExclusiveLock(canceled, lock, notCalled(t), observe)
		},
		call: "run_exclusive", outcome: "error", errorType: "canceled",
		status: codes.Error, events: []string{"error"},
	},
	{
		name: "lost",
		run: func(t *testing.T, ctx context.Context, door frontdoor.Door, lock pgadvisory.Lock, observe pgadvisory.Option) error {
			w := witness.New(t)
			return door.RunSession(ctx, lock, func(ctx context.Context) error {
				_, err := testdb.DB(t).ExecContext(ctx, "SELECT pg_terminate_backend($1)", w.Holder(t, lock.ID).PID)
				require.NoError(t, err)
				<-ctx.Done()
				return nil
			}, observe, pgadvisory.WithCheckInterval(50*time.Millisecond))
		},
		// The wait is recorded at the grant, when the lock was not lost yet.
		call: "run_session", outcome: "lost", errorType: "lock_lost", wait: "acquired", hold: true,
		status: codes.Error, events: []string{"acquired", "error"},
	},
	{
		name: "already done",
		run: func(t *testing.T, ctx context.Context, door frontdoor.Door, lock pgadvisory.Lock, observe pgadvisory.Option) error {
			migrated.DB(t)
			window := fmt.Sprintf("window-%d", lock.ID)
			require.NoError(t, door.RunOnceLock(ctx, lock, window, noop)) // not observed
			return door.RunOnceLock(ctx, lock, window, notCalled(t), observe)
		},
		call: "run_once", outcome: "acquired", errorType: "already_done", wait: "acquired",
		status: codes.Unset,
	},
}

func TestOutcomes(t *testing.T) {
	frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
		for _, tc := range outcomeCases {
			t.Run(tc.name, func(t *testing.T) {
				ctx := testdb.Context(t)
				tm := newTelemetry(t)
				lock := pgadvisory.Lock{Name: "otel.case", ID: testdb.Key(t)}
				err := tc.run(t, ctx, door, lock, tm.obs.Option())
				require.Equal(t, tc.errorType, lockgenotel.ErrorType(err), "the call's error: %v", err)
				requireOutcome(t, tm, tc, lock)
			})
		}
	})
}

// requireOutcome checks the metrics and the span of tc's call on lock.
func requireOutcome(t *testing.T, tm *telemetry, tc outcomeCase, lock pgadvisory.Lock) {
	t.Helper()
	id := fmt.Sprint(lock.ID)
	m := tm.collect(t)
	for name, points := range m {
		for _, p := range points {
			require.Equal(t, lock.Name, p.attrs[lockgenotel.LockNameKey].AsString(), name)
			require.Equal(t, lock.ID, p.attrs[lockgenotel.LockIDKey].AsInt64(), name)
			require.Equal(t, tc.call, p.attrs[lockgenotel.CallKey].AsString(), name)
		}
	}

	attempts := m["lockgen.lock.attempts"]
	require.Len(t, attempts, 1)
	require.EqualValues(t, 1, attempts[0].value)
	require.True(t, matches(attempts[0], map[attribute.Key]string{
		lockgenotel.OutcomeKey: tc.outcome, lockgenotel.ErrorTypeKey: tc.errorType,
	}), "%v", attempts[0].attrs)

	if tc.wait == "" {
		require.Empty(t, m["lockgen.lock.wait.duration"])
	} else {
		waits := m["lockgen.lock.wait.duration"]
		require.Len(t, waits, 1)
		require.EqualValues(t, 1, waits[0].value)
		require.Positive(t, waits[0].sum)
		require.True(t, matches(waits[0], map[attribute.Key]string{lockgenotel.OutcomeKey: tc.wait, lockgenotel.ErrorTypeKey: ""}), "%v", waits[0].attrs)
	}
	if tc.hold {
		holds := m["lockgen.lock.hold.duration"]
		require.Len(t, holds, 1)
		require.EqualValues(t, 1, holds[0].value)
		require.True(t, matches(holds[0], map[attribute.Key]string{lockgenotel.OutcomeKey: tc.outcome}), "%v", holds[0].attrs)
	} else {
		require.Empty(t, m["lockgen.lock.hold.duration"])
	}
	require.Empty(t, m["lockgen.fencing.rejections"])

	spans := tm.spans.GetSpans()
	require.Len(t, spans, 1)
	s := spans[0]
	require.Equal(t, "lockgen."+tc.call+" "+lock.Name, s.Name)
	attrs := spanAttrs(s)
	require.Equal(t, lock.Name, attrs[lockgenotel.LockNameKey].AsString())
	require.Equal(t, id, attrs[lockgenotel.LockIDKey].Emit())
	require.Equal(t, tc.call, attrs[lockgenotel.CallKey].AsString())
	require.Equal(t, tc.outcome, attrs[lockgenotel.OutcomeKey].AsString())
	require.Equal(t, tc.errorType, attrs[lockgenotel.ErrorTypeKey].AsString())
	require.Equal(t, tc.errorType == "already_done", attrs[lockgenotel.AlreadyDoneKey].AsBool())
	require.Equal(t, tc.status, s.Status.Code)
	require.Equal(t, tc.events, eventNames(s), "span events")
	require.False(t, s.EndTime.Before(s.StartTime))
}

func noop(frontdoor.Tx) error { return nil }

// notCalled is a transaction fn that fails the test if it is called.
func notCalled(t *testing.T) func(frontdoor.Tx) error {
	return func(frontdoor.Tx) error {
		t.Error("fn was called")
		return nil
	}
}
