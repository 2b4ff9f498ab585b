package fencing

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// PublishSQL is the runtime's publish statement (queries/fencing.sql,
// PublishFence) without its lock_timeout wrapper: $1 lock ID, $2 token.
const PublishSQL = `INSERT INTO pgadvisory.fence AS f (lock_id, token) VALUES ($1, $2)
ON CONFLICT (lock_id) DO UPDATE SET token = excluded.token, published_at = now()
WHERE f.token < excluded.token`

// Table creates schema.name and, unless policy is "", the row trigger
// fence_check of lockID with policy ("strict" or "permissive"), without
// the TRUNCATE guard. It returns the quoted, qualified name.
func Table(t testing.TB, db *sql.DB, schema, name string, lockID int64, policy string) string {
	t.Helper()
	tbl := pgx.Identifier{schema, name}.Sanitize()
	_, err := db.Exec(`CREATE TABLE ` + tbl + ` (id int PRIMARY KEY, balance int NOT NULL, fencing_token bigint)`)
	require.NoError(t, err)
	if policy != "" {
		_, err = db.Exec(fmt.Sprintf(`CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON %s
			FOR EACH ROW EXECUTE FUNCTION pgadvisory.fence_check('%d', '%s')`, tbl, lockID, policy))
		require.NoError(t, err)
	}
	return tbl
}

// GuardedTable creates schema.name as lockgen fence fences a table: the row
// trigger fence_check(lockID, policy) and the TRUNCATE guard, named as the
// generated migration names them. policy "" creates the table without
// triggers (the control). schema and name are used as given (unquoted).
func GuardedTable(t testing.TB, db *sql.DB, schema, name string, lockID int64, policy string) string {
	t.Helper()
	table := schema + "." + name
	ddl := `CREATE TABLE ` + table + ` (id int PRIMARY KEY, balance int NOT NULL, fencing_token bigint)`
	if policy != "" {
		args := fmt.Sprintf("'%d', '%s'", lockID, policy)
		ddl += `; CREATE TRIGGER zz_pgadvisory_fence BEFORE INSERT OR UPDATE OR DELETE ON ` + table +
			` FOR EACH ROW EXECUTE FUNCTION pgadvisory.fence_check(` + args + `)` +
			`; CREATE TRIGGER zz_pgadvisory_fence_truncate BEFORE TRUNCATE ON ` + table +
			` FOR EACH STATEMENT EXECUTE FUNCTION pgadvisory.fence_truncate_guard(` + args + `)`
	}
	_, err := db.Exec(ddl)
	require.NoError(t, err)
	return table
}

// Row is one row of a test table.
type Row struct{ Balance, Token int64 }

// Rows reads a test table by id; a NULL token reads as 0.
func Rows(t testing.TB, db *sql.DB, table string) map[int64]Row {
	t.Helper()
	rows, err := db.Query(`SELECT id, balance, COALESCE(fencing_token, 0) FROM ` + table)
	require.NoError(t, err)
	defer rows.Close()
	got := map[int64]Row{}
	for rows.Next() {
		var id int64
		var r Row
		require.NoError(t, rows.Scan(&id, &r.Balance, &r.Token))
		got[id] = r
	}
	require.NoError(t, rows.Err())
	return got
}

// Published is the token published for lockID (0: none).
func Published(t testing.TB, db *sql.DB, lockID int64) int64 {
	t.Helper()
	var tok int64
	err := db.QueryRow(`SELECT token FROM pgadvisory.fence WHERE lock_id = $1`, lockID).Scan(&tok)
	if errors.Is(err, sql.ErrNoRows) {
		return 0
	}
	require.NoError(t, err)
	return tok
}

// LastToken is the fencing sequence's last issued value.
func LastToken(t testing.TB, db *sql.DB) int64 {
	t.Helper()
	var n sql.NullInt64
	require.NoError(t, db.QueryRow(`SELECT last_value FROM pg_catalog.pg_sequences WHERE schemaname = 'pgadvisory' AND sequencename = 'fencing_token_seq'`).Scan(&n))
	return n.Int64
}

// NextToken draws a token as the lock statement does.
func NextToken(t testing.TB, db *sql.DB) int64 {
	t.Helper()
	var tok int64
	require.NoError(t, db.QueryRow(`SELECT nextval('pgadvisory.fencing_token_seq')`).Scan(&tok))
	return tok
}

// Publish publishes token for lockID with [PublishSQL] and reports whether
// it became current.
func Publish(t testing.TB, db *sql.DB, lockID, token int64) bool {
	t.Helper()
	res, err := db.Exec(PublishSQL, lockID, token)
	require.NoError(t, err)
	n, err := res.RowsAffected()
	require.NoError(t, err)
	return n == 1
}

// Write runs stmts in one transaction that carries token in the
// transaction-local setting pgadvisory.fencing_token (token 0: no setting),
// and commits it.
func Write(db *sql.DB, token int64, stmts ...string) error {
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if token != 0 {
		if _, err := tx.Exec(`SELECT set_config('pgadvisory.fencing_token', $1, true)`, fmt.Sprint(token)); err != nil {
			return err
		}
	}
	for _, s := range stmts {
		if _, err := tx.Exec(s); err != nil {
			return err
		}
	}
	return tx.Commit()
}
