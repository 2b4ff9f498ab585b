package migrations_test

import (
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/migrated"
)

// securityDefiner lists the functions of pgadvisory that run as their
// owner, and why each must.
var securityDefiner = map[string]string{
	// Publishes a fresh token for a caller that holds the locks: callers
	// need no privilege on pgadvisory.fence or the sequence.
	"pgadvisory.fence_acquire(bigint[],boolean,text,text)": "publish",
	// Publishes a leader's term for a caller that holds the lock.
	"pgadvisory.leader_elect(bigint,text,text)": "publish",
	// Take, renew and vacate a row of pgadvisory.lease for the holder of
	// its owner secret; lease_acquire publishes the term through
	// leader_elect. Callers need no privilege on lockgen's tables.
	"pgadvisory.lease_acquire(bigint,text,uuid,interval,text)": "lease",
	"pgadvisory.lease_renew(bigint[],uuid,interval)":           "lease",
	"pgadvisory.lease_release(bigint,uuid)":                    "lease",
	// Reads pgadvisory.leader and pgadvisory.fence for any reader.
	"pgadvisory.current_leader(bigint)": "read",
	// The per-lock check: locks a fence row FOR SHARE (needs UPDATE on
	// pgadvisory.fence). Owner only: called by the trigger functions below.
	"pgadvisory.fence_require_current(bigint,bigint,text,text[])": "check",
	// Trigger functions that lock fence rows FOR SHARE for writers without
	// privileges on pgadvisory.fence; each checks its table in
	// pgadvisory.fenced_table and the types of the columns it reads.
	"pgadvisory.fence_check_statement()": "trigger",
	"pgadvisory.fence_check()":           "trigger",
	"pgadvisory.fence_check_param()":     "trigger",
	"pgadvisory.fence_truncate_guard()":  "trigger",
	// Sets finished_at in pgadvisory.run_once at commit; refuses any other
	// table.
	"pgadvisory.run_once_finish()": "trigger",
	// Write pgadvisory.fenced_table; owner only (and the roles it grants).
	"pgadvisory.fence_register(regclass,text,text,text[])": "registry",
	"pgadvisory.fence_unregister(regclass)":                "registry",
	// Moves the token sequence after a restore; owner only (and the roles
	// it grants).
	"pgadvisory.fence_advance(bigint)": "restore",
}

// publicExecute lists the functions PUBLIC may execute: what applications
// call.
var publicExecute = map[string]string{
	"pgadvisory.lock_id(text,text[])":                      "pure: the lock ID rule",
	"pgadvisory.valid_lock_name(text)":                     "pure: the lock name rule",
	"pgadvisory.register_instance(text,text[])":            "runs as the caller, who needs the registry's table rights",
	"pgadvisory.fence_acquire(bigint[],boolean,text,text)": "every fenced acquisition; publishes only for a caller holding the locks",
	"pgadvisory.fence_handover()":                          "every fenced acquisition; runs as the caller",
	"pgadvisory.leader_elect(bigint,text,text)":            "every election; publishes only for a caller holding the lock",
	"pgadvisory.current_leader(bigint)":                    "pgadvisory.CurrentLeader; reads one leader row",
	// Leases (WithLease): whoever may elect a leader may take a lease; a
	// lease is renewed or released only with its owner secret.
	"pgadvisory.lease_acquire(bigint,text,uuid,interval,text)": "every lease acquisition; takes only a vacant or expired lease",
	"pgadvisory.lease_renew(bigint[],uuid,interval)":           "every renewal; renews only the leases of the owner secret",
	"pgadvisory.lease_release(bigint,uuid)":                    "every resignation; vacates only the lease of the owner secret",
}

// TestSecurityCatalog: every function of pgadvisory pins its search_path;
// the SECURITY DEFINER functions are the listed ones, and PUBLIC may
// execute only the listed ones.
func TestSecurityCatalog(t *testing.T) {
	db := migrated.DB(t)
	rows, err := db.Query(`SELECT p.oid::regprocedure::text, p.prosecdef,
			COALESCE('search_path=pg_catalog, pg_temp' = ANY (p.proconfig), false),
			EXISTS (SELECT FROM aclexplode(COALESCE(p.proacl, acldefault('f', p.proowner))) AS a
			        WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')
		FROM pg_proc AS p WHERE p.pronamespace = 'pgadvisory'::regnamespace`)
	require.NoError(t, err)
	defer rows.Close()
	var definers, public, unpinned []string
	n := 0
	for rows.Next() {
		var name string
		var definer, pinned, exec bool
		require.NoError(t, rows.Scan(&name, &definer, &pinned, &exec))
		n++
		if definer {
			definers = append(definers, name)
		}
		if exec {
			public = append(public, name)
		}
		if !pinned {
			unpinned = append(unpinned, name)
		}
	}
	require.NoError(t, rows.Err())
	require.NotZero(t, n)
	require.Empty(t, unpinned, "functions without search_path = pg_catalog, pg_temp")
	require.ElementsMatch(t, keys(securityDefiner), definers, "SECURITY DEFINER functions")
	require.ElementsMatch(t, keys(publicExecute), public, "functions PUBLIC may execute")
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
