package doctor_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/doctor"
	"github.com/lockgen/lockgen/keyspace"
	"github.com/lockgen/lockgen/pgadvisory"
)

func TestRegistry(t *testing.T) {
	ctx := context.Background()
	plain := pgadvisory.Declared{Name: "reports.daily_email", ID: keyspace.ID("reports.daily_email")}
	param := pgadvisory.Declared{Name: "billing.invoice", Params: []pgadvisory.DeclaredParam{{Name: "tenant_id", Type: keyspace.Int64}}}
	old := pgadvisory.Declared{Name: "reports.legacy_export", ID: keyspace.ID("reports.legacy_export")}
	decls := func(d ...pgadvisory.Declared) doctor.Config { return doctor.Config{Declared: d, Source: "locks.yaml"} }

	url := emptyDatabase(t, nil)
	requireStatus(t, run(t, url, doctor.Registry), doctor.Pass, "not checked: no declarations file")
	requireStatus(t, run(t, url, doctor.Registry, decls(plain)), doctor.Warn, "the registry (migration 00003")

	_, err := migrator(t, url).Up(ctx)
	require.NoError(t, err)
	db := openPlain(t, url)
	requireStatus(t, run(t, url, doctor.Registry, decls(plain, param)), doctor.Warn,
		"declared in locks.yaml but not registered (lockgen status shows their raw keys): reports.daily_email, billing.invoice")

	require.NoError(t, pgadvisory.Register(ctx, db, []pgadvisory.Declared{plain, param, old}))
	c := run(t, url, doctor.Registry, decls(plain, param))
	requireStatus(t, c, doctor.Warn, "registered but not declared in locks.yaml", "reports.legacy_export")
	require.Contains(t, c.Fix, "DELETE FROM pgadvisory.registry_declaration WHERE name IN ('reports.legacy_export')")
	require.NotContains(t, c.Detail, "not registered (")

	pinned := plain
	pinned.ID, pinned.Pinned = 4242, true
	requireStatus(t, run(t, url, doctor.Registry, decls(pinned, param, old)), doctor.Warn,
		"registered differently than declared: reports.daily_email (registered with ID "+strconv.FormatInt(keyspace.ID("reports.daily_email"), 10)+", declared ID 4242)")

	requireStatus(t, run(t, url, doctor.Registry, decls(plain, param, old)), doctor.Pass, "the registry holds the 3 lock(s) locks.yaml declares")

	// The parameters changed, their number did not: tenant_id int64 became
	// customer_uuid uuid. Doctor compared only the count and passed it.
	retyped := param
	retyped.Params = []pgadvisory.DeclaredParam{{Name: "customer_uuid", Type: keyspace.UUID}}
	c = run(t, url, doctor.Registry, decls(plain, retyped, old))
	requireStatus(t, c, doctor.Warn, "registered differently than declared: billing.invoice (registered with (tenant_id int64), declared with (customer_uuid uuid))")
	require.Contains(t, c.Fix, "lockgen register -f locks.yaml")
	renamed := param
	renamed.Params = []pgadvisory.DeclaredParam{{Name: "account_id", Type: keyspace.Int64}}
	requireStatus(t, run(t, url, doctor.Registry, decls(plain, renamed, old)), doctor.Warn, "declared with (account_id int64)")
	retypedOnly := param
	retypedOnly.Params = []pgadvisory.DeclaredParam{{Name: "tenant_id", Type: keyspace.String}}
	requireStatus(t, run(t, url, doctor.Registry, decls(plain, retypedOnly, old)), doctor.Warn, "declared with (tenant_id string)")
	require.NoError(t, pgadvisory.Register(ctx, db, []pgadvisory.Declared{retyped}))
	requireStatus(t, run(t, url, doctor.Registry, decls(plain, retyped, old)), doctor.Pass, "as declared")
}
