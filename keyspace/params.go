package keyspace

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ParamType is the type of a lock parameter.
type ParamType string

// The parameter types every lockgen tool and the SQL twin understand.
const (
	Int64  ParamType = "int64"
	String ParamType = "string"
	UUID   ParamType = "uuid"
	Bool   ParamType = "bool"
)

// ParamTypes lists the supported parameter types in documentation order.
var ParamTypes = []ParamType{Int64, String, UUID, Bool}

// ParseParamType returns the ParamType named s.
func ParseParamType(s string) (ParamType, error) {
	for _, t := range ParamTypes {
		if string(t) == s {
			return t, nil
		}
	}
	return "", fmt.Errorf("keyspace: unknown parameter type %q (want int64, string, uuid or bool)", s)
}

// Int64Param is the canonical text of an int64 parameter.
func Int64Param(v int64) string { return strconv.FormatInt(v, 10) }

// BoolParam is the canonical text of a bool parameter.
func BoolParam(v bool) string { return strconv.FormatBool(v) }

// StringParam is the canonical text of a string parameter: the string itself.
func StringParam(v string) string { return v }

// UUIDParam is the canonical text of a UUID parameter: lowercase hyphenated.
// Any 16-byte UUID type (github.com/google/uuid.UUID, [16]byte) is accepted.
func UUIDParam(v [16]byte) string {
	var buf [36]byte
	hex.Encode(buf[0:8], v[0:4])
	buf[8] = '-'
	hex.Encode(buf[9:13], v[4:6])
	buf[13] = '-'
	hex.Encode(buf[14:18], v[6:8])
	buf[18] = '-'
	hex.Encode(buf[19:23], v[8:10])
	buf[23] = '-'
	hex.Encode(buf[24:], v[10:])
	return string(buf[:])
}

// Canonical converts text, a value of type t as a person or a command line
// would write it, to its canonical parameter text: int64 in any base-10
// spelling ("+042" → "42"), UUID in upper or lower case with or without
// hyphens or braces, bool as strconv.ParseBool accepts it.
func Canonical(t ParamType, text string) (string, error) {
	switch t {
	case Int64:
		v, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return "", fmt.Errorf("keyspace: %q is not an int64", text)
		}
		return Int64Param(v), nil
	case Bool:
		v, err := strconv.ParseBool(text)
		if err != nil {
			return "", fmt.Errorf("keyspace: %q is not a bool (want true or false)", text)
		}
		return BoolParam(v), nil
	case UUID:
		u, err := parseUUID(text)
		if err != nil {
			return "", err
		}
		return UUIDParam(u), nil
	case String:
		if !utf8.ValidString(text) || strings.IndexByte(text, 0) >= 0 {
			return "", fmt.Errorf("keyspace: string parameter must be valid UTF-8 without NUL bytes")
		}
		return text, nil
	}
	return "", fmt.Errorf("keyspace: unknown parameter type %q", t)
}

func parseUUID(text string) ([16]byte, error) {
	var u [16]byte
	s := strings.TrimSuffix(strings.TrimPrefix(text, "{"), "}")
	s = strings.ReplaceAll(s, "-", "")
	if len(s) != 32 {
		return u, fmt.Errorf("keyspace: %q is not a UUID", text)
	}
	if _, err := hex.Decode(u[:], []byte(s)); err != nil {
		return u, fmt.Errorf("keyspace: %q is not a UUID", text)
	}
	return u, nil
}
