package pgadvisory

import (
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLockerDefaultsReachTheCall: a Locker's check defaults, session-mode
// pooler and holder become the defaults of each call's state, a call's
// own options win over them, and the defaults mark no option as given (so
// that they are never refused where they do not apply). The package-level
// functions' state keeps the package defaults.
func TestLockerDefaultsReachTheCall(t *testing.T) {
	db := &sql.DB{} // never used: nothing is sent
	l, err := New(Stdlib(db), WithDefaultCheckInterval(3*time.Second), WithDefaultCheckTimeout(7*time.Second),
		WithSessionModePooler(), WithDefaultHolder("replica-9"))
	require.NoError(t, err)

	c, err := l.call(ID(1), nil, famSession, false)
	require.NoError(t, err)
	require.Equal(t, 3*time.Second, c.interval)
	require.Equal(t, 7*time.Second, c.checkTimeout)
	require.True(t, c.sessionPooler)
	require.Equal(t, "replica-9", c.holder)
	require.Zero(t, c.given, "defaults are not options given to the call")

	c, err = l.call(ID(1), []Option{WithCheckInterval(time.Second), WithCheckTimeout(2 * time.Second), WithHolder("call")}, famLead, false)
	require.NoError(t, err)
	require.Equal(t, time.Second, c.interval)
	require.Equal(t, 2*time.Second, c.checkTimeout)
	require.Equal(t, "call", c.holder)

	_, err = l.call(ID(1), nil, famExclusive, false)
	require.NoError(t, err, "a session-mode pooler declared for the Locker is not refused for RunExclusive")

	pkg := stdlibLocker(db)
	c, err = pkg.call(ID(1), nil, famSession, false)
	require.NoError(t, err)
	require.Equal(t, defaultCheckInterval, c.interval)
	require.Equal(t, defaultCheckTimeout, c.checkTimeout)
	require.False(t, c.sessionPooler)
	require.Empty(t, c.holder)
}
