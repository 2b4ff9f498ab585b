package pgadvisory_test

import (
	"fmt"
	"testing"
	"time"
	_ "time/tzdata" // the zones below, whatever the system has

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/pgadvisory"
)

// Window keys across daylight-saving changes: every instant of one window
// gets the same key and instants of different windows get different keys,
// in any zone. Walking time in small steps over days around each change,
// the key may only change forward: a key that comes back after another one
// would put two windows under one key. And no window is longer than its
// period allows (an hourly window at most an hour of real time), which
// catches two hours merged into one key even when they are adjacent, as
// the two 01:00 hours of a fall-back night are.

// dstCase is a zone and an instant near one of its clock changes.
type dstCase struct {
	zone string
	near time.Time // UTC
	what string
}

var dstCases = []dstCase{
	{"America/New_York", time.Date(2026, 11, 1, 6, 0, 0, 0, time.UTC), "fall back 02:00 EDT -> 01:00 EST"},
	{"America/New_York", time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC), "spring forward 02:00 EST -> 03:00 EDT"},
	{"Europe/Berlin", time.Date(2026, 10, 25, 1, 0, 0, 0, time.UTC), "fall back 03:00 CEST -> 02:00 CET"},
	{"Europe/Berlin", time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC), "spring forward 02:00 CET -> 03:00 CEST"},
	{"Australia/Lord_Howe", time.Date(2026, 4, 4, 15, 0, 0, 0, time.UTC), "half-hour fall back 02:00 -> 01:30"},
	{"Australia/Lord_Howe", time.Date(2026, 10, 3, 15, 30, 0, 0, time.UTC), "half-hour spring forward 02:00 -> 02:30"},
	{"America/St_Johns", time.Date(2026, 11, 1, 4, 30, 0, 0, time.UTC), "UTC-3:30 zone falls back"},
	{"Asia/Kolkata", time.Date(2026, 10, 25, 1, 0, 0, 0, time.UTC), "UTC+5:30, no change"},
	{"America/Santiago", time.Date(2026, 4, 5, 3, 0, 0, 0, time.UTC), "falls back at midnight: 23:00 repeats"},
}

// windowHelpers are the helpers and the longest real time one window may
// last (a day of 25 hours, a week or month with one).
var windowHelpers = []struct {
	name    string
	key     func(time.Time, *time.Location) string
	longest time.Duration
	step    time.Duration
	span    time.Duration
}{
	{"hourly", pgadvisory.HourlyWindow, time.Hour, time.Minute, 3 * 24 * time.Hour},
	{"daily", pgadvisory.DailyWindow, 25 * time.Hour, 10 * time.Minute, 5 * 24 * time.Hour},
	{"weekly", pgadvisory.WeeklyWindow, 7*24*time.Hour + time.Hour, time.Hour, 30 * 24 * time.Hour},
	{"monthly", pgadvisory.MonthlyWindow, 31*24*time.Hour + time.Hour, 3 * time.Hour, 100 * 24 * time.Hour},
}

func TestRunOnceWindowsAcrossDST(t *testing.T) {
	for _, tc := range dstCases {
		loc, err := time.LoadLocation(tc.zone)
		require.NoError(t, err)
		for _, h := range windowHelpers {
			t.Run(fmt.Sprintf("%s/%s/%s", tc.zone, tc.what, h.name), func(t *testing.T) {
				requireWindowsWellFormed(t, func(at time.Time) string { return h.key(at, loc) }, tc.near.Add(-h.span/2), h.span, h.step, h.longest)
			})
		}
	}
}

// TestRunOnceWindowsRepeatedHour: the two hours that read 01:xx in New York
// on 2026-11-01 (and 02:xx in Berlin on 2026-10-25) get two keys; the first
// keeps the plain form, the second carries its offset. The control is the
// format earlier versions used, which the same check rejects.
func TestRunOnceWindowsRepeatedHour(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)

	edt := time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC) // 01:30 EDT
	est := edt.Add(time.Hour)                            // 01:30 EST
	require.Equal(t, "2026-11-01T01", pgadvisory.HourlyWindow(edt, ny))
	require.Equal(t, "2026-11-01T01-05:00", pgadvisory.HourlyWindow(est, ny))
	require.Equal(t, "2026-11-01T02", pgadvisory.HourlyWindow(est.Add(time.Hour), ny))
	require.Equal(t, "2026-10-25T02", pgadvisory.HourlyWindow(time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC), berlin))
	require.Equal(t, "2026-10-25T02+01:00", pgadvisory.HourlyWindow(time.Date(2026, 10, 25, 1, 30, 0, 0, time.UTC), berlin))
	// The daily window of both hours is one day, as it should be.
	require.Equal(t, pgadvisory.DailyWindow(edt, ny), pgadvisory.DailyWindow(est, ny))
	// The repeated hour's bounds: it begins the instant clocks fall back
	// (06:00Z in New York, 01:00Z in Berlin) and ends one hour later, when
	// the next hour is a plain one again.
	fallBack := time.Date(2026, 11, 1, 6, 0, 0, 0, time.UTC)
	require.Equal(t, "2026-11-01T01", pgadvisory.HourlyWindow(fallBack.Add(-time.Nanosecond), ny))
	require.Equal(t, "2026-11-01T01-05:00", pgadvisory.HourlyWindow(fallBack, ny))
	require.Equal(t, "2026-11-01T01-05:00", pgadvisory.HourlyWindow(fallBack.Add(time.Hour-time.Nanosecond), ny))
	require.Equal(t, "2026-11-01T02", pgadvisory.HourlyWindow(fallBack.Add(time.Hour), ny))
	require.Equal(t, "2026-10-25T02+01:00", pgadvisory.HourlyWindow(time.Date(2026, 10, 25, 2, 0, 0, -1, time.UTC), berlin))
	require.Equal(t, "2026-10-25T03", pgadvisory.HourlyWindow(time.Date(2026, 10, 25, 2, 0, 0, 0, time.UTC), berlin))

	// CONTROL: the earlier format merges the two hours into one key, and
	// the check that the helpers pass rejects it.
	oldHourly := func(at time.Time) string { return at.In(ny).Format("2006-01-02T15") }
	require.Equal(t, oldHourly(edt), oldHourly(est))
	ft := &fakeT{}
	requireWindowsWellFormed(ft, oldHourly, edt.Add(-2*time.Hour), 6*time.Hour, time.Minute, time.Hour)
	require.True(t, ft.failed, "the check catches merged hours")
}

// TestRunOnceWindowsKeysUnchanged: an upgrade keeps every key that earlier
// versions wrote, except the repeated hour's second occurrence, so a window
// already done stays done across the upgrade. Over a year in Berlin and New
// York, every hour but the two repeated ones has its old key.
func TestRunOnceWindowsKeysUnchanged(t *testing.T) {
	for _, zone := range []string{"Europe/Berlin", "America/New_York"} {
		loc, err := time.LoadLocation(zone)
		require.NoError(t, err)
		changed := 0
		for at := time.Date(2026, 1, 1, 0, 30, 0, 0, time.UTC); at.Year() == 2026; at = at.Add(time.Hour) {
			if pgadvisory.HourlyWindow(at, loc) != at.In(loc).Format("2006-01-02T15") {
				changed++
			}
		}
		require.Equal(t, 1, changed, "%s: only the second occurrence of the repeated hour changes", zone)
	}
}

// requireWindowsWellFormed walks key over [from, from+span) in steps and
// fails t if a key comes back after another one, or a key lasts longer than
// longest.
func requireWindowsWellFormed(t require.TestingT, key func(time.Time) string, from time.Time, span, step, longest time.Duration) {
	seen := map[string]bool{}
	cur, start := "", from
	for at := from; at.Before(from.Add(span)); at = at.Add(step) {
		k := key(at)
		if k == cur {
			if at.Sub(start) >= longest {
				require.Fail(t, "window too long", "key %q covers %v to %v, longer than %v", k, start, at, longest)
				return
			}
			continue
		}
		if seen[k] {
			require.Fail(t, "key reused", "key %q comes back at %v after %q", k, at, cur)
			return
		}
		seen[k], cur, start = true, k, at
	}
}

// fakeT records a failure, for the control of requireWindowsWellFormed.
type fakeT struct{ failed bool }

func (f *fakeT) Errorf(string, ...any) { f.failed = true }
func (f *fakeT) FailNow()              { f.failed = true }
