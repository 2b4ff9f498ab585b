package pgadvisory

import (
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// SetSessionConns sets how many server connections the session locks
// ([RunSession], [Lock.RunSession]) of db share: at most n, 2 by default.
// A shared connection is taken from db when a lock needs it and given
// back as soon as it holds no lock; locks are spread over the connections,
// least-loaded first. n = 0 gives every call a connection of its own, as
// before connections were shared. A negative n is refused with
// [ErrInvalidArgument]. The setting applies to calls that start after it;
// locks already held stay where they are. It does not keep db alive: it
// is forgotten once db is garbage-collected.
//
// A waiting call ([WithWait]) whose locks are contended waits on a
// connection of its own, which joins the shared ones once granted: while
// it waits, it needs one more connection of db.
func SetSessionConns(db *sql.DB, n int) error {
	if db == nil {
		return sessionConnsInvalid(errors.New("nil *sql.DB"))
	}
	return setSessionConnsOf(db, n)
}

// SetSessionConnsPgx is [SetSessionConns] for a pgx pool's session locks
// ([RunSessionPgx], [Lock.RunSessionPgx]).
func SetSessionConnsPgx(pool *pgxpool.Pool, n int) error {
	if pool == nil {
		return sessionConnsInvalid(errors.New("nil *pgxpool.Pool"))
	}
	return setSessionConnsOf(pool, n)
}

func setSessionConnsOf(pool any, n int) error {
	if n < 0 {
		return sessionConnsInvalid(fmt.Errorf("negative number of connections %d", n))
	}
	setSessionConns(pool, n)
	return nil
}

// sessionConnsInvalid is SetSessionConns' refusal.
func sessionConnsInvalid(err error) error {
	return &Error{Op: "options", Kind: ErrInvalidArgument, Err: fmt.Errorf("SetSessionConns: %w", err)}
}
