package status

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/lockgen/lockgen/pgadvisory"
)

// leaseSQL reads the leases held now (pgadvisory.WithLease: Lead, Campaign,
// RunSession), as pgadvisory.current_leader confirms a lease leader: held,
// not expired on the database's clock, and its term the lock's published
// token; with the registry's name where the role may read it.
const leaseSQL = `SELECT s.lock_id, r.name, r.params::text, r.declared_params::text, s.holder, s.term, s.since, s.expires_at
FROM pgadvisory.lease AS s
JOIN pgadvisory.fence AS f ON f.lock_id = s.lock_id AND f.token = s.term
LEFT JOIN pgadvisory.registry AS r ON r.lock_id = s.lock_id
WHERE s.owner_secret IS NOT NULL AND s.expires_at > pg_catalog.clock_timestamp()`

// leaseNamelessSQL is leaseSQL for a role that may not read the registry.
const leaseNamelessSQL = `SELECT s.lock_id, NULL::text, NULL::text, NULL::text, s.holder, s.term, s.since, s.expires_at
FROM pgadvisory.lease AS s
JOIN pgadvisory.fence AS f ON f.lock_id = s.lock_id AND f.token = s.term
WHERE s.owner_secret IS NOT NULL AND s.expires_at > pg_catalog.clock_timestamp()`

// addLeases adds one line per lease held now (Mode "lease", granted, no
// backend: a lease holds no connection) with its holder, term, since and
// expiry in Leader. A lease is a row of pgadvisory.lease, not an advisory
// lock, so the view does not list it. A database whose schema predates
// leases, or a role that may not read pgadvisory.lease (only its owner
// may: it is read with the caller's rights), leaves locks as they are.
// prefix keeps the leases whose names start with it.
func addLeases(ctx context.Context, db *sql.DB, locks []Lock, prefix string) ([]Lock, error) {
	rows, err := db.QueryContext(ctx, leaseSQL)
	if pgadvisory.SQLState(err) == "42501" { // the registry is not readable: no names
		rows, err = db.QueryContext(ctx, leaseNamelessSQL)
	}
	switch pgadvisory.SQLState(err) {
	case "42P01", "3F000", "42501": // before migration 00009, or not readable
		return locks, nil
	}
	if err != nil {
		return nil, fmt.Errorf("status: leases: %w", err)
	}
	defer rows.Close()
	added := false
	for rows.Next() {
		var (
			l                        Lock
			ld                       Leadership
			name, params, declParams sql.NullString
		)
		if err := rows.Scan(&l.LockID, &name, &params, &declParams, &ld.Holder, &ld.Term, &ld.Since, &ld.Expires); err != nil {
			return nil, fmt.Errorf("status: leases: %w", err)
		}
		if prefix != "" && !strings.HasPrefix(name.String, prefix) {
			continue
		}
		l.Name, l.Mode, l.Granted, l.Leader = name.String, "lease", true, &ld
		if l.Params, err = decodeParams(params.String, declParams.String); err != nil {
			return nil, fmt.Errorf("status: lock %d: %w", l.LockID, err)
		}
		locks = append(locks, l)
		added = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("status: leases: %w", err)
	}
	if added {
		Sort(locks)
	}
	return locks, nil
}
