package keyspace_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/keyspace"
)

func TestCanonical(t *testing.T) {
	const u = "6ba7b810-9dad-11d1-80b4-00c04fd430c8"
	for _, tc := range []struct {
		typ  keyspace.ParamType
		in   string
		want string
	}{
		{keyspace.Int64, "42", "42"},
		{keyspace.Int64, "+042", "42"},
		{keyspace.Int64, "-0", "0"},
		{keyspace.Int64, "000", "0"},
		{keyspace.Int64, "-007", "-7"},
		{keyspace.Int64, "9223372036854775807", "9223372036854775807"},
		{keyspace.Int64, "-9223372036854775808", "-9223372036854775808"},

		{keyspace.Bool, "true", "true"},
		{keyspace.Bool, "TRUE", "true"},
		{keyspace.Bool, "True", "true"},
		{keyspace.Bool, "t", "true"},
		{keyspace.Bool, "T", "true"},
		{keyspace.Bool, "1", "true"},
		{keyspace.Bool, "false", "false"},
		{keyspace.Bool, "FALSE", "false"},
		{keyspace.Bool, "False", "false"},
		{keyspace.Bool, "f", "false"},
		{keyspace.Bool, "F", "false"},
		{keyspace.Bool, "0", "false"},

		{keyspace.UUID, u, u},
		{keyspace.UUID, strings.ToUpper(u), u},
		{keyspace.UUID, "{" + u + "}", u},
		{keyspace.UUID, "{" + strings.ToUpper(u) + "}", u},
		{keyspace.UUID, strings.ReplaceAll(u, "-", ""), u},
		{keyspace.UUID, "00000000-0000-0000-0000-000000000000", "00000000-0000-0000-0000-000000000000"},

		{keyspace.String, "acme", "acme"},
		{keyspace.String, "", ""},
		{keyspace.String, " Mixed Case + spaces ", " Mixed Case + spaces "},
		{keyspace.String, "Grüße, 世界", "Grüße, 世界"},
	} {
		got, err := keyspace.Canonical(tc.typ, tc.in)
		require.NoError(t, err, "%s %q", tc.typ, tc.in)
		require.Equal(t, tc.want, got, "%s %q", tc.typ, tc.in)
		// Canonical text is a fixed point.
		again, err := keyspace.Canonical(tc.typ, got)
		require.NoError(t, err)
		require.Equal(t, got, again)
	}
}

func TestCanonicalErrors(t *testing.T) {
	for _, tc := range []struct {
		typ keyspace.ParamType
		in  string
	}{
		{keyspace.Int64, ""},
		{keyspace.Int64, " 1"},
		{keyspace.Int64, "1 "},
		{keyspace.Int64, "1e3"},
		{keyspace.Int64, "0x10"},
		{keyspace.Int64, "1_000"},
		{keyspace.Int64, "9223372036854775808"},
		{keyspace.Int64, "-9223372036854775809"},
		{keyspace.Int64, "forty-two"},
		{keyspace.Bool, ""},
		{keyspace.Bool, "yes"},
		{keyspace.Bool, "on"},
		{keyspace.Bool, "tRuE"},
		{keyspace.UUID, ""},
		{keyspace.UUID, "6ba7b810-9dad-11d1-80b4-00c04fd430c"},   // 31 hex digits
		{keyspace.UUID, "6ba7b810-9dad-11d1-80b4-00c04fd430c8a"}, // 33
		{keyspace.UUID, "6ba7b810-9dad-11d1-80b4-00c04fd430cg"},  // not hex
		{keyspace.UUID, "urn:uuid:6ba7b810-9dad-11d1-80b4-00c04fd430c8"},
		{keyspace.String, "\xff"},
		{keyspace.String, "a\x00b"},
		{keyspace.String, "\x00ab"}, // a NUL byte first, at index 0
		{keyspace.String, "ab\x00"},
		{keyspace.ParamType("float64"), "1.5"},
		{keyspace.ParamType(""), ""},
	} {
		got, err := keyspace.Canonical(tc.typ, tc.in)
		require.Error(t, err, "%s %q gave %q", tc.typ, tc.in, got)
		require.Empty(t, got)
		require.True(t, strings.HasPrefix(err.Error(), "keyspace: "), err.Error())
	}
}

func TestParseParamType(t *testing.T) {
	for _, pt := range keyspace.ParamTypes {
		got, err := keyspace.ParseParamType(string(pt))
		require.NoError(t, err)
		require.Equal(t, pt, got)
	}
	for _, bad := range []string{"", "Int64", "int", "text", "float64"} {
		_, err := keyspace.ParseParamType(bad)
		require.Error(t, err, "%q", bad)
	}
}

func TestParamTexts(t *testing.T) {
	require.Equal(t, "42", keyspace.Int64Param(42))
	require.Equal(t, "-9223372036854775808", keyspace.Int64Param(-1<<63))
	require.Equal(t, "true", keyspace.BoolParam(true))
	require.Equal(t, "false", keyspace.BoolParam(false))
	require.Equal(t, "acme", keyspace.StringParam("acme"))

	u := [16]byte{0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}
	require.Equal(t, "6ba7b810-9dad-11d1-80b4-00c04fd430c8", keyspace.UUIDParam(u))
	require.Equal(t, "00000000-0000-0000-0000-000000000000", keyspace.UUIDParam([16]byte{}))
	var ff [16]byte
	for i := range ff {
		ff[i] = 0xff
	}
	require.Equal(t, "ffffffff-ffff-ffff-ffff-ffffffffffff", keyspace.UUIDParam(ff))
	// Every byte lands in its own place.
	var seq [16]byte
	for i := range seq {
		seq[i] = byte(i * 0x11)
	}
	require.Equal(t, "00112233-4455-6677-8899-aabbccddeeff", keyspace.UUIDParam(seq))
	got, err := keyspace.Canonical(keyspace.UUID, keyspace.UUIDParam(seq))
	require.NoError(t, err)
	require.Equal(t, keyspace.UUIDParam(seq), got)
}
