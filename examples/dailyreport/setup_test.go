package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestRunPrintsTheCommandThatFixesTheServer: a server that is not set up
// for the example (no database, no role, a role without CREATE rights)
// makes run fail with the one command that fixes it; for the rights, the
// command's SQL really fixes it.
func TestRunPrintsTheCommandThatFixesTheServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base, err := url.Parse(testdb.URL(t))
	require.NoError(t, err)
	suffix := hexSuffix()

	missingDB := *base
	missingDB.Path = "/lockgen_missing_" + suffix
	err = run(ctx, missingDB.String(), nil)
	require.ErrorContains(t, err, "cannot reach PostgreSQL")
	require.ErrorContains(t, err, "\tcreatedb -h "+base.Hostname()+" -p ")
	require.ErrorContains(t, err, "lockgen_missing_"+suffix)

	role := "lockgen_role_" + suffix
	missingRole := *base
	missingRole.User = url.User(role)
	err = run(ctx, missingRole.String(), nil)
	require.ErrorContains(t, err, "\tcreateuser -h "+base.Hostname()+" -p ")
	require.ErrorContains(t, err, "--createdb "+role)

	// A role that may log in but not create lockgen's schema.
	admin := testdb.DB(t)
	_, err = admin.Exec(`CREATE ROLE ` + role + ` LOGIN`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = admin.Exec(`DROP ROLE IF EXISTS ` + role) }) // after the database is dropped
	name, dbURL := testdb.EmptyDatabase(t)
	asRole, err := url.Parse(dbURL)
	require.NoError(t, err)
	asRole.User = url.User(role)
	err = run(ctx, asRole.String(), nil)
	require.ErrorContains(t, err, "pgadvisory: migrate: ")
	require.ErrorContains(t, err, "lacks rights the example needs")
	m := regexp.MustCompile(`-c '([^']+)'`).FindStringSubmatch(err.Error())
	require.NotNil(t, m, err.Error())
	owner, err := sql.Open("pgx", dbURL)
	require.NoError(t, err)
	defer owner.Close()
	_, err = owner.Exec(m[1])
	require.NoError(t, err, "the printed command fixes it")
	roleDB, err := sql.Open("pgx", asRole.String())
	require.NoError(t, err)
	defer roleDB.Close()
	require.NoError(t, pgadvisory.Migrate(ctx, roleDB))
	_, err = owner.Exec(`DROP SCHEMA pgadvisory CASCADE; DROP TABLE ` + pgadvisory.MigrationTable + `; REVOKE ALL ON DATABASE "` + name + `" FROM ` + role + `; REVOKE ALL ON SCHEMA public FROM ` + role)
	require.NoError(t, err)
}

// TestGrantAdviceFixesTheVersionTable: lockgen's schema was applied by the
// database's owner, and the example runs as another role, which may not
// read lockgen's version table. The example used to advise GRANT CREATE on
// the database and schema public; after those, the same error and advice
// came back (the control below). It now names the grants the role lacks,
// and after them the example runs to the end.
func TestGrantAdviceFixesTheVersionTable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name, dbURL := testdb.EmptyDatabase(t)
	owner, err := sql.Open("pgx", dbURL)
	require.NoError(t, err)
	defer owner.Close()
	require.NoError(t, pgadvisory.Migrate(ctx, owner))
	admin := testdb.DB(t)
	role := "lockgen_role_" + hexSuffix()
	_, err = admin.Exec(`CREATE ROLE ` + role + ` LOGIN`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = admin.Exec(`DROP ROLE IF EXISTS ` + role) }) // after the database is dropped
	asRole, err := url.Parse(dbURL)
	require.NoError(t, err)
	asRole.User = url.User(role)
	t.Cleanup(func() { _, _ = owner.Exec(`DROP OWNED BY ` + role) })

	err = run(ctx, asRole.String(), nil)
	require.ErrorContains(t, err, "permission denied for table pgadvisory_db_version")
	first := err.Error()

	// Control: the advice of before does not fix it.
	_, err = owner.Exec(`GRANT CREATE ON DATABASE "` + name + `" TO ` + role + `; GRANT CREATE ON SCHEMA public TO ` + role)
	require.NoError(t, err)
	err = run(ctx, asRole.String(), nil)
	require.ErrorContains(t, err, "permission denied for table pgadvisory_db_version", "the same error comes back")

	m := regexp.MustCompile(`-c '([^']+)'`).FindStringSubmatch(first)
	require.NotNil(t, m, first)
	require.Contains(t, m[1], "GRANT SELECT ON public.pgadvisory_db_version TO "+role)
	_, err = owner.Exec(m[1])
	require.NoError(t, err, m[1])
	var out strings.Builder
	require.NoError(t, run(ctx, asRole.String(), &out), "the printed command fixes it")
	require.Contains(t, out.String(), "ok: exactly one report, stale write rejected")
}

func hexSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
