package fencegen_test

import (
	"io/fs"

	"github.com/lockgen/lockgen/migrations"
)

// migrationsFS is lockgen's own migrations.
func migrationsFS() fs.FS { return migrations.FS }
