package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"regexp"
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
	require.ErrorContains(t, err, "may not create lockgen's schema")
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

func hexSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
