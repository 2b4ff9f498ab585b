package pgadvisory

import (
	"fmt"
	"time"
)

// DailyWindow returns the run-once window of the day t falls on in loc, as
// "2006-01-02". A nil loc means UTC. Pass the time zone the business day is
// defined in, so that replicas in different zones agree.
func DailyWindow(t time.Time, loc *time.Location) string {
	return inLocation(t, loc).Format("2006-01-02")
}

// HourlyWindow returns the window of the hour t falls in, as "2006-01-02T15".
func HourlyWindow(t time.Time, loc *time.Location) string {
	return inLocation(t, loc).Format("2006-01-02T15")
}

// WeeklyWindow returns the ISO 8601 week t falls in, as "2006-W01".
func WeeklyWindow(t time.Time, loc *time.Location) string {
	year, week := inLocation(t, loc).ISOWeek()
	return fmt.Sprintf("%04d-W%02d", year, week)
}

// MonthlyWindow returns the month t falls in, as "2006-01".
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
