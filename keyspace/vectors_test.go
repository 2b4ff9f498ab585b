package keyspace_test

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/keyspace"
)

// vector is one published entry of testdata/vectors.json.
type vector struct {
	Name   string   `json:"name"`
	Params []string `json:"params"`
	ID     int64    `json:"id"`
}

// loadVectors reads the published vectors; every language's test reads the
// same file.
func loadVectors(t *testing.T) []vector {
	t.Helper()
	raw, err := os.ReadFile("testdata/vectors.json")
	require.NoError(t, err)
	var file struct {
		Vectors []vector `json:"vectors"`
	}
	require.NoError(t, json.Unmarshal(raw, &file))
	require.GreaterOrEqual(t, len(file.Vectors), 10, "published vectors are only ever appended")
	return file.Vectors
}

// checkVector reports whether Go computes v's published ID.
func checkVector(v vector) error {
	if got := keyspace.ParamID(v.Name, v.Params...); got != v.ID {
		return fmt.Errorf("ParamID(%q, %q) = %d, published %d", v.Name, v.Params, got, v.ID)
	}
	if len(v.Params) == 0 {
		if got := keyspace.ID(v.Name); got != v.ID {
			return fmt.Errorf("ID(%q) = %d, published %d", v.Name, got, v.ID)
		}
	}
	return nil
}

func TestVectors(t *testing.T) {
	vs := loadVectors(t)
	for _, v := range vs {
		require.NoError(t, checkVector(v))
	}
	// The two examples, pinned independently of the file.
	require.Equal(t, int64(-6078806957557529815), keyspace.ID("reports.daily_email"))
	require.Equal(t, int64(5523548972130093449), keyspace.ParamID("billing.invoice", keyspace.Int64Param(42)))
}

// TestVectorsCheckerDetectsTampering is the control for TestVectors: a vector
// with a wrong ID, reordered parameters or a parameter moved into the name is
// caught.
func TestVectorsCheckerDetectsTampering(t *testing.T) {
	vs := loadVectors(t)
	var exports vector
	for _, v := range vs {
		if v.Name == "exports.customer" && len(v.Params) == 2 && v.Params[0] != "" {
			exports = v
		}
	}
	require.NotEmpty(t, exports.Name)

	bad := vs[0]
	bad.ID++
	require.Error(t, checkVector(bad), "off-by-one ID")

	swapped := exports
	swapped.Params = []string{exports.Params[1], exports.Params[0]}
	require.Error(t, checkVector(swapped), "parameter order must matter")

	merged := exports
	merged.Name = exports.Name + exports.Params[0]
	merged.Params = exports.Params[1:]
	require.Error(t, checkVector(merged), "a parameter must not be movable into the name")
}
