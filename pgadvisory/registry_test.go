package pgadvisory_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/generatedlocks"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/keyspace"
	"github.com/lockgen/lockgen/pgadvisory"
)

func TestRegisterGeneratedDeclarations(t *testing.T) {
	ctx := context.Background()
	db := migrated.DB(t)
	require.NoError(t, pgadvisory.Register(ctx, db, generatedlocks.Declared))

	names := make([]string, len(generatedlocks.Declared))
	for i, d := range generatedlocks.Declared {
		names[i] = d.Name
	}
	decls := declarationRows(t, db, `name = ANY($1)`, names)
	require.Len(t, decls, len(generatedlocks.Declared))
	require.Equal(t, int64(-6078806957557529815), decls["reports.daily_email"].LockID.Int64)
	require.Equal(t, "Sends the end-of-day report e-mail once per day.", decls["reports.daily_email"].Doc)
	require.Empty(t, decls["reports.daily_email"].DeclaredParams)
	require.Equal(t, int64(72707), decls["maintenance.nightly_cleanup"].LockID.Int64, "a pinned ID is registered as declared")
	archive := decls["exports.tenant_archive"]
	require.False(t, archive.LockID.Valid)
	require.JSONEq(t, `[{"name": "tenant_uuid", "type": "uuid"}, {"name": "kind", "type": "string"}, {"name": "full", "type": "bool"}]`,
		archive.DeclaredParams)
	// jsonb keeps array order: declaration order.
	require.Regexp(t, `^\[\{"name": "tenant_uuid".*"kind".*"full"`, archive.DeclaredParams)

	reg := registryRows(t, db, `name = ANY($1)`, names)
	require.Len(t, reg, 3, "one registry row per plain lock, none for parameterized ones")
	for _, d := range generatedlocks.Declared {
		if d.Params == nil {
			require.Equal(t, d.Name, reg[d.ID].Name)
			require.Equal(t, d.Doc, reg[d.ID].Doc)
			require.Empty(t, reg[d.ID].Params)
		}
	}
	// The migration's own lock is registered by the migration.
	require.Equal(t, "lockgen.migrate", registryRows(t, db, `lock_id = $1`, pgadvisory.MigrationLockID)[pgadvisory.MigrationLockID].Name)
}

// TestRegisterIsIdempotent: registering the same declarations again rewrites
// nothing (every replica does it at start-up); a changed doc is written.
func TestRegisterIsIdempotent(t *testing.T) {
	ctx := context.Background()
	db := migrated.DB(t)
	p := uniqueNamePrefix()
	decls := []pgadvisory.Declared{
		{Name: p + "a", ID: keyspace.ID(p + "a"), Doc: "one"},
		{Name: p + "b", Params: []pgadvisory.DeclaredParam{{Name: "n", Type: keyspace.Int64}}},
	}
	require.NoError(t, pgadvisory.Register(ctx, db, decls))
	where := `name LIKE $1`
	beforeReg, beforeDecl := registryRows(t, db, where, p+"%"), declarationRows(t, db, where, p+"%")
	require.Len(t, beforeReg, 1)
	require.Len(t, beforeDecl, 2)

	require.NoError(t, pgadvisory.Register(ctx, db, decls))
	require.Equal(t, beforeReg, registryRows(t, db, where, p+"%"))
	require.Equal(t, beforeDecl, declarationRows(t, db, where, p+"%"))

	// Control: a change is written, and only the changed rows.
	decls[0].Doc = "two"
	require.NoError(t, pgadvisory.Register(ctx, db, decls))
	afterReg, afterDecl := registryRows(t, db, where, p+"%"), declarationRows(t, db, where, p+"%")
	require.Equal(t, "two", afterReg[decls[0].ID].Doc)
	require.NotEqual(t, beforeReg[decls[0].ID].Xmin, afterReg[decls[0].ID].Xmin)
	require.Equal(t, "two", afterDecl[p+"a"].Doc)
	require.Equal(t, beforeDecl[p+"b"], afterDecl[p+"b"])
}

// TestRegisterKeptIDTakesTheLastName: a rename with on_rename: keep_id gives
// the new name the old ID; during the rollout both versions register, and
// the ID shows the name registered last. Both declarations stay.
func TestRegisterKeptIDTakesTheLastName(t *testing.T) {
	ctx := context.Background()
	db := migrated.DB(t)
	p := uniqueNamePrefix()
	id := keyspace.ID(p + "old")
	old := []pgadvisory.Declared{{Name: p + "old", ID: id}}
	renamed := []pgadvisory.Declared{{Name: p + "new", ID: id, Pinned: true}}
	require.NoError(t, pgadvisory.Register(ctx, db, old))
	require.NoError(t, pgadvisory.Register(ctx, db, renamed))
	require.Equal(t, p+"new", registryRows(t, db, `lock_id = $1`, id)[id].Name)
	require.NoError(t, pgadvisory.Register(ctx, db, old))
	require.Equal(t, p+"old", registryRows(t, db, `lock_id = $1`, id)[id].Name)
	require.Len(t, declarationRows(t, db, `name LIKE $1`, p+"%"), 2)
}

func TestRegisterRefusesBadDeclarations(t *testing.T) {
	ctx := context.Background()
	db := migrated.DB(t)
	p := uniqueNamePrefix()
	good := pgadvisory.Declared{Name: p + "good", ID: keyspace.ID(p + "good")}
	for what, bad := range map[string]pgadvisory.Declared{
		"invalid name":    {Name: p + "Bad", ID: keyspace.ID(p + "Bad")},
		"duplicate name":  good,
		"duplicate ID":    {Name: p + "other", ID: good.ID, Pinned: true},
		"unpinned ID":     {Name: p + "unpinned", ID: 42},
		"parameter type":  {Name: p + "param", Params: []pgadvisory.DeclaredParam{{Name: "n", Type: "int32"}}},
		"parameter name":  {Name: p + "noname", Params: []pgadvisory.DeclaredParam{{Type: keyspace.Int64}}},
		"zero-value lock": {},
	} {
		err := pgadvisory.Register(ctx, db, []pgadvisory.Declared{good, bad})
		require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument, what)
		require.ErrorContains(t, err, "pgadvisory: register: ", what)
		require.Empty(t, declarationRows(t, db, `name LIKE $1`, p+"%"), "%s: nothing may be written", what)
	}
	// Control: the good one alone is registered.
	require.NoError(t, pgadvisory.Register(ctx, db, []pgadvisory.Declared{good}))
	require.Len(t, declarationRows(t, db, `name LIKE $1`, p+"%"), 1)

	require.ErrorIs(t, pgadvisory.Register(ctx, nil, nil), pgadvisory.ErrInvalidArgument)
	require.NoError(t, pgadvisory.Register(ctx, db, nil), "nothing to register")
}

// TestRegisterConcurrently: replicas of two versions register at the same
// time, over and over; the upserts lock rows in one order, so none fails.
// (Checked when written: without the sorting in Register, this test fails
// with 40P01 deadlock detected.)
func TestRegisterConcurrently(t *testing.T) {
	ctx := context.Background()
	db := migrated.DB(t)
	p := uniqueNamePrefix()
	var v1, v2 []pgadvisory.Declared
	for i := range 20 {
		name := fmt.Sprintf("%sl%02d", p, i)
		v1 = append(v1, pgadvisory.Declared{Name: name, ID: keyspace.ID(name), Doc: "v1"})
		// v2 changes every doc and lists the locks in reverse order.
		v2 = append([]pgadvisory.Declared{{Name: name, ID: keyspace.ID(name), Doc: "v2"}}, v2...)
	}
	const replicas, rounds = 4, 10
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	for r := range replicas {
		decls := v1
		if r%2 == 1 {
			decls = v2
		}
		wg.Go(func() {
			for range rounds {
				if err := pgadvisory.Register(ctx, db, decls); err != nil {
					errs[r] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "replica %d", r)
	}
	require.Len(t, registryRows(t, db, `name LIKE $1`, p+"%"), 20)
}

func TestRegisterInstance(t *testing.T) {
	ctx := context.Background()
	db := migrated.DB(t)
	p := uniqueNamePrefix()
	archive := pgadvisory.Declared{Name: p + "archive", Doc: "Archives.", Params: []pgadvisory.DeclaredParam{
		{Name: "tenant_uuid", Type: keyspace.UUID}, {Name: "kind", Type: keyspace.String}, {Name: "full", Type: keyspace.Bool}}}
	plain := pgadvisory.Declared{Name: p + "plain", ID: keyspace.ID(p + "plain")}
	require.NoError(t, pgadvisory.Register(ctx, db, []pgadvisory.Declared{archive, plain}))

	u := [16]byte{0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8, 0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38, 0x0a, 0x11}
	params := []string{keyspace.UUIDParam(u), "it's ünïcode", keyspace.BoolParam(true)}
	lock := pgadvisory.Lock{Name: archive.Name, ID: keyspace.ParamID(archive.Name, params...)}
	require.NoError(t, pgadvisory.RegisterInstance(ctx, db, lock, params...))
	row := registryRows(t, db, `lock_id = $1`, lock.ID)[lock.ID]
	require.Equal(t, archive.Name, row.Name)
	require.JSONEq(t, `{"tenant_uuid": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "kind": "it's ünïcode", "full": "true"}`, row.Params)
	require.JSONEq(t, `[{"name": "tenant_uuid", "type": "uuid"}, {"name": "kind", "type": "string"}, {"name": "full", "type": "bool"}]`, row.DeclaredParams)
	require.Equal(t, "Archives.", row.Doc)
	// Again: nothing rewritten.
	require.NoError(t, pgadvisory.RegisterInstance(ctx, db, lock, params...))
	require.Equal(t, row, registryRows(t, db, `lock_id = $1`, lock.ID)[lock.ID])

	// The SQL function canonicalizes other spellings to the same ID as Go.
	var id int64
	require.NoError(t, db.QueryRow(`SELECT pgadvisory.register_instance($1, '{A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11}', $2, 'TRUE')`,
		archive.Name, params[1]).Scan(&id))
	require.Equal(t, lock.ID, id)
	n := testdb.Key(t)
	inv := pgadvisory.Declared{Name: p + "invoice", Params: []pgadvisory.DeclaredParam{{Name: "tenant_id", Type: keyspace.Int64}}}
	require.NoError(t, pgadvisory.Register(ctx, db, []pgadvisory.Declared{inv}))
	require.NoError(t, db.QueryRow(`SELECT pgadvisory.register_instance($1, '+0' || $2::bigint::text)`, inv.Name, n).Scan(&id))
	require.Equal(t, keyspace.ParamID(inv.Name, keyspace.Int64Param(n)), id)
	require.JSONEq(t, fmt.Sprintf(`{"tenant_id": "%d"}`, n), registryRows(t, db, `lock_id = $1`, id)[id].Params)

	// Parameters that do not give lock.ID: refused before the database.
	wrong := pgadvisory.Lock{Name: inv.Name, ID: keyspace.ParamID(inv.Name, "1")}
	err := pgadvisory.RegisterInstance(ctx, db, wrong, "2")
	require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument)
	require.Empty(t, registryRows(t, db, `lock_id = $1`, keyspace.ParamID(inv.Name, "2")))
	// Non-canonical text that the caller also hashed: the database
	// canonicalizes it to another ID, so the transaction rolls back.
	odd := pgadvisory.Lock{Name: inv.Name, ID: keyspace.ParamID(inv.Name, "+07")}
	err = pgadvisory.RegisterInstance(ctx, db, odd, "+07")
	require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument)
	require.ErrorContains(t, err, "not canonical")
	seven := keyspace.ParamID(inv.Name, "7")
	require.Empty(t, registryRows(t, db, `lock_id = ANY($1)`, []int64{odd.ID, seven}), "rolled back")
	// Control: the canonical spelling registers.
	require.NoError(t, pgadvisory.RegisterInstance(ctx, db, pgadvisory.Lock{Name: inv.Name, ID: seven}, "7"))
	require.Len(t, registryRows(t, db, `lock_id = $1`, seven), 1)

	// Undeclared names, plain locks, wrong counts, bad values: the
	// database refuses with a message naming the problem.
	for params, msg := range map[string]string{
		p + "undeclared|1": "is not in pgadvisory.registry_declaration",
		p + "invoice|1|2":  "takes 1 parameter(s), got 2",
		p + "invoice|abc":  "parameter tenant_id (int64): invalid input syntax",
	} {
		parts := strings.Split(params, "|")
		name, args := parts[0], parts[1:]
		err := pgadvisory.RegisterInstance(ctx, db, pgadvisory.Lock{Name: name, ID: keyspace.ParamID(name, args...)}, args...)
		require.ErrorContains(t, err, "pgadvisory: register instance: ", params)
		require.ErrorContains(t, err, msg, params)
	}
	err = pgadvisory.RegisterInstance(ctx, db, pgadvisory.Lock{Name: plain.Name, ID: plain.ID})
	require.ErrorIs(t, err, pgadvisory.ErrInvalidArgument, "a plain lock has no instances")
	_, err = db.Exec(`SELECT pgadvisory.register_instance($1)`, plain.Name)
	require.ErrorContains(t, err, "is a plain lock")
}

// TestRegisterWithoutMigrations: the error says what to do.
func TestRegisterWithoutMigrations(t *testing.T) {
	ctx := context.Background()
	db := testdb.DB(t)
	freshMigrationState(t, db)
	t.Cleanup(func() { require.NoError(t, pgadvisory.Migrate(ctx, db)) })

	err := pgadvisory.Register(ctx, db, generatedlocks.Declared)
	require.ErrorContains(t, err, "pgadvisory: register: the lock registry is missing: run pgadvisory.Migrate or goose up first")
	err = pgadvisory.RegisterInstance(ctx, db, generatedlocks.BillingInvoice(1), "1")
	require.ErrorContains(t, err, "the lock registry is missing")
	// Control: migrated, the same calls work.
	require.NoError(t, pgadvisory.Migrate(ctx, db))
	require.NoError(t, pgadvisory.Register(ctx, db, generatedlocks.Declared))
	require.NoError(t, pgadvisory.RegisterInstance(ctx, db, generatedlocks.BillingInvoice(1), "1"))
}

// uniqueNamePrefix is a lock-name prefix unique to one test.
func uniqueNamePrefix() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return "reg.t" + hex.EncodeToString(b) + "."
}

// registryRow is a row of pgadvisory.registry, with xmin to see rewrites.
type registryRow struct {
	ID             int64
	Name           string
	Params         string // jsonb as text; "" for NULL
	DeclaredParams string
	Doc            string
	Xmin           string
}

func registryRows(t *testing.T, db *sql.DB, where string, args ...any) map[int64]registryRow {
	t.Helper()
	rows, err := db.Query(`SELECT lock_id, name, coalesce(params::text, ''), coalesce(declared_params::text, ''),
		coalesce(doc, ''), xmin::text FROM pgadvisory.registry WHERE `+where, args...)
	require.NoError(t, err)
	defer rows.Close()
	out := map[int64]registryRow{}
	for rows.Next() {
		var r registryRow
		require.NoError(t, rows.Scan(&r.ID, &r.Name, &r.Params, &r.DeclaredParams, &r.Doc, &r.Xmin))
		out[r.ID] = r
	}
	require.NoError(t, rows.Err())
	return out
}

// declarationRow is a row of pgadvisory.registry_declaration.
type declarationRow struct {
	LockID         sql.NullInt64
	DeclaredParams string
	Doc            string
	Xmin           string
}

func declarationRows(t *testing.T, db *sql.DB, where string, args ...any) map[string]declarationRow {
	t.Helper()
	rows, err := db.Query(`SELECT name, lock_id, coalesce(declared_params::text, ''), coalesce(doc, ''), xmin::text
		FROM pgadvisory.registry_declaration WHERE `+where, args...)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]declarationRow{}
	for rows.Next() {
		var name string
		var d declarationRow
		require.NoError(t, rows.Scan(&name, &d.LockID, &d.DeclaredParams, &d.Doc, &d.Xmin))
		out[name] = d
	}
	require.NoError(t, rows.Err())
	return out
}
