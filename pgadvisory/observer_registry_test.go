package pgadvisory_test

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Observers set once: SetObserver observes every call of the process,
// without an option at the call; SetObserverFor observes the locks of one
// declared set instead (by name, so every parameter value of a
// parameterized lock); a call's own observer runs in addition to either.
// The control at each step is the observer that must not see the call.
// These tests change process-wide state: they are not parallel, and each
// log keeps only its own test's keys.

func TestObserverSetForProcess(t *testing.T) {
	frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
		ctx := testdb.Context(t)
		key := testdb.Key(t)
		process := &callLog{keys: []int64{key}}
		own := &callLog{keys: []int64{key}}

		// Control: nothing is set, nothing is observed.
		require.NoError(t, door.RunExclusive(ctx, key, noop))
		require.Empty(t, process.take())

		setProcessObserver(t, process)
		require.NoError(t, door.RunExclusive(ctx, key, noop))
		require.NoError(t, door.RunSession(ctx, key, func(context.Context) error { return nil }))
		calls := process.take()
		require.Len(t, calls, 2)
		require.Equal(t, pgadvisory.CallExclusive, calls[0].call.Kind)
		require.Equal(t, pgadvisory.CallSession, calls[1].call.Kind)
		for _, c := range calls {
			require.Equal(t, pgadvisory.OutcomeAcquired, c.end.Outcome)
		}

		// A call's own observer runs as well, and the events are the same.
		require.NoError(t, door.RunExclusive(ctx, key, noop, pgadvisory.WithCallObserver(own)))
		p, o := process.only(t), own.only(t)
		require.Equal(t, kinds(p.events), kinds(o.events))
		require.Equal(t, p.end.Outcome, o.end.Outcome)

		// WithObserver's event function too.
		var events []pgadvisory.Event
		require.NoError(t, door.RunExclusive(ctx, key, noop, pgadvisory.WithObserver(func(e pgadvisory.Event) { events = append(events, e) })))
		require.Equal(t, kinds(process.only(t).events), kinds(events))

		pgadvisory.SetObserver(nil)
		require.NoError(t, door.RunExclusive(ctx, key, noop))
		require.Empty(t, process.take(), "SetObserver(nil) removes it")
	})
}

func TestObserverSetForLockSet(t *testing.T) {
	frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
		ctx := testdb.Context(t)
		plain, tenant42, raw := testdb.Key(t), testdb.Key(t), testdb.Key(t)
		keys := []int64{plain, tenant42, raw}
		decls := []pgadvisory.Declared{
			{Name: "observed.plain", ID: plain},
			{Name: "observed.per_tenant", Params: []pgadvisory.DeclaredParam{{Name: "tenant_id"}}},
		}
		plainLock := pgadvisory.Lock{Name: "observed.plain", ID: plain}
		tenantLock := pgadvisory.Lock{Name: "observed.per_tenant", ID: tenant42} // one parameter value's ID
		process := &callLog{keys: keys}
		set := &callLog{keys: keys}
		setProcessObserver(t, process)
		pgadvisory.SetObserverFor(decls, set)
		t.Cleanup(func() { pgadvisory.SetObserverFor(decls, nil) })

		require.NoError(t, door.RunExclusiveLock(ctx, plainLock, noop))
		require.NoError(t, door.RunExclusiveLock(ctx, tenantLock, noop))
		calls := set.take()
		require.Len(t, calls, 2)
		require.Equal(t, "observed.plain", calls[0].call.Name)
		require.Equal(t, "observed.per_tenant", calls[1].call.Name)
		require.Equal(t, []int64{tenant42}, calls[1].call.LockIDs)
		require.Empty(t, process.take(), "the lock set's observer replaces the process's")

		// Control: a raw ID and an undeclared name go to the process's observer.
		require.NoError(t, door.RunExclusive(ctx, raw, noop))
		require.NoError(t, door.RunExclusiveLock(ctx, pgadvisory.Lock{Name: "observed.other", ID: raw}, noop))
		require.Len(t, process.take(), 2)
		require.Empty(t, set.take())

		// An observer declared with the lock runs as well.
		own := &callLog{}
		require.NoError(t, door.RunExclusiveLock(ctx, plainLock.With(pgadvisory.WithCallObserver(own)), noop))
		require.Equal(t, "observed.plain", own.only(t).call.Name)
		require.Len(t, set.take(), 1)

		pgadvisory.SetObserverFor(decls, nil)
		require.NoError(t, door.RunExclusiveLock(ctx, plainLock, noop))
		require.Empty(t, set.take(), "SetObserverFor(decls, nil) removes it")
		require.Len(t, process.take(), 1, "and the process's observer takes over again")
	})
}

func TestObserverFuncForProcess(t *testing.T) {
	frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
		ctx := testdb.Context(t)
		lock := pgadvisory.Lock{Name: "observed.slog", ID: testdb.Key(t)}
		var buf bytes.Buffer
		logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		pgadvisory.SetObserverFor([]pgadvisory.Declared{{Name: lock.Name}}, pgadvisory.ObserverFunc(pgadvisory.SlogObserver(logger)))
		t.Cleanup(func() { pgadvisory.SetObserverFor([]pgadvisory.Declared{{Name: lock.Name}}, nil) })

		require.NoError(t, door.RunExclusiveLock(ctx, lock, noop))
		recs := parseLog(t, &buf)
		require.Len(t, recs, 2)
		require.Equal(t, "pgadvisory: lock acquired", recs[0]["msg"])
		require.Equal(t, "pgadvisory: lock released", recs[1]["msg"])
		require.Equal(t, lock.Name, recs[1]["lock"])
		require.Nil(t, pgadvisory.ObserverFunc(nil), "a nil function is no observer")
	})
}

// setProcessObserver sets o for the process until t ends.
func setProcessObserver(t *testing.T, o pgadvisory.Observer) {
	t.Helper()
	pgadvisory.SetObserver(o)
	t.Cleanup(func() { pgadvisory.SetObserver(nil) })
}
