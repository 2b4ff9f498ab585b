package pgadvisory_test

import (
	"testing"
	"time"

	"github.com/lockgen/lockgen/pgadvisory"
)

// TestLockLimit: Limit is the n of the lock's WithLimit, the last one
// declared; 0 without one, with other declared options, or with an invalid
// n.
func TestLockLimit(t *testing.T) {
	base := pgadvisory.Lock{Name: "limit.test", ID: 1}
	for _, tc := range []struct {
		name string
		lock pgadvisory.Lock
		want int
	}{
		{"none", base, 0},
		{"other options", base.With(pgadvisory.WithWait(time.Second), pgadvisory.WithShared()), 0},
		{"declared", base.With(pgadvisory.WithWait(time.Second), pgadvisory.WithLimit(3)), 3},
		{"declared twice", base.With(pgadvisory.WithLimit(3)).With(pgadvisory.WithLimit(5)), 5},
		{"invalid", base.With(pgadvisory.WithLimit(0)), 0},
		{"the largest", base.With(pgadvisory.WithLimit(pgadvisory.MaxLimit)), pgadvisory.MaxLimit},
	} {
		if got := tc.lock.Limit(); got != tc.want {
			t.Errorf("%s: Limit() = %d, want %d", tc.name, got, tc.want)
		}
	}
}
