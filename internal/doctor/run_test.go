package doctor_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/doctor"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// TestRunReportsEveryCheckInOrder: the contract's names, in its order, each
// with an outcome and evidence.
func TestRunReportsEveryCheckInOrder(t *testing.T) {
	require.Equal(t, []string{"primary", "pooler", "exclusion", "schema", "idle_in_transaction_session_timeout",
		"keepalives", "lock_table", "synchronous_commit", "registry"}, doctor.Names)
	r, err := doctor.Run(context.Background(), doctor.Config{DB: open(t, testdb.URL(t))})
	require.NoError(t, err)
	require.Len(t, r.Checks, len(doctor.Names))
	for i, c := range r.Checks {
		require.Equal(t, doctor.Names[i], c.Name)
		require.Contains(t, []doctor.Status{doctor.Pass, doctor.Warn, doctor.Fail}, c.Status)
		require.NotEmpty(t, c.Detail, c.Name)
	}
}

func TestRunRefusesWhatCannotBeChecked(t *testing.T) {
	_, err := doctor.Run(context.Background(), doctor.Config{})
	require.ErrorContains(t, err, "nil *sql.DB")
	_, err = doctor.Run(context.Background(), doctor.Config{DB: open(t, "postgres://127.0.0.1:1/test?connect_timeout=5")})
	require.ErrorContains(t, err, "doctor: ")
	_, err = doctor.RunCheck(context.Background(), doctor.Config{DB: open(t, testdb.URL(t))}, "vacuum")
	require.ErrorContains(t, err, `unknown check "vacuum"`)
}
