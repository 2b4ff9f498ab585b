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
// # Names
//
// Names are lowercase dotted segments, each [a-z][a-z0-9_]*, at most
// [MaxNameLength] bytes, e.g. "billing.invoice". [ValidateName] checks them.
//
// The rule never changes: the vectors in testdata/vectors.json are part of
// the published contract and are checked against both Go and SQL.
package keyspace
