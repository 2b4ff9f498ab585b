package keyspace_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/keyspace"
)

func TestKeyLayout(t *testing.T) {
	for _, tc := range []struct {
		name   string
		params []string
		want   string
	}{
		{"a", nil, "a"},
		{"billing.invoice", []string{}, "billing.invoice"},
		{"a", []string{""}, "a\x00\x00\x00\x00\x00"},
		{"ab", []string{"xyz"}, "ab\x00\x00\x00\x00\x03xyz"},
		{"a", []string{"", ""}, "a\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"},
		{"n", []string{"42", "true"}, "n\x00\x00\x00\x00\x0242\x00\x00\x00\x00\x04true"},
		{"n", []string{"ü"}, "n\x00\x00\x00\x00\x02\xc3\xbc"}, // length in bytes, not runes
		{"n", []string{strings.Repeat("x", 0x1_02_03)}, "n\x00\x00\x01\x02\x03" + strings.Repeat("x", 0x1_02_03)},
	} {
		require.Equal(t, []byte(tc.want), keyspace.Key(tc.name, tc.params...), "%q %q", tc.name, tc.params)
	}
}

// refID is the ID rule written out once more, independently of the package.
func refID(key []byte) int64 {
	sum := sha256.Sum256(key)
	var v int64
	for _, b := range sum[:8] {
		v = v<<8 | int64(b)
	}
	return v
}

func TestParamIDFollowsKey(t *testing.T) {
	for _, name := range []string{"a", "reports.daily_email", "billing.invoice", ""} {
		require.Equal(t, keyspace.ID(name), keyspace.ParamID(name), "ParamID(name) == ID(name)")
		require.Equal(t, keyspace.ID(name), keyspace.ParamID(name, []string{}...))
		require.Equal(t, refID([]byte(name)), keyspace.ID(name))
		for _, params := range [][]string{{""}, {"42"}, {"acme", "2026-12-02"}, {"", "", ""}} {
			require.Equal(t, refID(keyspace.Key(name, params...)), keyspace.ParamID(name, params...))
		}
	}
	// A parameter changes the ID, even an empty one.
	require.NotEqual(t, keyspace.ParamID("a"), keyspace.ParamID("a", ""))
}

// decodeKey inverts keyspace.Key for names without a NUL byte (which valid
// names never contain). Its existence is what makes the encoding injective.
func decodeKey(key []byte) (name string, params []string, err error) {
	i := bytes.IndexByte(key, 0)
	if i < 0 {
		return string(key), []string{}, nil
	}
	name, rest := string(key[:i]), key[i:]
	params = []string{}
	for len(rest) > 0 {
		if len(rest) < 5 || rest[0] != 0 {
			return "", nil, fmt.Errorf("bad parameter header at %d", len(key)-len(rest))
		}
		n := binary.BigEndian.Uint32(rest[1:5])
		rest = rest[5:]
		if uint64(n) > uint64(len(rest)) {
			return "", nil, fmt.Errorf("parameter length %d overruns the key", n)
		}
		params = append(params, string(rest[:n]))
		rest = rest[n:]
	}
	return name, params, nil
}

// tupleGen draws (name, params) tuples from small alphabets of confusable
// pieces, so that an ambiguous encoding collides quickly.
type tupleGen struct{ r *rand.Rand }

var (
	confusableNames  = []string{"a", "ab", "a.b", "b", "a.b.c", "billing.invoice"}
	confusableParams = []string{
		"", "a", "b", "ab", "\x00", "\x00\x00", "\x00\x00\x00\x00\x00",
		"\x00\x00\x00\x00\x01a", "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00",
		"42", "-42", "true", "6ba7b810-9dad-11d1-80b4-00c04fd430c8", "ü",
	}
)

func (g tupleGen) next() (string, []string) {
	name := confusableNames[g.r.IntN(len(confusableNames))]
	params := make([]string, g.r.IntN(4))
	for i := range params {
		params[i] = confusableParams[g.r.IntN(len(confusableParams))]
	}
	return name, params
}

// firstCollision returns a description of two different tuples that encode
// to the same bytes, or "" when n draws found none.
func firstCollision(g tupleGen, n int, encode func(string, ...string) []byte) string {
	seen := map[string]string{} // key -> tuple
	for range n {
		name, params := g.next()
		tuple := fmt.Sprintf("%q%q", name, params)
		key := string(encode(name, params...))
		if prev, ok := seen[key]; ok && prev != tuple {
			return prev + " and " + tuple
		}
		seen[key] = tuple
	}
	return ""
}

func TestKeyInjective(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	g := tupleGen{rand.New(rand.NewPCG(seed, 1))}
	require.Empty(t, firstCollision(g, 20_000, keyspace.Key))

	// Every key decodes back to its tuple.
	for range 2_000 {
		name, params := g.next()
		gotName, gotParams, err := decodeKey(keyspace.Key(name, params...))
		require.NoError(t, err)
		require.Equal(t, name, gotName)
		require.Equal(t, append([]string{}, params...), gotParams)
	}
}

// TestKeyInjectiveCheckerDetectsCollisions is the control for TestKeyInjective:
// the same generator and checker catch encodings that drop the length or the
// separator.
func TestKeyInjectiveCheckerDetectsCollisions(t *testing.T) {
	g := tupleGen{rand.New(rand.NewPCG(1, 2))}
	noLength := func(name string, params ...string) []byte {
		return []byte(name + "\x00" + strings.Join(params, "\x00"))
	}
	noSeparator := func(name string, params ...string) []byte {
		var b []byte
		b = append(b, name...)
		for _, p := range params {
			b = append(b, p...)
		}
		return b
	}
	require.NotEmpty(t, firstCollision(g, 20_000, noLength))
	require.NotEmpty(t, firstCollision(g, 20_000, noSeparator))
}
