package keyspace_test

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/lockgen/lockgen/keyspace"
)

// nameGrammar is the documented name rule as a regular expression, the
// oracle ValidateName is fuzzed against.
var nameGrammar = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$`)

// FuzzValidateName: ValidateName never panics, agrees with the documented
// grammar, accepts its own accepted names again, and reports offsets within
// the name (or at its end).
func FuzzValidateName(f *testing.F) {
	for _, s := range []string{
		"", "a", "reports.daily_email", "a..b", "a.", ".a", "1a", "a._b", "Abc",
		"a-b", "grüße", "a\x00", "a\n", strings.Repeat("a", keyspace.MaxNameLength),
		strings.Repeat("a", keyspace.MaxNameLength+1), "\xff\xfe",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := keyspace.ValidateName(name)
		want := len(name) <= keyspace.MaxNameLength && nameGrammar.MatchString(name)
		if (err == nil) != want {
			t.Fatalf("ValidateName(%q) = %v, grammar says valid=%v", name, err, want)
		}
		if err == nil {
			if err := keyspace.ValidateName(strings.Clone(name)); err != nil {
				t.Fatalf("accepted %q, then rejected it: %v", name, err)
			}
			return
		}
		var ne *keyspace.NameError
		if !errors.As(err, &ne) {
			t.Fatalf("ValidateName(%q) returned %T, want *NameError", name, err)
		}
		if ne.Name != name {
			t.Fatalf("NameError.Name = %q, want %q", ne.Name, name)
		}
		if ne.Offset < 0 || ne.Offset > len(name) {
			t.Fatalf("ValidateName(%q): offset %d outside [0, %d]", name, ne.Offset, len(name))
		}
		if ne.Reason == "" || !strings.Contains(err.Error(), "at byte "+strconv.Itoa(ne.Offset)) {
			t.Fatalf("ValidateName(%q): unhelpful error %q", name, err)
		}
		// Up to the offset the name was fine: the prefix is a valid name or
		// the start of one (valid once a letter is appended).
		if ne.Offset > 0 && ne.Offset <= keyspace.MaxNameLength-1 {
			prefix := name[:ne.Offset]
			if !nameGrammar.MatchString(prefix) && !nameGrammar.MatchString(prefix+"a") {
				t.Fatalf("ValidateName(%q): offset %d, but the prefix %q is already invalid", name, ne.Offset, prefix)
			}
		}
	})
}

// FuzzParamID: ParamID never panics, is deterministic, follows Key, and Key
// decodes back to the name and parameters whenever the name has no NUL byte.
func FuzzParamID(f *testing.F) {
	f.Add("reports.daily_email", "", "", "", uint8(0))
	f.Add("billing.invoice", "42", "", "", uint8(1))
	f.Add("exports.customer", "acme", "2026-12-02", "", uint8(2))
	f.Add("exports.customer", "", "", "", uint8(2))
	f.Add("a", "\x00\x00\x00\x00\x01a", "\x00", "ü", uint8(3))
	f.Add("", "\xff", "", "", uint8(1))
	f.Fuzz(func(t *testing.T, name, a, b, c string, n uint8) {
		params := []string{a, b, c}[:n%4]
		id := keyspace.ParamID(name, params...)
		if again := keyspace.ParamID(strings.Clone(name), params...); again != id {
			t.Fatalf("ParamID not deterministic: %d then %d", id, again)
		}
		key := keyspace.Key(name, params...)
		if want := refID(key); id != want {
			t.Fatalf("ParamID = %d, hash of Key = %d", id, want)
		}
		if len(params) == 0 && id != keyspace.ID(name) {
			t.Fatalf("ParamID(%q) != ID(%q)", name, name)
		}
		if strings.IndexByte(name, 0) >= 0 {
			return
		}
		gotName, gotParams, err := decodeKey(key)
		if err != nil {
			t.Fatalf("Key(%q, %q) does not decode: %v", name, params, err)
		}
		if gotName != name || len(gotParams) != len(params) {
			t.Fatalf("Key(%q, %q) decodes to %q, %q", name, params, gotName, gotParams)
		}
		for i := range params {
			if gotParams[i] != params[i] {
				t.Fatalf("Key(%q, %q) decodes to %q, %q", name, params, gotName, gotParams)
			}
		}
	})
}
