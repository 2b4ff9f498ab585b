package migrations_test

import (
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/migrations"
)

// TestFilesAreGooseMigrations checks what goose relies on without a
// database: zero-padded, gap-free versions from 1, one Up and one Down
// section in that order, and balanced StatementBegin/End. The files are
// applied for real by pgadvisory's Migrate tests.
func TestFilesAreGooseMigrations(t *testing.T) {
	entries, err := fs.ReadDir(migrations.FS, ".")
	require.NoError(t, err)
	require.NotEmpty(t, entries)
	for i, e := range entries {
		m := fileName.FindStringSubmatch(e.Name())
		require.NotNil(t, m, "%s: want NNNNN_name.sql", e.Name())
		require.Equal(t, fmt.Sprintf("%05d", i+1), m[1], "versions must run 1, 2, … without gaps")

		raw, err := fs.ReadFile(migrations.FS, e.Name())
		require.NoError(t, err)
		text := string(raw)
		up := strings.Index(text, "\n-- +goose Up\n")
		down := strings.Index(text, "\n-- +goose Down\n")
		require.True(t, up >= 0 && down > up, "%s: needs -- +goose Up, then -- +goose Down", e.Name())
		require.Equal(t, 1, strings.Count(text, "-- +goose Up"), e.Name())
		require.Equal(t, 1, strings.Count(text, "-- +goose Down"), e.Name())
		begins := strings.Count(text, "-- +goose StatementBegin")
		require.Equal(t, begins, strings.Count(text, "-- +goose StatementEnd"), e.Name())
	}
}

var fileName = regexp.MustCompile(`^(\d{5})_[a-z0-9_]+\.sql$`)
