package keyspace

import (
	"crypto/sha256"
	"encoding/binary"
)

// SlotKeyPrefix is the first byte of every slot key (see [SlotID]). It is
// never the first byte of valid UTF-8 text, so no lock name, and no key of
// a parameterized lock (which starts with the name), is a slot key.
const SlotKeyPrefix = 0xFF

// SlotKey returns the key bytes of slot number slot of the limited lock
// lockID: SlotKeyPrefix, the lock's ID as 8 big-endian bytes (two's
// complement), and the slot number as 4 big-endian bytes (two's complement
// of an int32, as PostgreSQL's int4send writes it).
func SlotKey(lockID int64, slot int32) []byte {
	key := make([]byte, 0, 13)
	key = append(key, SlotKeyPrefix)
	key = binary.BigEndian.AppendUint64(key, uint64(lockID))
	return binary.BigEndian.AppendUint32(key, uint32(slot))
}

// SlotID returns the advisory-lock key of slot number slot (0 to n-1) of
// a lock limited to n holders at once: the ID rule (the first 8 bytes of
// the SHA-256 digest, as a big-endian int64) applied to [SlotKey]. Its SQL
// twin is pgadvisory.slot_id(lock_id, slot). The slot keys of a lock do
// not depend on n.
func SlotID(lockID int64, slot int32) int64 {
	sum := sha256.Sum256(SlotKey(lockID, slot))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}
