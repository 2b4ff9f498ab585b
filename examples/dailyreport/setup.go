package main

import (
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/lockgen/lockgen/pgadvisory"
)

// setupHint is the one command that fixes a server that is not set up for
// the example, from the error connecting or migrating: a missing database,
// a missing role, or a role without the rights Migrate needs (CREATE on the
// database for the schema pgadvisory, and on schema public for lockgen's
// version table). It returns "" for other errors.
func setupHint(url string, err error) string {
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
		return fmt.Sprintf("\nthe role %q may not create lockgen's schema; as the database's owner or a superuser, grant it:\n\tpsql %s -d %s -c 'GRANT CREATE ON DATABASE %s TO %s; GRANT CREATE ON SCHEMA public TO %s'",
			cfg.User, server, cfg.Database, pgx.Identifier{cfg.Database}.Sanitize(), pgx.Identifier{cfg.User}.Sanitize(), pgx.Identifier{cfg.User}.Sanitize())
	}
	return ""
}
