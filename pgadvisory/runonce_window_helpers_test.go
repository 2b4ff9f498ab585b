package pgadvisory_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/pgadvisory"
)

// The window helpers: DailyWindow, HourlyWindow, WeeklyWindow (ISO weeks)
// and MonthlyWindow in a business time zone, whatever zone the replica
// runs in.

func TestRunOnceWindows(t *testing.T) {
	tokyo := time.FixedZone("JST", 9*3600)
	la := time.FixedZone("PST", -8*3600)
	// 2026-12-31 23:30 UTC is already 2027-01-01 in Tokyo and still
	// 2026-12-31 in Los Angeles.
	nye := time.Date(2026, 12, 31, 23, 30, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		got  string
		want string
	}{
		{"daily_utc", pgadvisory.DailyWindow(nye, time.UTC), "2026-12-31"},
		{"daily_nil_is_utc", pgadvisory.DailyWindow(nye, nil), "2026-12-31"},
		{"daily_tokyo", pgadvisory.DailyWindow(nye, tokyo), "2027-01-01"},
		{"daily_la", pgadvisory.DailyWindow(nye, la), "2026-12-31"},
		{"daily_input_zone_ignored", pgadvisory.DailyWindow(nye.In(tokyo), nil), "2026-12-31"},
		{"hourly_utc", pgadvisory.HourlyWindow(nye, nil), "2026-12-31T23"},
		{"hourly_tokyo", pgadvisory.HourlyWindow(nye, tokyo), "2027-01-01T08"},
		{"hourly_la", pgadvisory.HourlyWindow(nye, la), "2026-12-31T15"},
		{"monthly_utc", pgadvisory.MonthlyWindow(nye, nil), "2026-12"},
		{"monthly_tokyo", pgadvisory.MonthlyWindow(nye, tokyo), "2027-01"},
		// ISO weeks: 2026 has 53 (it starts on a Thursday), and
		// 2027-01-01 (a Friday) is still in 2026-W53.
		{"weekly_utc", pgadvisory.WeeklyWindow(nye, nil), "2026-W53"},
		{"weekly_tokyo_iso_year", pgadvisory.WeeklyWindow(nye, tokyo), "2026-W53"},
		{"weekly_new_iso_year", pgadvisory.WeeklyWindow(time.Date(2027, 1, 4, 0, 0, 0, 0, time.UTC), nil), "2027-W01"},
		// Sunday 2026-12-27 20:00 UTC is Monday in Tokyo: a new ISO week.
		{"weekly_sunday_utc", pgadvisory.WeeklyWindow(time.Date(2026, 12, 27, 20, 0, 0, 0, time.UTC), nil), "2026-W52"},
		{"weekly_monday_tokyo", pgadvisory.WeeklyWindow(time.Date(2026, 12, 27, 20, 0, 0, 0, time.UTC), tokyo), "2026-W53"},
		{"weekly_padded", pgadvisory.WeeklyWindow(time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC), nil), "2026-W02"},
	} {
		require.Equal(t, tc.want, tc.got, tc.name)
	}

	// Replicas in different zones agree when they pass the business zone.
	instant := time.Date(2026, 12, 1, 23, 30, 0, 0, time.UTC)
	require.Equal(t, pgadvisory.DailyWindow(instant.In(la), tokyo), pgadvisory.DailyWindow(instant.In(tokyo), tokyo))
	require.Equal(t, "2026-12-02", pgadvisory.DailyWindow(instant.In(la), tokyo))
	// CONTROL: formatting each replica's local time disagrees.
	require.NotEqual(t, instant.In(la).Format("2006-01-02"), instant.In(tokyo).Format("2006-01-02"))

	// A real zone from the tz database, if the system has it.
	if berlin, err := time.LoadLocation("Europe/Berlin"); err == nil {
		require.Equal(t, "2027-01-01", pgadvisory.DailyWindow(nye, berlin))
	}
}
