package keyspace_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/keyspace"
)

func TestValidateNameAccepts(t *testing.T) {
	for _, name := range []string{
		"a",
		"reports.daily_email",
		"billing.invoice",
		"a1_b.c2.d_",
		"a.b.c.d.e",
		"z9",
		strings.Repeat("a", keyspace.MaxNameLength),
		strings.Repeat("ab.", keyspace.MaxNameLength/3) + strings.Repeat("c", keyspace.MaxNameLength%3),
	} {
		require.NoError(t, keyspace.ValidateName(name), "%q", name)
	}
}

func TestValidateNameRejects(t *testing.T) {
	long := strings.Repeat("a", keyspace.MaxNameLength+1)
	for _, tc := range []struct {
		name   string
		offset int
		reason string // a substring of Reason
	}{
		{"", 0, "empty"},
		{long, keyspace.MaxNameLength, "longer than 128 bytes"},
		{strings.Repeat("A", 300), keyspace.MaxNameLength, "longer than"}, // length is checked first
		{".a", 0, "empty segment"},
		{"a..b", 2, "empty segment"},
		{"a.", 2, "ends with a dot"},
		{"a.b.", 4, "ends with a dot"},
		{".", 0, "empty segment"},
		{"1a", 0, "must start with a lowercase letter"},
		{"_a", 0, "must start with a lowercase letter"},
		{"a.1b", 2, "must start with a lowercase letter"},
		{"a._b", 2, "must start with a lowercase letter"},
		{"Abc", 0, "uppercase"},
		{"billing.Invoice", 8, "uppercase"},
		{"a-b", 1, `'-' is not allowed`},
		{"a b", 1, `' ' is not allowed`},
		{"a\x00", 1, `'\x00' is not allowed`},
		{"a\n", 1, `'\n' is not allowed`},
		{"grüße", 2, `'ü' is not allowed`}, // offset of the first byte of ü
		{"é", 0, `'é' is not allowed`},
		{"a\xff", 1, "invalid UTF-8"},
		{"a.b/c", 3, `'/' is not allowed`},
	} {
		err := keyspace.ValidateName(tc.name)
		require.Error(t, err, "%q", tc.name)
		var ne *keyspace.NameError
		require.True(t, errors.As(err, &ne), "%q: %T", tc.name, err)
		require.Equal(t, tc.name, ne.Name)
		require.Equal(t, tc.offset, ne.Offset, "%q: %v", tc.name, err)
		require.Contains(t, ne.Reason, tc.reason, "%q", tc.name)
		require.True(t, strings.HasPrefix(err.Error(), "keyspace: invalid lock name "), err.Error())
	}
}
