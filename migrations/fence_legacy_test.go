package migrations_test

import (
	"database/sql"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// Tables fenced in the first layout (lockgen fence before lockgen's
// migration 00006: a BEFORE ROW trigger pgadvisory.fence_check) keep their
// triggers, but 00006 replaces the functions behind them: a write's token
// is only its transaction's setting, never the row's column. The controls
// run the same writes on a database whose lockgen schema stops at version
// 3, with 00002's functions, and show what they let through.

func TestFenceLegacyTokenIsNeverInherited(t *testing.T) {
	db := migrated.DB(t)
	legacyWrites(t, db, testdb.Schema(t), false)
}

func TestFenceLegacyTokenInheritedControl(t *testing.T) {
	db := migrated.UpTo(t, 4) // a database of its own, dropped at the end
	_, err := db.Exec(`CREATE SCHEMA app`)
	require.NoError(t, err)
	legacyWrites(t, db, "app", true)
}

// legacyWrites runs token-less writes against a strict and a permissive
// table in the first layout: rows stamped by the current holder and by an
// older one. before00006 is the control: 00002's functions inherit the
// row's stamp as the token.
func legacyWrites(t *testing.T, db *sql.DB, schema string, before00006 bool) {
	lock := testdb.Key(t)
	strict := fencing.LegacyTable(t, db, schema, "strict", lock, "strict")
	permissive := fencing.LegacyTable(t, db, schema, "permissive", lock, "permissive")
	publish := func() int64 {
		if before00006 {
			// Schema version 4 has no fenced acquisition: set the state a
			// holder's publish left.
			tok := fencing.NextToken(t, db)
			fencing.ForcePublished(t, db, lock, tok)
			return tok
		}
		return fencing.Publish(t, db, lock)
	}
	old := publish()
	for _, tbl := range []string{strict, permissive} {
		require.NoError(t, fencing.Write(db, old, `INSERT INTO `+tbl+` (id, balance) VALUES (1, 100)`))
	}
	cur := publish()
	for _, tbl := range []string{strict, permissive} {
		require.NoError(t, fencing.Write(db, cur, `INSERT INTO `+tbl+` (id, balance) VALUES (2, 200)`))
	}

	// Strict, a token-less UPDATE of a row the current holder stamped.
	tokenless := fencing.Write(db, 0, `UPDATE `+strict+` SET balance = 0 WHERE id = 2`)
	// Strict, a token only in the column.
	column := fencing.Write(db, 0, fmt.Sprintf(`INSERT INTO %s VALUES (3, 300, %d)`, strict, cur))
	// Permissive, a token-less UPDATE of a row an older holder stamped.
	permissiveOld := fencing.Write(db, 0, `UPDATE `+permissive+` SET balance = 0 WHERE id = 1`)

	if before00006 {
		require.NoError(t, tokenless, "00002: the UPDATE inherits the row's current token and passes strict")
		require.NoError(t, column, "00002: the column is a token")
		sqlstate.Require(t, permissiveOld, codeStale, "00002: permissive refuses a token-less UPDATE with LF001")
		return
	}
	sqlstate.Require(t, tokenless, codeMissing)
	sqlstate.Require(t, column, codeMissing)
	require.NoError(t, permissiveOld, "permissive lets token-less writes pass, whatever the row's stamp")
	require.Equal(t, map[int64]fencing.Row{1: {Balance: 0}, 2: {Balance: 200, Token: cur}}, fencing.Rows(t, db, permissive), "stamped NULL")
	require.Equal(t, map[int64]fencing.Row{1: {Balance: 100, Token: old}, 2: {Balance: 200, Token: cur}}, fencing.Rows(t, db, strict))
	// The current token in the setting still writes, the old one does not.
	require.NoError(t, fencing.Write(db, cur, `UPDATE `+strict+` SET balance = 1 WHERE id = 1`))
	sqlstate.Require(t, fencing.Write(db, old, `UPDATE `+strict+` SET balance = 2 WHERE id = 2`), codeStale)
}
