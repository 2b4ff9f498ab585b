package status

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/lockgen/lockgen/keyspace"
	"github.com/lockgen/lockgen/pgadvisory"
)

// Limited is a limited lock's state (pgadvisory.RunLimited,
// RunSessionLimited): its registered limit N, how many of its slots are
// held, and how many backends wait in the server's queue for one (SQL jobs
// that block on a slot key; lockgen's own waiting calls hold no connection
// and are not seen).
type Limited struct {
	N, Held, Waiting int
}

// limitedSQL reads the limited locks that have a slot held or awaited,
// with the registry's name where the role may read it.
const limitedSQL = `SELECT s.lock_id, r.name, r.params::text, r.declared_params::text, s.n, s.held, s.waiting
FROM pgadvisory.slot_status AS s
LEFT JOIN pgadvisory.registry AS r ON r.lock_id = s.lock_id
WHERE s.held > 0 OR s.waiting > 0`

// limitedNamelessSQL is limitedSQL for a role that may not read the
// registry.
const limitedNamelessSQL = `SELECT s.lock_id, NULL::text, NULL::text, NULL::text, s.n, s.held, s.waiting
FROM pgadvisory.slot_status AS s
WHERE s.held > 0 OR s.waiting > 0`

// foldLimited replaces the rows of limited locks' slot keys in locks (one
// per holder or waiter of a slot) with one line per limited lock: its name,
// and k/n slots held and its waiters (see [Limited]). A database whose
// schema predates limited locks (no view pgadvisory.slot_status) or a role
// that may not read it leaves locks as they are. prefix keeps the limited
// locks whose names start with it.
func foldLimited(ctx context.Context, db *sql.DB, locks []Lock, prefix string) ([]Lock, error) {
	rows, err := db.QueryContext(ctx, limitedSQL)
	if pgadvisory.SQLState(err) == "42501" { // the registry is not readable: no names
		rows, err = db.QueryContext(ctx, limitedNamelessSQL)
	}
	switch pgadvisory.SQLState(err) {
	case "42P01", "3F000", "42501": // before migration 00010, or not readable
		return locks, nil
	}
	if err != nil {
		return nil, fmt.Errorf("status: limited locks: %w", err)
	}
	defer rows.Close()
	slots := map[int64]bool{}
	var lines []Lock
	for rows.Next() {
		var (
			l                        Lock
			lim                      Limited
			name, params, declParams sql.NullString
		)
		if err := rows.Scan(&l.LockID, &name, &params, &declParams, &lim.N, &lim.Held, &lim.Waiting); err != nil {
			return nil, fmt.Errorf("status: limited locks: %w", err)
		}
		for s := range lim.N {
			slots[keyspace.SlotID(l.LockID, int32(s))] = true
		}
		if prefix != "" && !strings.HasPrefix(name.String, prefix) {
			continue
		}
		l.Name, l.Mode, l.Granted, l.Limited = name.String, "limited", lim.Held > 0, &lim
		if l.Params, err = decodeParams(params.String, declParams.String); err != nil {
			return nil, fmt.Errorf("status: lock %d: %w", l.LockID, err)
		}
		lines = append(lines, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("status: limited locks: %w", err)
	}
	if len(slots) == 0 {
		return locks, nil
	}
	locks = slices.DeleteFunc(locks, func(l Lock) bool { return !l.Int4 && l.Name == "" && slots[l.LockID] })
	locks = append(locks, lines...)
	Sort(locks)
	return locks, nil
}

// limitedText is a limited lock's STATE cell: "2/3 held, 1 waiting".
func limitedText(l *Limited) string {
	return fmt.Sprintf("%d/%d held, %d waiting", l.Held, l.N, l.Waiting)
}
