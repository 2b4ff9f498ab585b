package pgadvisory_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestObserverEvents: a successful call reports Acquired (with its wait) then
// Released (with the hold time, no error); contention reports Contended with
// ErrLocked, a timed-out wait Contended with ErrLockTimeout; a failing fn
// reports Released with fn's error.
func TestObserverEvents(t *testing.T) {
	frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
		ctx := testdb.Context(t)
		key := testdb.Key(t)
		var rec recorder

		t.Run("success", func(t *testing.T) {
			require.NoError(t, door.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
				require.Equal(t, []pgadvisory.EventKind{pgadvisory.EventAcquired}, rec.kinds(),
					"Acquired is reported before fn runs")
				return tx.Exec(ctx, "SELECT 1")
			}, rec.option()))
			evs := rec.take()
			require.Equal(t, []pgadvisory.EventKind{pgadvisory.EventAcquired, pgadvisory.EventReleased}, kinds(evs))
			acquired, released := evs[0], evs[1]
			require.Positive(t, acquired.Wait)
			require.Positive(t, released.Held)
			require.NoError(t, released.Err)
			for _, e := range evs {
				require.Equal(t, []int64{key}, e.LockIDs)
				require.Empty(t, e.Name)
				require.False(t, e.Shared)
				require.False(t, e.Session)
			}

			require.NoError(t, door.RunExclusive(ctx, key, noop, rec.option(), pgadvisory.WithShared()))
			for _, e := range rec.take() {
				require.True(t, e.Shared, "shared calls report Shared")
			}
		})

		t.Run("contended", func(t *testing.T) {
			release := door.Hold(t, key, nil)
			require.ErrorIs(t, door.RunExclusive(ctx, key, noop, rec.option()), pgadvisory.ErrLocked)
			evs := rec.take()
			require.Equal(t, []pgadvisory.EventKind{pgadvisory.EventContended}, kinds(evs))
			require.ErrorIs(t, evs[0].Err, pgadvisory.ErrLocked)

			err := door.RunExclusive(ctx, key, noop, rec.option(), pgadvisory.WithWait(20*time.Millisecond))
			require.ErrorIs(t, err, pgadvisory.ErrLockTimeout)
			evs = rec.take()
			require.Equal(t, []pgadvisory.EventKind{pgadvisory.EventContended}, kinds(evs))
			require.ErrorIs(t, evs[0].Err, pgadvisory.ErrLockTimeout)
			require.NoError(t, release())
		})

		t.Run("error", func(t *testing.T) {
			// A failed step (not fn's own error) is an EventError carrying
			// the call's typed error.
			canceled, cancel := context.WithCancel(ctx)
			cancel()
			err := door.RunExclusive(canceled, key, noop, rec.option())
			require.ErrorIs(t, err, context.Canceled)
			evs := rec.take()
			require.Equal(t, []pgadvisory.EventKind{pgadvisory.EventError}, kinds(evs))
			require.ErrorIs(t, evs[0].Err, context.Canceled)
			var pe *pgadvisory.Error
			require.ErrorAs(t, evs[0].Err, &pe)
			require.Equal(t, []int64{key}, pe.LockIDs)
			require.Equal(t, []int64{key}, evs[0].LockIDs)
		})

		t.Run("fn-fails", func(t *testing.T) {
			boom := errors.New("boom")
			err := door.RunExclusive(ctx, key, func(frontdoor.Tx) error { return boom }, rec.option())
			require.ErrorIs(t, err, boom)
			evs := rec.take()
			require.Equal(t, []pgadvisory.EventKind{pgadvisory.EventAcquired, pgadvisory.EventReleased}, kinds(evs))
			require.ErrorIs(t, evs[1].Err, boom)
			require.Positive(t, evs[1].Held)
		})
	})
}

// TestSlogObserver: SlogObserver writes one record per event, naming the
// lock and the event kind, at the documented level. The control logger at
// Info drops the Debug records (acquired, released) but keeps contention.
func TestSlogObserver(t *testing.T) {
	frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
		ctx := testdb.Context(t)
		lock := pgadvisory.Lock{Name: "reports.daily_email", ID: testdb.Key(t)}
		var buf bytes.Buffer
		logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		observe := pgadvisory.WithObserver(pgadvisory.SlogObserver(logger))

		requireRecord := func(r logRecord, kind pgadvisory.EventKind, level slog.Level) {
			t.Helper()
			require.Equal(t, "pgadvisory: lock "+kind.String(), r["msg"])
			require.Equal(t, level.String(), r["level"])
			require.Equal(t, lock.Name, r["lock"])
			require.Equal(t, json.Number(strconv.FormatInt(lock.ID, 10)), r["lock_id"])
		}

		require.NoError(t, door.RunExclusiveLock(ctx, lock, noop, observe))
		recs := parseLog(t, &buf)
		require.Len(t, recs, 2)
		requireRecord(recs[0], pgadvisory.EventAcquired, slog.LevelDebug)
		require.Contains(t, recs[0], "wait")
		requireRecord(recs[1], pgadvisory.EventReleased, slog.LevelDebug)
		require.Contains(t, recs[1], "held")
		require.NotContains(t, recs[1], "error")

		release := door.Hold(t, lock.ID, nil)
		require.ErrorIs(t, door.RunExclusiveLock(ctx, lock, noop, observe), pgadvisory.ErrLocked)
		recs = parseLog(t, &buf)
		require.Len(t, recs, 1)
		requireRecord(recs[0], pgadvisory.EventContended, slog.LevelInfo)
		require.Contains(t, recs[0]["error"], "held by another session")
		require.NoError(t, release())

		boom := errors.New("boom")
		require.ErrorIs(t, door.RunExclusiveLock(ctx, lock, func(frontdoor.Tx) error { return boom }, observe), boom)
		recs = parseLog(t, &buf)
		require.Len(t, recs, 2)
		requireRecord(recs[0], pgadvisory.EventAcquired, slog.LevelDebug)
		requireRecord(recs[1], pgadvisory.EventReleased, slog.LevelWarn)
		require.Equal(t, "boom", recs[1]["error"])

		canceled, cancel := context.WithCancel(ctx)
		cancel()
		require.ErrorIs(t, door.RunExclusiveLock(canceled, lock, noop, observe), context.Canceled)
		recs = parseLog(t, &buf)
		require.Len(t, recs, 1)
		requireRecord(recs[0], pgadvisory.EventError, slog.LevelError)
		require.Contains(t, recs[0]["error"], "context canceled")

		// Control: an Info logger keeps only the contention record.
		infoLogger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
		infoObserve := pgadvisory.WithObserver(pgadvisory.SlogObserver(infoLogger))
		require.NoError(t, door.RunExclusiveLock(ctx, lock, noop, infoObserve))
		require.Empty(t, parseLog(t, &buf))
		release = door.Hold(t, lock.ID, nil)
		require.ErrorIs(t, door.RunExclusiveLock(ctx, lock, noop, infoObserve), pgadvisory.ErrLocked)
		recs = parseLog(t, &buf)
		require.Len(t, recs, 1)
		require.True(t, strings.HasSuffix(recs[0]["msg"].(string), "contended"))
		require.NoError(t, release())
	})
}

// recorder collects observer events.
type recorder struct {
	mu     sync.Mutex
	events []pgadvisory.Event
}

func (r *recorder) option() pgadvisory.Option {
	return pgadvisory.WithObserver(func(e pgadvisory.Event) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.events = append(r.events, e)
	})
}

// kinds returns the kinds of the events so far.
func (r *recorder) kinds() []pgadvisory.EventKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	return kinds(r.events)
}

// take returns the events so far and forgets them.
func (r *recorder) take() []pgadvisory.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	evs := r.events
	r.events = nil
	return evs
}

func kinds(evs []pgadvisory.Event) []pgadvisory.EventKind {
	ks := make([]pgadvisory.EventKind, len(evs))
	for i, e := range evs {
		ks[i] = e.Kind
	}
	return ks
}

// logRecord is one JSON line of slog's JSON handler.
type logRecord map[string]any

func parseLog(t *testing.T, buf *bytes.Buffer) []logRecord {
	t.Helper()
	var recs []logRecord
	sc := bufio.NewScanner(buf)
	for sc.Scan() {
		var r logRecord
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.UseNumber() // lock IDs do not fit a float64
		require.NoError(t, dec.Decode(&r), "%s", sc.Text())
		recs = append(recs, r)
	}
	require.NoError(t, sc.Err())
	buf.Reset()
	return recs
}
