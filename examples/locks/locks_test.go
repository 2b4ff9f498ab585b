package locks_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/examples/locks"
	"github.com/lockgen/lockgen/internal/decl"
	"github.com/lockgen/lockgen/internal/gogen"
	"github.com/lockgen/lockgen/keyspace"
	"github.com/lockgen/lockgen/pgadvisory"
)

// uuidLike stands for github.com/google/uuid.UUID: any named [16]byte type
// is assignable to the generated [16]byte parameter.
type uuidLike [16]byte

func TestGeneratedIDsFollowKeyspace(t *testing.T) {
	require.Equal(t, pgadvisory.Lock{Name: "reports.daily_email", ID: keyspace.ID("reports.daily_email")}, locks.ReportsDailyEmail)
	require.Equal(t, int64(-6078806957557529815), locks.ReportsDailyEmail.ID)

	// The pin keeps the legacy ID instead of the derived one.
	require.Equal(t, int64(72707), locks.MaintenanceNightlyCleanup.ID)
	require.NotEqual(t, keyspace.ID("maintenance.nightly_cleanup"), locks.MaintenanceNightlyCleanup.ID)

	inv := locks.BillingInvoice(42)
	require.Equal(t, "billing.invoice", inv.Name)
	require.Equal(t, keyspace.ParamID("billing.invoice", "42"), inv.ID)
	require.NotEqual(t, inv.ID, locks.BillingInvoice(43).ID)

	u := uuidLike{0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}
	arch := locks.ExportsTenantArchive(u, "pdf", true)
	require.Equal(t, keyspace.ParamID("exports.tenant_archive", "6ba7b810-9dad-11d1-80b4-00c04fd430c8", "pdf", "true"), arch.ID)
	require.NotEqual(t, arch.ID, locks.ExportsTenantArchive(u, "pdf", false).ID)

	// Declared options make the value differ from the bare lock (they ride
	// along as defaults); its name and ID are the declared ones.
	rb := locks.ReportsRebuildIndex
	require.Equal(t, "reports.rebuild_index", rb.Name)
	require.Equal(t, keyspace.ID("reports.rebuild_index"), rb.ID)
	require.NotEqual(t, pgadvisory.Lock{Name: rb.Name, ID: rb.ID}, rb)
}

func TestDeclaredRegistryIsComplete(t *testing.T) {
	src, err := os.ReadFile("locks.yaml")
	require.NoError(t, err)
	f, err := decl.Parse("locks.yaml", src)
	require.NoError(t, err)
	require.NoError(t, decl.Check(f, nil))

	require.Len(t, locks.Declared, len(f.Locks))
	values := map[string]pgadvisory.Lock{
		"maintenance.nightly_cleanup": locks.MaintenanceNightlyCleanup,
		"reports.daily_email":         locks.ReportsDailyEmail,
		"reports.rebuild_index":       locks.ReportsRebuildIndex,
	}
	for i, d := range locks.Declared {
		if i > 0 {
			require.Less(t, locks.Declared[i-1].Name, d.Name, "sorted by name")
		}
		l := f.Lookup(d.Name)
		require.NotNil(t, l, "%s is not declared in locks.yaml", d.Name)
		require.Equal(t, l.Doc, d.Doc)
		require.Len(t, d.Params, len(l.Params))
		for j, p := range d.Params {
			require.Equal(t, l.Params[j].Name, p.Name)
			require.Equal(t, l.Params[j].Type, p.Type)
		}
		if len(d.Params) > 0 {
			require.Zero(t, d.ID)
			continue
		}
		require.Equal(t, values[d.Name].ID, d.ID, d.Name)
		require.Equal(t, !d.Pinned, d.ID == keyspace.ID(d.Name), "%s: Pinned says whether the ID is derived", d.Name)
	}
	rb := locks.Declared[len(locks.Declared)-1]
	require.Equal(t, "reports.rebuild_index", rb.Name)
	require.True(t, rb.Shared)
	require.True(t, rb.Wait)
	require.Equal(t, "5s", rb.WaitTimeout.String())
}

// TestGeneratedFileIsFresh fails when locks_gen.go does not match
// locks.yaml, like lockgen check does in CI.
func TestGeneratedFileIsFresh(t *testing.T) {
	loaded, err := decl.Load("locks.yaml", decl.LoadOptions{})
	require.NoError(t, err)
	out := loaded.Output
	gen, err := gogen.Emit(loaded.File)
	require.NoError(t, err)
	require.True(t, out.Fresh(gen), "locks_gen.go is stale: run go generate ./examples/locks\n%s",
		gogen.Diff(out.Path, out.Path+" (generated)", out.Src, gen))

	// Control: a changed declaration makes it stale.
	src, err := os.ReadFile("locks.yaml")
	require.NoError(t, err)
	changed, err := decl.LoadBytes("locks.yaml", append(src, []byte("  - name: reports.extra\n")...), out.Src)
	require.NoError(t, err)
	changedGen, err := gogen.Emit(changed.File)
	require.NoError(t, err)
	require.False(t, changed.Output.Fresh(changedGen))
}
