package status_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/status"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/keyspace"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestStatusLeaseLeader: a lease leader (Lead with WithLease), which holds
// no advisory lock and no connection, shows as a line of its own with its
// registered name, MODE "lease", no backend, and its holder, term (the
// published token), since and expiry, in the table and in JSON. Once fn
// returned (the lease released) the line is gone; the control: the view
// read alone (Query) never lists it.
func TestStatusLeaseLeader(t *testing.T) {
	db := migrated.DB(t)
	ctx := testdb.Context(t)
	name := "test.status_lease_" + strconv.FormatInt(time.Now().UnixNano()%1e9, 10)
	lock := pgadvisory.Lock{Name: name, ID: keyspace.ID(name)}
	require.NoError(t, pgadvisory.Register(ctx, db, []pgadvisory.Declared{{Name: name, ID: lock.ID}}))
	l, err := pgadvisory.New(pgadvisory.Stdlib(db), pgadvisory.WithDefaultHolder("relay-a"))
	require.NoError(t, err)

	const ttl = time.Minute
	err = l.Lead(ctx, lock, func(_ context.Context, term int64) error {
		before := time.Now()
		snap, err := status.Read(ctx, db, "")
		require.NoError(t, err)
		var line *status.Lock
		for i, s := range snap.Locks {
			if s.LockID == lock.ID {
				require.Nil(t, line, "one line for the lease")
				line = &snap.Locks[i]
			}
		}
		require.NotNil(t, line, "the lease leader is listed")
		require.Equal(t, name, line.Name)
		require.Equal(t, "lease", line.Mode)
		require.True(t, line.Granted)
		require.Zero(t, line.PID, "no backend holds a lease")
		require.NotNil(t, line.Leader)
		require.Equal(t, "relay-a", line.Leader.Holder)
		require.Equal(t, term, line.Leader.Term)
		require.WithinDuration(t, before, line.Leader.Since, 30*time.Second)
		require.WithinDuration(t, line.Leader.Since.Add(ttl), line.Leader.Expires, 10*time.Second, "expires about a ttl after since")

		var table bytes.Buffer
		require.NoError(t, status.WriteTable(&table, []status.Lock{*line}))
		require.Contains(t, table.String(), "LEADER")
		require.Contains(t, table.String(), "relay-a, term "+strconv.FormatInt(term, 10)+", since ")
		require.Contains(t, table.String(), ", expires "+line.Leader.Expires.UTC().Format(time.RFC3339Nano))

		var js bytes.Buffer
		require.NoError(t, status.WriteJSON(&js, []status.Lock{*line}))
		var out []map[string]any
		require.NoError(t, json.Unmarshal(js.Bytes(), &out))
		leader := out[0]["leader"].(map[string]any)
		require.Equal(t, "relay-a", leader["holder"])
		require.EqualValues(t, term, leader["term"])
		require.NotNil(t, leader["since"])
		require.NotNil(t, leader["expires"], "a lease's expiry")
		require.Nil(t, out[0]["pid"])
		require.Equal(t, "lease", out[0]["mode"])

		// The prefix keeps it by name, and drops it for another prefix.
		snap, err = status.Read(ctx, db, name)
		require.NoError(t, err)
		require.Len(t, snap.Locks, 1)
		snap, err = status.Read(ctx, db, name+"_other")
		require.NoError(t, err)
		require.Empty(t, snap.Locks)

		rows, err := status.Query(ctx, db, "")
		require.NoError(t, err)
		for _, r := range rows {
			require.NotEqual(t, lock.ID, r.LockID, "control: the view lists advisory locks only")
		}
		return nil
	}, pgadvisory.WithLease(ttl))
	require.NoError(t, err)

	snap, err := status.Read(ctx, db, "")
	require.NoError(t, err)
	for _, s := range snap.Locks {
		require.NotEqual(t, lock.ID, s.LockID, "released: not listed")
	}
	var table bytes.Buffer
	require.NoError(t, status.WriteTable(&table, snap.Locks))
	require.False(t, strings.Contains(table.String(), "relay-a"))
}
