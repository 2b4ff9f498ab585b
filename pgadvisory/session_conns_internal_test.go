package pgadvisory

import (
	"database/sql"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A pool's package Locker (the state of its deprecated package-level
// functions, with its SetSessionConns setting) does not keep the pool
// alive: once the pool is collected, the registry forgets it. The
// control: while the pool is reachable, the state and its setting stay.
func TestPackageLockerForgotten(t *testing.T) {
	count := func() (n int) {
		packageLockers.Range(func(_, _ any) bool { n++; return true })
		return n
	}
	before := count()
	db, err := sql.Open("pgx", "postgres://127.0.0.1:1/none") // never connects
	require.NoError(t, err)
	require.NoError(t, SetSessionConns(db, 7))
	require.Equal(t, 7, packageStateOf(db).sessionConns)
	require.Same(t, packageStateOf(db), stdlibLocker(db).s, "one package Locker per pool")
	require.Equal(t, before+1, count())
	runtime.GC()
	require.Equal(t, before+1, count(), "control: the pool is still reachable")
	require.Equal(t, 7, packageStateOf(db).sessionConns)
	require.NoError(t, db.Close())
	db = nil
	require.Eventually(t, func() bool { runtime.GC(); return count() == before }, 10*time.Second, 10*time.Millisecond,
		"the package Locker of a collected pool is forgotten")
}
