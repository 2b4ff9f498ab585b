package doctor_test

import (
	"testing"

	"github.com/lockgen/lockgen/internal/doctor"
	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
)

// TestPrimaryFailsOnHotStandby: a standby grants advisory locks that exclude
// nobody on the primary; its primary passes.
func TestPrimaryFailsOnHotStandby(t *testing.T) {
	primary := pgcluster.Start(t)
	standby := primary.StartStandby(t)
	requireStatus(t, run(t, standby.URL(), doctor.Primary), doctor.Fail, "hot standby", "pg_is_in_recovery() = true")
	requireStatus(t, run(t, primary.URL(), doctor.Primary), doctor.Pass, "pg_is_in_recovery() = false")
}
