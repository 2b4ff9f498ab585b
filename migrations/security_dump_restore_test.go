package migrations_test

import (
	"context"
	"database/sql"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// A logical dump and restore (pg_dump into psql, or pg_dump -Fc into
// pg_restore) gives every table a new
// OID. The listing of fenced tables (pgadvisory.fenced_table and its copy
// in the fence rows) must follow the tables, not their old OIDs: after
// pgadvisory.fence_advance, as docs/fencing.md says for restores, the next
// holder's token writes to the restored table, and the token of the old
// timeline is refused. Another table is created first in the restored
// database, so that the fenced table's OID there differs from the source's.
func TestFenceListingSurvivesDumpRestore(t *testing.T) {
	for _, custom := range []bool{false, true} {
		name := "pg_dump into psql"
		if custom {
			name = "pg_dump -Fc into pg_restore"
		}
		t.Run(name, func(t *testing.T) { dumpRestoreAdvanceWrite(t, custom) })
	}
}

func dumpRestoreAdvanceWrite(t *testing.T, custom bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, srcURL := testdb.EmptyDatabase(t)
	src, err := sql.Open("pgx", srcURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = src.Close() })
	require.NoError(t, pgadvisory.Migrate(ctx, src))
	lock := testdb.Key(t)
	table := fencing.Table(t, src, "public", "orders", lock, "strict")
	old := fencing.Publish(t, src, lock)
	require.NoError(t, fencing.Write(src, old, `INSERT INTO `+table+` (id, balance) VALUES (1, 100)`))
	var srcOID uint32
	require.NoError(t, src.QueryRow(`SELECT $1::regclass::oid`, table).Scan(&srcOID))
	require.NoError(t, src.Close())

	dump := filepath.Join(t.TempDir(), "db.dump")
	format := "--format=plain"
	if custom {
		format = "--format=custom"
	}
	out, err := exec.CommandContext(ctx, pgcluster.Binary(t, "pg_dump"), format, "--no-owner", "-f", dump, srcURL).CombinedOutput()
	require.NoError(t, err, string(out))
	_, dstURL := testdb.EmptyDatabase(t)
	dst, err := sql.Open("pgx", dstURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = dst.Close() })
	_, err = dst.ExecContext(ctx, `CREATE TABLE public.before_restore (id int)`)
	require.NoError(t, err)
	restore := exec.CommandContext(ctx, pgcluster.Binary(t, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", dump, dstURL)
	if custom {
		restore = exec.CommandContext(ctx, pgcluster.Binary(t, "pg_restore"), "--exit-on-error", "--no-owner", "-d", dstURL, dump)
	}
	out, err = restore.CombinedOutput()
	require.NoError(t, err, string(out))
	var dstOID uint32
	require.NoError(t, dst.QueryRow(`SELECT $1::regclass::oid`, table).Scan(&dstOID))
	require.NotEqual(t, srcOID, dstOID, "the restore gave the table a new OID")

	var moved int64
	require.NoError(t, dst.QueryRow(`SELECT pgadvisory.fence_advance()`).Scan(&moved))
	next := fencing.Publish(t, dst, lock)
	require.Greater(t, next, old)
	require.NoError(t, fencing.Write(dst, next, `UPDATE `+table+` SET balance = 200 WHERE id = 1`),
		"the new holder's token writes to the restored table")
	require.Equal(t, map[int64]fencing.Row{1: {Balance: 200, Token: next}}, fencing.Rows(t, dst, table))
	sqlstate.Require(t, fencing.Write(dst, old, `UPDATE `+table+` SET balance = 300 WHERE id = 1`), codeStale,
		"the old timeline's token is refused")
	var listed, copied string
	require.NoError(t, dst.QueryRow(`SELECT array_agg(relid::oid)::text FROM pgadvisory.fenced_table`).Scan(&listed))
	require.Equal(t, fmt.Sprintf("{%d}", dstOID), listed, "the listing names the restored table")
	require.NoError(t, dst.QueryRow(`SELECT fenced_strict::oid[]::text FROM pgadvisory.fence WHERE lock_id = $1`, lock).Scan(&copied))
	require.Equal(t, listed, copied, "and so does the fence row's copy")
}
