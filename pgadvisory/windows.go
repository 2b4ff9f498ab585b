package pgadvisory

import (
	"fmt"
	"time"
)

// Run-once windows name a calendar period in a time zone: every instant of
// one period gets the same key, and instants of different periods get
// different keys, in any zone and across daylight-saving changes.
//
// The instant comes from the caller, usually its clock (time.Now()).
// Replicas whose clocks disagree near a boundary compute different windows:
// one whose clock is two seconds behind, firing at 00:00:01, still names
// yesterday, and then finds yesterday done (ErrAlreadyDone) or runs it if
// nobody had. Fire jobs well inside their window (at 00:05, not at
// midnight), or pass the instant the schedule fired for rather than
// time.Now(), so that every replica names the same window.

// DailyWindow returns the run-once window of the day t falls on in loc, as
// "2006-01-02". A nil loc means UTC. Pass the time zone the business day is
// defined in, so that replicas in different zones agree. A day with a
// daylight-saving change is one window of 23 or 25 hours.
func DailyWindow(t time.Time, loc *time.Location) string {
	return inLocation(t, loc).Format("2006-01-02")
}

// HourlyWindow returns the window of the hour t falls in, in loc, as
// "2006-01-02T15".
//
// When clocks fall back, a local hour happens twice (01:00 to 02:00 on
// 2026-11-01 in New York: first in EDT, then in EST). The second
// occurrence's key carries its UTC offset, "2026-11-01T01-05:00", so the
// two hours are two windows; every other hour keeps the plain form, the
// keys earlier versions wrote (they gave both occurrences one key, and the
// second was skipped as already done). An hour skipped when clocks spring
// forward has no instants and no key; in zones whose clocks move by half an
// hour, the repeated half hour is a window of its own.
func HourlyWindow(t time.Time, loc *time.Location) string {
	lt := inLocation(t, loc)
	key := lt.Format("2006-01-02T15")
	if repeatedWallClock(lt) {
		key += lt.Format("Z07:00")
	}
	return key
}

// WeeklyWindow returns the ISO 8601 week t falls in, in loc, as "2006-W01".
func WeeklyWindow(t time.Time, loc *time.Location) string {
	year, week := inLocation(t, loc).ISOWeek()
	return fmt.Sprintf("%04d-W%02d", year, week)
}

// MonthlyWindow returns the month t falls in, in loc, as "2006-01".
func MonthlyWindow(t time.Time, loc *time.Location) string {
	return inLocation(t, loc).Format("2006-01")
}

// inLocation is t in loc, or in UTC when loc is nil.
func inLocation(t time.Time, loc *time.Location) time.Time {
	if loc == nil {
		loc = time.UTC
	}
	return t.In(loc)
}

// repeatedWallClock reports whether the wall-clock time of lt already
// happened earlier: lt falls within the first Δ after a transition that set
// the clocks back by Δ.
func repeatedWallClock(lt time.Time) bool {
	start, _ := lt.ZoneBounds()
	if start.IsZero() {
		return false // no transition: UTC, a fixed zone, or the zone's first period
	}
	_, before := start.Add(-time.Nanosecond).In(lt.Location()).Zone()
	_, after := lt.Zone()
	back := time.Duration(before-after) * time.Second
	return back > 0 && lt.Sub(start) < back
}
