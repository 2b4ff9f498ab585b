package pgcluster_test

import (
	"testing"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }
