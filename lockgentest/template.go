package lockgentest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/lockgen/lockgen/keyspace"
	"github.com/lockgen/lockgen/migrations"
	"github.com/lockgen/lockgen/pgadvisory"
)

// templateLockID is the advisory lock, taken in the server's database,
// around building a template: test binaries that start together build it
// once.
var templateLockID = keyspace.ID("lockgentest.template")

// templateName is the template database of lockgen's schema as this build
// embeds it: lockgentest_tpl_ and a digest of the migrations, so a new
// schema version gets a template of its own and an old one is never
// reused.
var templateName = sync.OnceValues(func() (string, error) {
	h := sha256.New()
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		return "", err
	}
	slices.Sort(names)
	for _, n := range names {
		b, err := fs.ReadFile(migrations.FS, n)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(b))
		h.Write(b)
	}
	return "lockgentest_tpl_" + hex.EncodeToString(h.Sum(nil))[:16], nil
})

// templateBuilds counts the template builds this process started (tests
// read it).
var templateBuilds struct {
	sync.Mutex
	n int
}

// ensureTemplate makes sure the template database name exists on the
// server of conn, building it if needed. A template is built under the
// advisory lock templateLockID, in a database of a temporary name that is
// renamed to name once migrated, so that a template of that name is always
// complete, even after a build that crashed. It allows no connections: a
// connection to a template makes CREATE DATABASE ... TEMPLATE fail.
func ensureTemplate(ctx context.Context, s server, conn *pgx.Conn, name string) error {
	return ensureTemplateWithLock(ctx, s, conn, name, templateLockID)
}

// ensureTemplateWithLock is ensureTemplate under the advisory lock lockID
// (tests make builders that share no lock, as builders connected to
// different databases of one server are).
func ensureTemplateWithLock(ctx context.Context, s server, conn *pgx.Conn, name string, lockID int64) error {
	if ok, err := databaseExists(ctx, conn, name); err != nil || ok {
		return err
	}
	if _, err := conn.Exec(ctx, "SELECT pg_catalog.pg_advisory_lock($1)", lockID); err != nil {
		return fmt.Errorf("lockgentest: waiting for the template lock: %w", err)
	}
	defer func() {
		// A connection whose context ended is closed by pgx, which ends the
		// session and its lock; otherwise unlock for the next caller.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_catalog.pg_advisory_unlock($1)", lockID)
	}()
	if ok, err := databaseExists(ctx, conn, name); err != nil || ok {
		return err // built by another test binary while this one waited
	}
	build := "lockgentest_build_" + randomHex(6)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{build}.Sanitize()); err != nil {
		return fmt.Errorf("lockgentest: creating the template: %w%s", err, createdbHint(err))
	}
	templateBuilds.Lock()
	templateBuilds.n++
	templateBuilds.Unlock()
	published := false
	defer func() {
		if !published {
			// A template cannot be dropped: the build may have been made
			// one before its rename failed.
			ctx := context.WithoutCancel(ctx)
			_, _ = conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{build}.Sanitize()+" WITH IS_TEMPLATE false")
			_ = dropDatabase(ctx, conn, build)
		}
	}()
	if err := migrate(ctx, s, build); err != nil {
		return err
	}
	for _, q := range []string{
		"ALTER DATABASE " + pgx.Identifier{build}.Sanitize() + " WITH ALLOW_CONNECTIONS false IS_TEMPLATE true",
		"ALTER DATABASE " + pgx.Identifier{build}.Sanitize() + " RENAME TO " + pgx.Identifier{name}.Sanitize(),
	} {
		if err := execInUseRetry(ctx, conn, q, inUseWait); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && (pgErr.Code == "42P04" || pgErr.Code == "23505") {
				// duplicate_database, or the catalog's unique index when
				// the renames race: another builder published it (one
				// whose advisory lock was in another database).
				return nil
			}
			return fmt.Errorf("lockgentest: publishing the template: %w", err)
		}
	}
	published = true
	return nil
}

// inUseWait bounds how long execInUseRetry retries.
const inUseWait = 10 * time.Second

// execInUseRetry runs q, again while it fails with 55006
// (object_in_use), for at most wait: the backends of the migration's
// connections, closed already, exit a moment after their clients hang
// up, and renaming a database waits for none of them.
func execInUseRetry(ctx context.Context, conn *pgx.Conn, q string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		_, err := conn.Exec(ctx, q)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// migrate applies lockgen's migrations to database with pgadvisory.Migrate.
func migrate(ctx context.Context, s server, database string) error {
	db := stdlib.OpenDB(*s.config(database))
	defer db.Close()
	if err := pgadvisory.Migrate(ctx, db); err != nil {
		return fmt.Errorf("lockgentest: migrating the template: %w", err)
	}
	return nil
}

// databaseExists reports whether the server has a database called name.
func databaseExists(ctx context.Context, conn *pgx.Conn, name string) (bool, error) {
	var ok bool
	err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_catalog.pg_database WHERE datname OPERATOR(pg_catalog.=) $1)", name).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("lockgentest: looking for database %s: %w", name, err)
	}
	return ok, nil
}

// dropDatabase drops name, ending its sessions first (WITH (FORCE)).
func dropDatabase(ctx context.Context, conn *pgx.Conn, name string) error {
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("lockgentest: dropping database %s: %w", name, err)
	}
	return nil
}

// createdbHint says what to do when the role may not create databases
// (SQLSTATE 42501).
func createdbHint(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		return " (lockgentest creates a database per test: ALTER ROLE <the tests' role> CREATEDB)"
	}
	return ""
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
