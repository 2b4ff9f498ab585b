package pgadvisory

import (
	"database/sql"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/stretchr/testify/require"
)

// A pool's package Locker (the state of its deprecated package-level
// functions, with its SetSessionConns setting) does not keep the pool
// alive: once the pool is collected, the registry forgets it. The
// control: while the pool is reachable, the state and its setting stay.
func TestPackageLockerForgotten(t *testing.T) {
	db, err := sql.Open("pgx", "postgres://127.0.0.1:1/none") // never connects
	require.NoError(t, err)
	// The pool's key in the registry, held here weakly as the registry
	// holds it (other tests add and drop package Lockers meanwhile, so the
	// registry's size says nothing).
	key := weak.Make(db)
	registered := func() bool { _, ok := packageLockers.Load(key); return ok }
	require.False(t, registered())
	require.NoError(t, SetSessionConns(db, 7))
	require.Equal(t, 7, packageStateOf(db).sessionConns)
	require.Same(t, packageStateOf(db), stdlibLocker(db).s, "one package Locker per pool")
	require.True(t, registered())
	runtime.GC()
	require.True(t, registered(), "control: the pool is still reachable")
	require.Equal(t, 7, packageStateOf(db).sessionConns)
	require.NoError(t, db.Close())
	db = nil
	require.Eventually(t, func() bool { runtime.GC(); return !registered() }, 10*time.Second, 10*time.Millisecond,
		"the package Locker of a collected pool is forgotten")
}
