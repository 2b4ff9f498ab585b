package migrations_test

// The SQL twin of package keyspace, pgadvisory.lock_id and
// pgadvisory.valid_lock_name (00001_lock_id.sql), held to the Go rule: the
// published vectors, random tuples of every parameter type, NULLs, and a
// control that the comparison catches a mismatch.

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/keyspace"
)

func TestSQLLockIDMatchesVectors(t *testing.T) {
	db := migrated.DB(t)

	for _, v := range readVectors(t) {
		require.Equal(t, v.ID, sqlLockID(t, db, v.Name, v.Params), "%q %q", v.Name, v.Params)
		require.Equal(t, v.ID, keyspace.ParamID(v.Name, v.Params...))
		if len(v.Params) == 0 {
			// The DEFAULT '{}' path: no VARIADIC argument at all.
			var id int64
			require.NoError(t, db.QueryRow(`SELECT pgadvisory.lock_id($1)`, v.Name).Scan(&id))
			require.Equal(t, v.ID, id)
		}
	}

	// The examples, written as a person would in psql.
	var daily, invoice int64
	require.NoError(t, db.QueryRow(`SELECT pgadvisory.lock_id('reports.daily_email'),
		pgadvisory.lock_id('billing.invoice', '42')`).Scan(&daily, &invoice))
	require.Equal(t, int64(-6078806957557529815), daily)
	require.Equal(t, keyspace.ParamID("billing.invoice", keyspace.Int64Param(42)), invoice)
}

// TestSQLLockIDMatchesGoRandom holds the SQL twin to Go on random tuples of
// valid names and canonical int64, uuid, bool and Unicode string parameters.
func TestSQLLockIDMatchesGoRandom(t *testing.T) {
	db := migrated.DB(t)

	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 2))
	for range 300 {
		name := randomName(r)
		require.NoError(t, keyspace.ValidateName(name))
		params := make([]string, r.IntN(5))
		for i := range params {
			params[i] = randomParam(r)
		}
		require.Equal(t, keyspace.ParamID(name, params...), sqlLockID(t, db, name, params), "%q %q", name, params)
	}
}

// TestSQLLockIDCheckerDetectsMismatch is the control for the two tests above:
// the comparison fails for a tuple in the wrong order or a parameter glued to
// the name.
func TestSQLLockIDCheckerDetectsMismatch(t *testing.T) {
	db := migrated.DB(t)

	goID := keyspace.ParamID("exports.customer", "acme", "2026-12-02")
	require.NotEqual(t, goID, sqlLockID(t, db, "exports.customer", []string{"2026-12-02", "acme"}))
	require.NotEqual(t, goID, sqlLockID(t, db, "exports.customeracme", []string{"2026-12-02"}))
	require.NotEqual(t, keyspace.ID("a"), sqlLockID(t, db, "a", []string{""}))
}

// TestSQLLockIDNulls: a NULL name or parameter gives NULL, never an ID that
// equals another tuple's (string_agg would silently skip NULL elements).
func TestSQLLockIDNulls(t *testing.T) {
	db := migrated.DB(t)

	for _, q := range []string{
		`SELECT pgadvisory.lock_id(NULL)`,
		`SELECT pgadvisory.lock_id(NULL, 'x')`,
		`SELECT pgadvisory.lock_id('a', NULL)`,
		`SELECT pgadvisory.lock_id('a', 'x', NULL)`,
		`SELECT pgadvisory.lock_id('a', NULL, 'x')`,
		`SELECT pgadvisory.lock_id('a', VARIADIC NULL::text[])`,
		`SELECT pgadvisory.lock_id('a', VARIADIC '{{x,y},{z,w}}'::text[])`,
	} {
		var id sql.NullInt64
		require.NoError(t, db.QueryRow(q).Scan(&id), q)
		require.False(t, id.Valid, "%s gave %d", q, id.Int64)
	}
	// Control: the same shapes without NULL do give IDs.
	var id sql.NullInt64
	require.NoError(t, db.QueryRow(`SELECT pgadvisory.lock_id('a', '', 'x')`).Scan(&id))
	require.True(t, id.Valid)
	require.Equal(t, keyspace.ParamID("a", "", "x"), id.Int64)
}

func TestSQLValidLockNameMatchesGo(t *testing.T) {
	db := migrated.DB(t)

	names := []string{
		"a", "reports.daily_email", "billing.invoice", "a1_b.c2.d_", strings.Repeat("a", 128),
		"", strings.Repeat("a", 129), ".a", "a..b", "a.", "1a", "_a", "a.1b", "Abc", "billing.Invoice",
		"a-b", "a b", "a\n", "a\nb", "grüße", "é", "a.b/c", "a\\.b", "a.b$", "^a", "a|b", "a*", "ａ",
		"\u212a", // KELVIN SIGN, which some case-insensitive matchers fold to k
	}
	r := rand.New(rand.NewPCG(rand.Uint64(), 3))
	for range 200 {
		name := randomName(r)
		if r.IntN(2) == 0 { // damage it at a random place
			b := []rune(name)
			b[r.IntN(len(b))] = []rune("A._-9 é\nZ")[r.IntN(9)]
			name = string(b)
		}
		names = append(names, name)
	}
	valid := 0
	for _, name := range names {
		var got bool
		require.NoError(t, db.QueryRow(`SELECT pgadvisory.valid_lock_name($1)`, name).Scan(&got), "%q", name)
		want := keyspace.ValidateName(name) == nil
		require.Equal(t, want, got, "%q", name)
		if want {
			valid++
		}
	}
	// Both outcomes were exercised.
	require.Greater(t, valid, 20)
	require.Greater(t, len(names)-valid, 20)
}

// readVectors reads keyspace's published vectors, the same file its Go test
// checks.
func readVectors(t *testing.T) []struct {
	Name   string   `json:"name"`
	Params []string `json:"params"`
	ID     int64    `json:"id"`
} {
	t.Helper()
	raw, err := os.ReadFile("../keyspace/testdata/vectors.json")
	require.NoError(t, err)
	var file struct {
		Vectors []struct {
			Name   string   `json:"name"`
			Params []string `json:"params"`
			ID     int64    `json:"id"`
		} `json:"vectors"`
	}
	require.NoError(t, json.Unmarshal(raw, &file))
	require.GreaterOrEqual(t, len(file.Vectors), 10)
	return file.Vectors
}

// sqlLockID is pgadvisory.lock_id(name, VARIADIC params).
func sqlLockID(t *testing.T, db *sql.DB, name string, params []string) int64 {
	t.Helper()
	if params == nil {
		params = []string{}
	}
	var id int64
	require.NoError(t, db.QueryRow(`SELECT pgadvisory.lock_id($1, VARIADIC $2::text[])`, name, params).Scan(&id),
		"%q %q", name, params)
	return id
}

const (
	nameStart = "abcdefghijklmnopqrstuvwxyz"
	nameRest  = "abcdefghijklmnopqrstuvwxyz0123456789_"
)

// randomName returns a valid lock name of one to four segments.
func randomName(r *rand.Rand) string {
	var b strings.Builder
	for s := range 1 + r.IntN(4) {
		if s > 0 {
			b.WriteByte('.')
		}
		b.WriteByte(nameStart[r.IntN(len(nameStart))])
		for range r.IntN(12) {
			b.WriteByte(nameRest[r.IntN(len(nameRest))])
		}
	}
	return b.String()
}

// randomParam returns the canonical text of a random int64, uuid, bool or
// Unicode string (valid UTF-8 without NUL, as SQL text requires).
func randomParam(r *rand.Rand) string {
	switch r.IntN(4) {
	case 0:
		switch r.IntN(4) {
		case 0:
			return keyspace.Int64Param(-1 << 63)
		case 1:
			return keyspace.Int64Param(r.Int64N(1000) - 500)
		}
		return keyspace.Int64Param(int64(r.Uint64()))
	case 1:
		var u [16]byte
		for i := range u {
			u[i] = byte(r.UintN(256))
		}
		return keyspace.UUIDParam(u)
	case 2:
		return keyspace.BoolParam(r.IntN(2) == 0)
	}
	pieces := []string{"", "a", "Z", " ", "-", "'", `"`, "\\", "\n", "\t", "\x01", "\x7f", "é", "ü", "ß",
		"世界", "😀", "\u00a0", "\u200b", "\ufeff", "Ω", "\U0010FFFF", "{", "}", ",", "NULL"}
	var b strings.Builder
	for range r.IntN(8) {
		b.WriteString(pieces[r.IntN(len(pieces))])
	}
	s := b.String()
	if c, err := keyspace.Canonical(keyspace.String, s); err != nil || c != s {
		panic(fmt.Sprintf("randomParam: %q is not a canonical string", s))
	}
	return s
}
