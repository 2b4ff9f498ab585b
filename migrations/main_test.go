package migrations_test

import (
	"testing"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// TestMain gives the package its own database (testdb) and drops it at the
// end.
func TestMain(m *testing.M) { testdb.Main(m) }
