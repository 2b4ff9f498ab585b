package lockgentest

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// session is a connection of its own to db's database, outside db's pool:
// holding a lock on it takes no connection from the code under test.
type session struct {
	conn  *pgx.Conn // a new connection with the pool's configuration (pgx driver)
	owned *sql.Conn // else a connection of db's pool, for other drivers
}

// openSession connects to db's database. With the pgx stdlib driver it
// opens a new connection with the configuration of db's connections, as
// application_name app; with another driver it takes a connection from
// db's pool.
func openSession(ctx context.Context, t testing.TB, db *sql.DB, app string) *session {
	t.Helper()
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatalf("lockgentest: connecting: %v", err)
	}
	var cfg *pgx.ConnConfig
	_ = c.Raw(func(dc any) error {
		if sc, ok := dc.(*stdlib.Conn); ok {
			cfg = sc.Conn().Config().Copy()
		}
		return nil
	})
	if cfg == nil {
		return &session{owned: c}
	}
	_ = c.Close()
	cfg.RuntimeParams["application_name"] = app
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("lockgentest: connecting: %v", err)
	}
	return &session{conn: conn}
}

// queryRow runs a query that returns one row into dest.
func (s *session) queryRow(ctx context.Context, query string, args []any, dest ...any) error {
	if s.conn != nil {
		return s.conn.QueryRow(ctx, query, args...).Scan(dest...)
	}
	return s.owned.QueryRowContext(ctx, query, args...).Scan(dest...)
}

// query runs a query and calls row for each row, scanned into dest.
func (s *session) query(ctx context.Context, query string, args []any, row func() error, dest ...any) error {
	if s.conn != nil {
		rows, err := s.conn.Query(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := rows.Scan(dest...); err != nil {
				return err
			}
			if err := row(); err != nil {
				return err
			}
		}
		return rows.Err()
	}
	rows, err := s.owned.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		if err := row(); err != nil {
			return err
		}
	}
	return rows.Err()
}

// close ends the session.
func (s *session) close() {
	if s.conn != nil {
		_ = s.conn.Close(context.Background())
		return
	}
	_ = s.owned.Close()
}

// pid is the session's backend.
func (s *session) pid(ctx context.Context) (int32, error) {
	var pid int32
	if err := s.queryRow(ctx, "SELECT pg_catalog.pg_backend_pid()", nil, &pid); err != nil {
		return 0, fmt.Errorf("lockgentest: %w", err)
	}
	return pid, nil
}
