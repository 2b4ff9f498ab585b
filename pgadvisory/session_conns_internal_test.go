package pgadvisory

import (
	"database/sql"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A pool's SetSessionConns setting does not keep the pool alive: once the
// pool is collected, the setting is forgotten. The control: while the
// pool is reachable, the setting stays.
func TestSessionConnsSettingForgotten(t *testing.T) {
	count := func() int {
		sessionPoolsMu.Lock()
		defer sessionPoolsMu.Unlock()
		return len(sessionConnsSet)
	}
	before := count()
	db, err := sql.Open("pgx", "postgres://127.0.0.1:1/none") // never connects
	require.NoError(t, err)
	require.NoError(t, SetSessionConns(db, 7))
	require.Equal(t, 7, sessionConnsFor(db))
	require.Equal(t, before+1, count())
	runtime.GC()
	require.Equal(t, before+1, count(), "control: the pool is still reachable")
	require.Equal(t, 7, sessionConnsFor(db))
	require.NoError(t, db.Close())
	db = nil
	require.Eventually(t, func() bool { runtime.GC(); return count() == before }, 10*time.Second, 10*time.Millisecond,
		"the setting of a collected pool is forgotten")
}
