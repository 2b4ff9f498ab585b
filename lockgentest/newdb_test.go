package lockgentest_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/keyspace"
	"github.com/lockgen/lockgen/lockgentest"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestNewDBHasTheSchema: a NewDB or NewPool database has lockgen's schema
// at the latest version (Migrate has nothing left to apply) and its ID
// function agrees with package keyspace.
func TestNewDBHasTheSchema(t *testing.T) {
	ctx := testdb.Context(t)
	pool := lockgentest.NewPool(t)
	for name, db := range map[string]*sql.DB{"NewDB": lockgentest.NewDB(t), "NewPool": stdlib.OpenDBFromPool(pool)} {
		m, err := pgadvisory.NewMigrator(db)
		if err != nil {
			t.Fatal(err)
		}
		st, err := m.Status(ctx)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if st.Current != m.Latest() {
			t.Errorf("%s: schema version %d, want the latest %d", name, st.Current, m.Latest())
		}
		var id int64
		if err := db.QueryRowContext(ctx, `SELECT pgadvisory.lock_id('reports.daily')`).Scan(&id); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if id != keyspace.ID("reports.daily") {
			t.Errorf("%s: pgadvisory.lock_id = %d, keyspace.ID = %d", name, id, keyspace.ID("reports.daily"))
		}
	}
}

// TestNewDBIsolates: two tests' databases share no advisory lock and no
// table, and each is dropped when its test ends, even with a session
// still connected to it.
func TestNewDBIsolates(t *testing.T) {
	var names [2]string
	var lingering *sql.Conn
	t.Run("first", func(t *testing.T) {
		db := lockgentest.NewDB(t)
		if err := db.QueryRow(`SELECT current_database()`).Scan(&names[0]); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`CREATE TABLE only_here (x int)`); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`SELECT pg_advisory_lock(7301)`); err != nil {
			t.Fatal(err)
		}
		t.Run("second", func(t *testing.T) {
			other := lockgentest.NewDB(t)
			if err := other.QueryRow(`SELECT current_database()`).Scan(&names[1]); err != nil {
				t.Fatal(err)
			}
			var free bool
			if err := other.QueryRow(`SELECT pg_try_advisory_xact_lock(7301)`).Scan(&free); err != nil || !free {
				t.Errorf("a lock held in another test's database excludes this one's: free %v, %v", free, err)
			}
			var table *string
			if err := other.QueryRow(`SELECT to_regclass('only_here')::text`).Scan(&table); err != nil || table != nil {
				t.Errorf("another test's table is visible: %v, %v", table, err)
			}
		})
		// A session that outlives the handle (as a leaked connection
		// would): the drop ends it.
		url := strings.Replace(testdb.ServerURL(), "/"+lastPathPart(testdb.ServerURL()), "/"+names[0], 1)
		side, err := sql.Open("pgx", url)
		if err != nil {
			t.Fatal(err)
		}
		if lingering, err = side.Conn(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
	admin := testdb.DB(t)
	for _, name := range names {
		var n int
		if err := admin.QueryRow(`SELECT count(*) FROM pg_database WHERE datname = $1`, name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if name == "" || n != 0 {
			t.Errorf("database %q: %d left after its test ended", name, n)
		}
	}
	if lingering != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := lingering.PingContext(ctx); err == nil {
			t.Error("a session in the dropped database is still alive")
		}
		_ = lingering.Close()
	}
}

func lastPathPart(u string) string {
	u, _, _ = strings.Cut(u, "?")
	return u[strings.LastIndexByte(u, '/')+1:]
}

// TestNoServerSkipsOrFailsInCI: without a server NewDB skips the test,
// and under CI fails it, both with the command that starts a server.
func TestNoServerSkipsOrFailsInCI(t *testing.T) {
	t.Setenv(lockgentest.EnvDatabaseURL, "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=2")
	for _, ci := range []string{"", "false", "true"} {
		t.Setenv("CI", ci)
		r := runAs(t, func(tb testing.TB) { lockgentest.NewDB(tb) })
		wantFail := ci == "true"
		if r.Failed() != wantFail || r.Skipped() == wantFail {
			t.Errorf("CI=%q: failed %v, skipped %v; want failed %v", ci, r.Failed(), r.Skipped(), wantFail)
		}
		msg := r.failures() + r.skipMsg
		if !strings.Contains(msg, "docker run") || !strings.Contains(msg, "127.0.0.1:1") {
			t.Errorf("CI=%q: the message does not name the server and the command that starts one:\n%s", ci, msg)
		}
	}
}

// TestNewDBWithoutCreatedb: a role that may not create databases fails
// the test (it is not a missing server), saying which privilege to grant;
// the same server with a role that may is the control (every other test).
func TestNewDBWithoutCreatedb(t *testing.T) {
	admin := testdb.DB(t)
	role := fmt.Sprintf("lockgentest_nocreatedb_%d", os.Getpid())
	if _, err := admin.Exec(`DROP ROLE IF EXISTS ` + role); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(`CREATE ROLE ` + role + ` LOGIN NOCREATEDB`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(`DROP ROLE IF EXISTS ` + role) })
	u, err := url.Parse(testdb.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	t.Setenv(lockgentest.EnvDatabaseURL, u.String())
	t.Setenv("CI", "")
	r := runAs(t, func(tb testing.TB) { lockgentest.NewDB(tb) })
	if r.Skipped() || !r.Failed() || !strings.Contains(r.failures(), "CREATEDB") {
		t.Fatalf("a role without CREATEDB: skipped %v, failed %v: %s%s", r.Skipped(), r.Failed(), r.failures(), r.skipMsg)
	}
	t.Log(r.failures())
}
