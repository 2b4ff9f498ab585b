// Package keyspace is lockgen's published rule for turning lock names into
// PostgreSQL advisory-lock IDs. It is pure Go with no dependencies, so any
// program, and the SQL function pgadvisory.lock_id, can compute the same IDs.
//
// # The rule
//
// A plain lock's ID is the first 8 bytes of the SHA-256 digest of the UTF-8
// bytes of its name, read as a big-endian two's-complement int64:
//
//	ID("reports.daily_email") == -6078806957557529815
//
// A parameterized lock (one lock per tenant, say) hashes its key instead of
// its bare name. The key is the name followed, for each parameter in
// declaration order, by a zero byte, the parameter's length in bytes as a
// 4-byte big-endian unsigned integer, and the parameter's canonical text:
//
//	key = name || for each p: 0x00 || uint32be(len(p)) || p
//
// Names never contain a zero byte and lengths delimit parameters, so the
// encoding is injective: different (name, parameters) pairs never share a
// key. With no parameters the key is the name, so ParamID(name) == ID(name).
//
// Canonical parameter text: int64 in decimal ("-42", no leading zeros or
// plus sign), UUID in lowercase hyphenated form, bool as "true" or "false",
// string as its UTF-8 bytes (only valid UTF-8 without NUL can be reproduced
// in SQL). [Canonical] converts other spellings.
//
// # Slots of a limited lock
//
// A lock limited to n holders at once (pgadvisory's RunLimited and
// RunSessionLimited) is held through one of n slot keys, numbered 0 to
// n-1. Slot s of the lock whose ID is id has the key 0xFF, id as 8
// big-endian bytes (two's complement), s as 4 big-endian bytes, and its ID
// is the ID rule applied to that key:
//
//	slot key = 0xff || int64be(id) || int32be(s)
//	SlotID(ID("reports.daily_email"), 0) == -933250112286515960
//
// 0xFF never starts valid UTF-8, so a slot key is never a name's key. The
// slot keys do not depend on n. [SlotID] computes them in Go, and the SQL
// function pgadvisory.slot_id(id, s) in the database, so a SQL job can take
// a slot with pg_try_advisory_xact_lock(pgadvisory.slot_id(id, s)).
// testdata/slots.json holds the published vectors.
//
// # Names
//
// Names are lowercase dotted segments, each [a-z][a-z0-9_]*, at most
// [MaxNameLength] bytes, e.g. "billing.invoice". [ValidateName] checks them.
//
// The rule never changes: the vectors in testdata/vectors.json are part of
// the published contract and are checked against both Go and SQL.
package keyspace
