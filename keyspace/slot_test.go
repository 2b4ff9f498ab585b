package keyspace_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/keyspace"
)

// slotVector is one published entry of testdata/slots.json.
type slotVector struct {
	LockID int64 `json:"lock_id"`
	Slot   int32 `json:"slot"`
	ID     int64 `json:"id"`
}

func loadSlotVectors(t *testing.T) []slotVector {
	t.Helper()
	raw, err := os.ReadFile("testdata/slots.json")
	require.NoError(t, err)
	var file struct {
		Vectors []slotVector `json:"vectors"`
	}
	require.NoError(t, json.Unmarshal(raw, &file))
	require.GreaterOrEqual(t, len(file.Vectors), 6, "published vectors are only ever appended")
	return file.Vectors
}

// TestSlotVectors holds SlotID to the published vectors (computed with an
// independent SHA-256 implementation).
func TestSlotVectors(t *testing.T) {
	for _, v := range loadSlotVectors(t) {
		require.Equal(t, v.ID, keyspace.SlotID(v.LockID, v.Slot), "SlotID(%d, %d)", v.LockID, v.Slot)
	}
	// The first vector pinned independently of the file.
	require.Equal(t, int64(-933250112286515960), keyspace.SlotID(keyspace.ID("reports.daily_email"), 0))
}

// TestSlotIDsDistinct: a lock's slots, the lock itself and its neighbour's
// slots are different keys; the prefix keeps slot keys apart from names.
func TestSlotIDsDistinct(t *testing.T) {
	id := keyspace.ID("exports.run")
	seen := map[int64]string{id: "the lock", keyspace.ID("exports.run2"): "another lock"}
	for _, lock := range []int64{id, id + 1} {
		for s := int32(0); s < 64; s++ {
			k := keyspace.SlotID(lock, s)
			_, dup := seen[k]
			require.False(t, dup, "slot %d of %d collides", s, lock)
			seen[k] = "slot"
		}
	}
	key := keyspace.SlotKey(id, 3)
	require.Len(t, key, 13)
	require.Equal(t, byte(keyspace.SlotKeyPrefix), key[0])
	require.Error(t, keyspace.ValidateName(string(key)), "a slot key is never a valid name")
}
