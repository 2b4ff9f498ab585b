package main

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/lockgen/lockgen/pgadvisory"
)

// setupHint is the one command that fixes a server that is not set up for
// the example, from the error connecting, migrating or creating its tables:
// a missing database, a missing role, or a role without the rights the
// example needs. It returns "" for other errors.
func setupHint(ctx context.Context, db *sql.DB, url string, err error) string {
	cfg, perr := pgx.ParseConfig(url)
	if perr != nil {
		return ""
	}
	server := fmt.Sprintf("-h %s -p %d", cfg.Host, cfg.Port)
	switch pgadvisory.SQLState(err) {
	case "3D000": // invalid_catalog_name: the database does not exist
		return fmt.Sprintf("\nthe database %q does not exist; create it (or set LOCKGEN_DATABASE_URL to another one):\n\tcreatedb %s %s",
			cfg.Database, server, cfg.Database)
	case "28000": // invalid_authorization_specification: e.g. the role does not exist
		return fmt.Sprintf("\nthe role %q cannot log in; as a superuser, create it as the owner of its database:\n\tcreateuser %s --createdb %s",
			cfg.User, server, cfg.User)
	case "42501": // insufficient_privilege
		grants, owner, qerr := missingGrants(ctx, db)
		if qerr != nil || len(grants) == 0 {
			return ""
		}
		hint := fmt.Sprintf("\nthe role %q lacks rights the example needs; as the database's owner or a superuser, grant them:\n\tpsql %s -d %s -c '%s'",
			cfg.User, server, cfg.Database, strings.Join(grants, "; "))
		if owner != "" {
			hint += fmt.Sprintf("\nlockgen's schema belongs to %s and has migrations pending, which only %s can apply:\n\tlockgen migrate up -db 'postgres://%s@%s:%d/%s'",
				owner, owner, owner, cfg.Host, cfg.Port, cfg.Database)
		}
		return hint
	}
	return ""
}

// missingGrants lists the GRANT statements that give the current role what
// the example needs and lacks: CREATE on the database (its own schema, and
// lockgen's when nobody created it); where lockgen's version table does not
// exist yet, CREATE on schema public (Migrate creates the table there);
// where it exists, SELECT on it (Migrate reads it); and on lockgen's
// run-once ledger, SELECT, INSERT (RunOnce) and DELETE (the example clears
// its own row); EXECUTE on the functions that fence its table (the trigger
// functions and pgadvisory.fence_register, which only the owner of
// lockgen's schema may execute until it grants them). owner is set when lockgen's schema belongs to another role
// and migrations are pending: only that role can apply them.
func missingGrants(ctx context.Context, db *sql.DB) (grants []string, owner string, err error) {
	var role, database string
	var createDB, createPublic, hasTable, readTable, hasLedger, useLedger, fence bool
	var tableOwner sql.NullString
	err = db.QueryRowContext(ctx, `SELECT pg_catalog.quote_ident(current_user), pg_catalog.quote_ident(pg_catalog.current_database()),
		pg_catalog.has_database_privilege(pg_catalog.current_database(), 'CREATE'),
		pg_catalog.has_schema_privilege('public', 'CREATE'),
		t.oid IS NOT NULL,
		t.oid IS NOT NULL AND pg_catalog.has_table_privilege(t.oid, 'SELECT'),
		pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(t.relowner)),
		l.oid IS NOT NULL,
		l.oid IS NOT NULL AND pg_catalog.has_table_privilege(l.oid, 'SELECT, INSERT, DELETE'),
		(SELECT pg_catalog.bool_and(f.oid IS NULL OR pg_catalog.has_function_privilege(f.oid, 'EXECUTE'))
		 FROM pg_catalog.unnest($2::text[]) AS n(name), pg_catalog.to_regprocedure(n.name) AS f(oid))
		FROM (SELECT) AS one
		LEFT JOIN pg_catalog.pg_class AS t ON t.oid = pg_catalog.to_regclass($1)
		LEFT JOIN pg_catalog.pg_class AS l ON l.oid = pg_catalog.to_regclass('pgadvisory.run_once')`, pgadvisory.MigrationTable, fenceFunctions).
		Scan(&role, &database, &createDB, &createPublic, &hasTable, &readTable, &tableOwner, &hasLedger, &useLedger, &fence)
	if err != nil {
		return nil, "", err
	}
	if !createDB {
		grants = append(grants, fmt.Sprintf("GRANT CREATE ON DATABASE %s TO %s", database, role))
	}
	switch {
	case !hasTable && !createPublic:
		grants = append(grants, "GRANT CREATE ON SCHEMA public TO "+role)
	case hasTable && !readTable:
		grants = append(grants, fmt.Sprintf("GRANT SELECT ON %s TO %s", pgadvisory.MigrationTable, role))
	}
	if hasLedger && !useLedger {
		grants = append(grants, "GRANT SELECT, INSERT, DELETE ON pgadvisory.run_once TO "+role)
	}
	if !fence {
		grants = append(grants, "GRANT EXECUTE ON FUNCTION "+strings.Join(fenceFunctions, ", ")+" TO "+role)
	}
	if hasTable && tableOwner.Valid && tableOwner.String != role {
		m, merr := pgadvisory.NewMigrator(db)
		if merr == nil {
			if v, verr := m.SchemaVersion(ctx); verr == nil && v < m.Latest() {
				owner = tableOwner.String
			}
		}
	}
	return grants, owner, nil
}

// fenceFunctions are the functions of lockgen's schema that fencing the
// example's table names (fenceStatements).
var fenceFunctions = []string{
	"pgadvisory.fence_stamp()",
	"pgadvisory.fence_check_statement()",
	"pgadvisory.fence_truncate_guard()",
	"pgadvisory.fence_register(regclass,text,text,text[])",
}
