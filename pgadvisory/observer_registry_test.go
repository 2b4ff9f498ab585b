package pgadvisory_test

import (
	"bytes"
	"context"
	"database/sql"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Observers set once, on the Locker: WithLockerObserver observes every
// call of the Locker, without an option at the call; WithLockSetObserver
// observes the locks of one declared set instead (by name, so every
// parameter value of a parameterized lock); a call's own observer runs in
// addition to either. The package-level SetObserver and SetObserverFor
// (deprecated) observe the package-level functions only. The control at
// each step is the observer that must not see the call.

func TestObserverSetForLocker(t *testing.T) {
	frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
		ctx := testdb.Context(t)
		key := testdb.Key(t)
		process := &callLog{keys: []int64{key}}
		own := &callLog{keys: []int64{key}}

		// Control: a Locker without an observer observes nothing.
		require.NoError(t, door.RunExclusive(ctx, key, noop))
		require.Empty(t, process.take())

		door = door.WithLocker(pgadvisory.WithLockerObserver(process))
		require.NoError(t, door.RunExclusive(ctx, key, noop))
		require.NoError(t, door.RunSession(ctx, pgadvisory.ID(key), func(context.Context) error { return nil }))
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
		door = door.WithLocker(pgadvisory.WithLockerObserver(process), pgadvisory.WithLockSetObserver(decls, set))

		require.NoError(t, door.RunExclusiveLock(ctx, plainLock, noop))
		require.NoError(t, door.RunExclusiveLock(ctx, tenantLock, noop))
		calls := set.take()
		require.Len(t, calls, 2)
		require.Equal(t, "observed.plain", calls[0].call.Name)
		require.Equal(t, "observed.per_tenant", calls[1].call.Name)
		require.Equal(t, []int64{tenant42}, calls[1].call.LockIDs)
		require.Empty(t, process.take(), "the lock set's observer replaces the Locker's")

		// Control: a raw ID and an undeclared name go to the Locker's observer.
		require.NoError(t, door.RunExclusive(ctx, raw, noop))
		require.NoError(t, door.RunExclusiveLock(ctx, pgadvisory.Lock{Name: "observed.other", ID: raw}, noop))
		require.Len(t, process.take(), 2)
		require.Empty(t, set.take())

		// An observer declared with the lock runs as well.
		own := &callLog{}
		require.NoError(t, door.RunExclusiveLock(ctx, plainLock.With(pgadvisory.WithCallObserver(own)), noop))
		require.Equal(t, "observed.plain", own.only(t).call.Name)
		require.Len(t, set.take(), 1)

		_, err := pgadvisory.New(pgadvisory.Stdlib(testdb.DB(t)), pgadvisory.WithLockSetObserver(decls, nil))
		require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument, "a nil observer is refused")
	})
}

func TestObserverFuncForLockSet(t *testing.T) {
	frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
		ctx := testdb.Context(t)
		lock := pgadvisory.Lock{Name: "observed.slog", ID: testdb.Key(t)}
		var buf bytes.Buffer
		logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		door = door.WithLocker(pgadvisory.WithLockSetObserver([]pgadvisory.Declared{{Name: lock.Name}}, pgadvisory.SlogObserver(logger)))

		require.NoError(t, door.RunExclusiveLock(ctx, lock, noop))
		recs := parseLog(t, &buf)
		require.Len(t, recs, 2)
		require.Equal(t, "pgadvisory: lock acquired", recs[0]["msg"])
		require.Equal(t, "pgadvisory: lock released", recs[1]["msg"])
		require.Equal(t, lock.Name, recs[1]["lock"])
		require.Nil(t, pgadvisory.ObserverFunc(nil), "a nil function is no observer")
	})
}

// SetObserver and SetObserverFor (deprecated) observe the package-level
// functions and Lock methods on both drivers, and nil removes them; a
// Locker made by New on the same pool does not read them (the control).
// The test changes process-wide state: it is not parallel, and each log
// keeps only its own test's keys.
func TestObserverSetForPackageFunctions(t *testing.T) {
	ctx := testdb.Context(t)
	db, pool := testdb.DB(t), testdb.Pool(t)
	raw, declared := testdb.Key(t), testdb.Key(t)
	lock := pgadvisory.Lock{Name: "observed.package", ID: declared}
	decls := []pgadvisory.Declared{{Name: lock.Name, ID: declared}}
	process := &callLog{keys: []int64{raw, declared}}
	set := &callLog{keys: []int64{raw, declared}}
	pgadvisory.SetObserver(process)
	t.Cleanup(func() { pgadvisory.SetObserver(nil) })
	pgadvisory.SetObserverFor(decls, set)
	t.Cleanup(func() { pgadvisory.SetObserverFor(decls, nil) })
	sqlNoop := func(*sql.Tx) error { return nil }
	pgxNoop := func(pgx.Tx) error { return nil }

	require.NoError(t, pgadvisory.RunExclusive(ctx, db, raw, sqlNoop))
	require.NoError(t, pgadvisory.RunExclusivePgx(ctx, pool, raw, pgxNoop))
	require.Len(t, process.take(), 2)
	require.NoError(t, lock.RunExclusive(ctx, db, sqlNoop))
	require.NoError(t, lock.RunExclusivePgx(ctx, pool, pgxNoop))
	require.Len(t, set.take(), 2)
	require.Empty(t, process.take(), "the lock set's observer replaces SetObserver's")

	// Control: a Locker made by New reads neither.
	locker, err := pgadvisory.New(pgadvisory.Pgx(pool))
	require.NoError(t, err)
	require.NoError(t, locker.RunExclusive(ctx, pgadvisory.ID(raw), pgxNoop))
	require.NoError(t, locker.RunExclusive(ctx, lock, pgxNoop))
	require.Empty(t, process.take())
	require.Empty(t, set.take())

	pgadvisory.SetObserverFor(decls, nil)
	require.NoError(t, lock.RunExclusive(ctx, db, sqlNoop))
	require.Empty(t, set.take(), "SetObserverFor(decls, nil) removes it")
	require.Len(t, process.take(), 1, "and SetObserver's takes over again")
	pgadvisory.SetObserver(nil)
	require.NoError(t, pgadvisory.RunExclusive(ctx, db, raw, sqlNoop))
	require.Empty(t, process.take(), "SetObserver(nil) removes it")
}
