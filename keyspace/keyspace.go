package keyspace

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// MaxNameLength is the longest lock name, in bytes, that ValidateName accepts.
const MaxNameLength = 128

// ID is int64(big-endian first 8 bytes of SHA-256(UTF-8 bytes of name)).
// It does not validate name; use [ValidateName] for declared names.
func ID(name string) int64 {
	sum := sha256.Sum256([]byte(name))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// Key returns the key bytes of name with the given canonical parameter
// texts (see the package documentation). With no parameters it is name.
func Key(name string, params ...string) []byte {
	n := len(name)
	for _, p := range params {
		n += 5 + len(p)
	}
	key := make([]byte, 0, n)
	key = append(key, name...)
	for _, p := range params {
		key = append(key, 0)
		key = binary.BigEndian.AppendUint32(key, uint32(len(p)))
		key = append(key, p...)
	}
	return key
}

// ParamID returns the ID of a parameterized lock: the ID rule applied to
// [Key](name, params...). params must be canonical text (see [Canonical]).
// ParamID(name) == ID(name).
func ParamID(name string, params ...string) int64 {
	if len(params) == 0 {
		return ID(name)
	}
	sum := sha256.Sum256(Key(name, params...))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// NameError reports an invalid lock name and the byte offset of the
// problem, so tools can point at it.
type NameError struct {
	Name   string // the name as given
	Offset int    // byte offset into Name
	Reason string // what is wrong, e.g. "character 'X' is not allowed"
}

// Error implements error.
func (e *NameError) Error() string {
	return fmt.Sprintf("keyspace: invalid lock name %q: %s (at byte %d)", e.Name, e.Reason, e.Offset)
}

// ValidateName checks that name is lowercase dotted segments, each
// [a-z][a-z0-9_]*, at most MaxNameLength bytes. The error is a *NameError.
func ValidateName(name string) error {
	fail := func(off int, reason string) error { return &NameError{Name: name, Offset: off, Reason: reason} }
	if name == "" {
		return fail(0, "name is empty")
	}
	if len(name) > MaxNameLength {
		return fail(MaxNameLength, fmt.Sprintf("name is longer than %d bytes", MaxNameLength))
	}
	segStart := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '.':
			if segStart {
				return fail(i, "empty segment: names are dotted segments like \"billing.invoice\"")
			}
			segStart = true
		case c >= 'a' && c <= 'z':
			segStart = false
		case c >= '0' && c <= '9', c == '_':
			if segStart {
				return fail(i, "each segment must start with a lowercase letter")
			}
		case c >= 'A' && c <= 'Z':
			return fail(i, "uppercase letter: names are lowercase")
		case c >= utf8.RuneSelf:
			// Name the whole character, not its first byte.
			r, _ := utf8.DecodeRuneInString(name[i:])
			if r == utf8.RuneError {
				return fail(i, "invalid UTF-8: use [a-z0-9_] and dots")
			}
			return fail(i, fmt.Sprintf("character %q is not allowed: use [a-z0-9_] and dots", r))
		default:
			return fail(i, fmt.Sprintf("character %q is not allowed: use [a-z0-9_] and dots", rune(c)))
		}
	}
	if segStart {
		return fail(len(name), "name ends with a dot")
	}
	return nil
}
