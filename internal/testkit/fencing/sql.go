package fencing

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/decl"
	"github.com/lockgen/lockgen/internal/fencegen"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Table creates schema.name with the columns (id int PRIMARY KEY, balance
// int NOT NULL) and fences it as lockgen fence does, with a plain lock
// pinned to lockID and policy ("strict" or "permissive"): the current
// layout, TRUNCATE guard included ([Fence]). policy "" creates the table
// unfenced, with a plain fencing_token bigint column (the control). schema
// and name must be lowercase identifiers; it returns "schema.name".
func Table(t testing.TB, db *sql.DB, schema, name string, lockID int64, policy string) string {
	t.Helper()
	table := schema + "." + name
	_, err := db.Exec(`CREATE TABLE ` + table + ` (id int PRIMARY KEY, balance int NOT NULL)`)
	require.NoError(t, err)
	if policy == "" {
		_, err = db.Exec(`ALTER TABLE ` + table + ` ADD COLUMN fencing_token bigint`)
		require.NoError(t, err)
		return table
	}
	Fence(t, db, table, PlainLock(t, lockID), nil, policy)
	return table
}

// LegacyTable is [Table] in the first layout, as lockgen fence wrote it
// before lockgen's migration 00006: a BEFORE INSERT OR UPDATE OR DELETE row
// trigger pgadvisory.fence_check(lockID, policy) and the TRUNCATE guard.
func LegacyTable(t testing.TB, db *sql.DB, schema, name string, lockID int64, policy string) string {
	t.Helper()
	table := schema + "." + name
	args := fmt.Sprintf("'%d', '%s'", lockID, policy)
	_, err := db.Exec(`CREATE TABLE ` + table + ` (id int PRIMARY KEY, balance int NOT NULL, fencing_token bigint);
		CREATE TRIGGER ` + fencegen.RowTrigger + ` BEFORE INSERT OR UPDATE OR DELETE ON ` + table + `
			FOR EACH ROW EXECUTE FUNCTION pgadvisory.fence_check(` + args + `);
		CREATE TRIGGER ` + fencegen.TruncateTrigger + ` BEFORE TRUNCATE ON ` + table + `
			FOR EACH STATEMENT EXECUTE FUNCTION pgadvisory.fence_truncate_guard(` + args + `)`)
	require.NoError(t, err)
	ListAsFencedBefore(t, db, table, args)
	return table
}

// ListAsFencedBefore lists table in pgadvisory.fenced_table with the fence
// triggers' arguments args (SQL literals, as in CREATE TRIGGER: "'42',
// 'strict'"), as lockgen's migration 00008 lists the tables fenced before
// it: without fence_register's checks of the columns. It does nothing on a
// schema older than 00008 (no fenced_table).
func ListAsFencedBefore(t testing.TB, db *sql.DB, table, args string) {
	t.Helper()
	var exists bool
	require.NoError(t, db.QueryRow(`SELECT to_regclass('pgadvisory.fenced_table') IS NOT NULL`).Scan(&exists))
	if !exists {
		return
	}
	_, err := db.Exec(`INSERT INTO pgadvisory.fenced_table (relid, lock, policy, columns)
		SELECT $1::regclass, s.a[1], s.a[2], COALESCE(s.a[3:], '{}') FROM (SELECT ARRAY[`+args+`]::text[]) AS s(a)`, table)
	require.NoError(t, err)
}

// PlainLock declares a plain lock whose ID is pinned to lockID, checked as
// lockgen fence needs it.
func PlainLock(t testing.TB, lockID int64) *decl.Lock {
	t.Helper()
	return Declared(t, fmt.Sprintf("  - name: test.fenced\n    id: %d\n    fencing: true\n", lockID), "test.fenced")
}

// Declared declares the locks in entries (the items of a locks.yaml's
// locks: list, indented by two spaces) and returns name, checked.
func Declared(t testing.TB, entries, name string) *decl.Lock {
	t.Helper()
	loaded, err := decl.LoadBytes("locks.yaml", []byte("version: \"1\"\npackage: locks\nlocks:\n"+entries), nil)
	require.NoError(t, err)
	l := loaded.File.Lookup(name)
	require.NotNil(t, l, name)
	return l
}

// Fence applies the Up of the migration lockgen fence writes for table
// (schema.name) with lock, the parameter columns of a parameterized lock,
// and policy.
func Fence(t testing.TB, db *sql.DB, table string, lock *decl.Lock, columns []string, policy string) {
	t.Helper()
	require.NoError(t, ApplyFence(db, table, lock, columns, policy))
}

// ApplyFence is [Fence] returning the error of goose up's statements (for
// tests of the migration's refusals).
func ApplyFence(db *sql.DB, table string, lock *decl.Lock, columns []string, policy string) error {
	s, err := fencegen.NewSpec(lock, table, strings.Join(columns, ","), policy)
	if err != nil {
		return err
	}
	_, err = db.Exec(UpSQL(fencegen.Emit(s)))
	return err
}

// UpSQL is the Up section of a goose migration without goose's annotations.
func UpSQL(migration []byte) string {
	text := string(migration)
	_, up, _ := strings.Cut(text, "\n-- +goose Up\n")
	up, _, _ = strings.Cut(up, "\n-- +goose Down\n")
	var b strings.Builder
	for _, line := range strings.SplitAfter(up, "\n") {
		if !strings.HasPrefix(line, "-- +goose") {
			b.WriteString(line)
		}
	}
	return b.String()
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

// Published is the token published for lockID (0: none; the lock's fence
// row, made when a table was listed as fenced by it, has token NULL until
// it publishes).
func Published(t testing.TB, db *sql.DB, lockID int64) int64 {
	t.Helper()
	var tok sql.NullInt64
	err := db.QueryRow(`SELECT token FROM pgadvisory.fence WHERE lock_id = $1`, lockID).Scan(&tok)
	if errors.Is(err, sql.ErrNoRows) {
		return 0
	}
	require.NoError(t, err)
	return tok.Int64
}

// LastToken is the fencing sequence's last issued value.
func LastToken(t testing.TB, db *sql.DB) int64 {
	t.Helper()
	var n sql.NullInt64
	require.NoError(t, db.QueryRow(`SELECT last_value FROM pg_catalog.pg_sequences WHERE schemaname = 'pgadvisory' AND sequencename = 'fencing_token_seq'`).Scan(&n))
	return n.Int64
}

// NextToken draws a token from the fencing sequence without publishing it:
// a token that no holder ever published.
func NextToken(t testing.TB, db *sql.DB) int64 {
	t.Helper()
	var tok int64
	require.NoError(t, db.QueryRow(`SELECT nextval('pgadvisory.fencing_token_seq')`).Scan(&tok))
	return tok
}

// Publish makes a new holder of lockID publish a token, the way every
// holder does (pgadvisory.RunExclusive with WithFencing, fn doing nothing),
// and returns the token.
func Publish(t testing.TB, db *sql.DB, lockID int64) int64 {
	t.Helper()
	var tok int64
	require.NoError(t, pgadvisory.RunExclusive(context.Background(), db, lockID, func(tx *sql.Tx) error {
		var ok bool
		if tok, ok = pgadvisory.FencingToken(tx); !ok {
			return errors.New("fencing: no token in a fenced call")
		}
		return nil
	}, pgadvisory.WithFencing()))
	return tok
}

// PublishAhead leaves lockID's fence row with a token far ahead of the
// fencing sequence, as a sequence that went backwards (a restored backup,
// an asynchronous failover) leaves it, and returns that token.
func PublishAhead(t testing.TB, db *sql.DB, lockID int64) int64 {
	t.Helper()
	ahead := LastToken(t, db) + 1_000_000_000
	ForcePublished(t, db, lockID, ahead)
	return ahead
}

// ForcePublished overwrites lockID's token in its fence row with token (the
// row's other columns, such as the copy of the lock's fenced tables, stay),
// as an owner of lockgen's schema can: for states no holder can reach, and
// for databases whose schema predates the fenced acquisition (before
// migration 00005).
func ForcePublished(t testing.TB, db *sql.DB, lockID, token int64) {
	t.Helper()
	_, err := db.Exec(`INSERT INTO pgadvisory.fence AS f (lock_id, token) VALUES ($1, $2)
		ON CONFLICT (lock_id) DO UPDATE SET token = excluded.token`, lockID, token)
	require.NoError(t, err)
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
