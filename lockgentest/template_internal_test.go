package lockgentest

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// TestTemplateBuiltOnce: test binaries that start together (here
// goroutines, each on a connection of its own, as separate processes
// are) build the template once, under the server's advisory lock, and
// each then finds it complete: a template, closed to connections.
func TestTemplateBuiltOnce(t *testing.T) {
	if os.Getenv(EnvDatabaseURL) == "" {
		t.Setenv(EnvDatabaseURL, testdb.ServerURL())
	}
	s, err := resolveServer()
	if err != nil {
		t.Fatal(err)
	}
	ctx := testdb.Context(t)
	admin, err := s.connect(ctx)
	if err != nil {
		unavailable(t, err)
	}
	defer admin.Close(ctx)
	name := "lockgentest_tpl_test_" + randomHex(4)
	t.Cleanup(func() {
		ctx := context.Background()
		conn, err := s.connect(ctx)
		if err != nil {
			t.Errorf("dropping the template %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH IS_TEMPLATE false"); err != nil {
			t.Errorf("dropping the template %s: %v", name, err)
		}
		if err := dropDatabase(ctx, conn, name); err != nil {
			t.Error(err)
		}
	})
	templateBuilds.Lock()
	before := templateBuilds.n
	templateBuilds.Unlock()

	const binaries = 4
	var wg sync.WaitGroup
	errs := make([]error, binaries)
	for i := range binaries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := s.connect(ctx)
			if err != nil {
				errs[i] = err
				return
			}
			defer conn.Close(ctx)
			errs[i] = ensureTemplate(ctx, s, conn, name)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("builder %d: %v", i, err)
		}
	}
	templateBuilds.Lock()
	built := templateBuilds.n - before
	templateBuilds.Unlock()
	if built != 1 {
		t.Errorf("%d builders built the template %d times, want once", binaries, built)
	}
	var isTemplate, allowConn bool
	if err := admin.QueryRow(ctx, "SELECT datistemplate, datallowconn FROM pg_database WHERE datname = $1", name).Scan(&isTemplate, &allowConn); err != nil {
		t.Fatal(err)
	}
	if !isTemplate || allowConn {
		t.Errorf("the template: datistemplate %v, datallowconn %v; want true, false", isTemplate, allowConn)
	}
}

// TestTemplateRaceLeavesNoBuild: builders that take no common advisory
// lock (their server databases differ) race to publish; the losers drop
// their builds, which are templates by then.
func TestTemplateRaceLeavesNoBuild(t *testing.T) {
	if os.Getenv(EnvDatabaseURL) == "" {
		t.Setenv(EnvDatabaseURL, testdb.ServerURL())
	}
	s, err := resolveServer()
	if err != nil {
		t.Fatal(err)
	}
	ctx := testdb.Context(t)
	admin, err := s.connect(ctx)
	if err != nil {
		unavailable(t, err)
	}
	defer admin.Close(ctx)
	name := "lockgentest_tpl_test_" + randomHex(4)
	t.Cleanup(func() {
		ctx := context.Background()
		conn, err := s.connect(ctx)
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		_, _ = conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH IS_TEMPLATE false")
		_ = dropDatabase(ctx, conn, name)
	})
	builds := func() map[string]bool {
		rows, err := admin.Query(ctx, "SELECT datname FROM pg_database WHERE datname LIKE 'lockgentest\\_build\\_%'")
		if err != nil {
			t.Fatal(err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]bool{}
		for _, n := range names {
			m[n] = true
		}
		return m
	}
	before := builds()
	// A lock key of each builder's own: they race to publish.
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := s.connect(ctx)
			if err != nil {
				errs[i] = err
				return
			}
			defer conn.Close(ctx)
			errs[i] = ensureTemplateWithLock(ctx, s, conn, name, int64(i)+templateLockID)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("builder %d: %v", i, err)
		}
	}
	for n := range builds() {
		if !before[n] {
			t.Errorf("a build was left behind: %s", n)
			_, _ = admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{n}.Sanitize()+" WITH IS_TEMPLATE false")
			_ = dropDatabase(ctx, admin, n)
		}
	}
	if ok, err := databaseExists(ctx, admin, name); err != nil || !ok {
		t.Errorf("the template %s was not published: %v", name, err)
	}
}

// TestRenameWaitsForLeavingSessions: renaming a database that a session
// still uses fails with 55006; execInUseRetry retries until the session
// has gone (here closed 200ms later), and gives up after its wait (the
// control: the session stays).
func TestRenameWaitsForLeavingSessions(t *testing.T) {
	if os.Getenv(EnvDatabaseURL) == "" {
		t.Setenv(EnvDatabaseURL, testdb.ServerURL())
	}
	s, err := resolveServer()
	if err != nil {
		t.Fatal(err)
	}
	ctx := testdb.Context(t)
	admin, err := s.connect(ctx)
	if err != nil {
		unavailable(t, err)
	}
	defer admin.Close(ctx)
	name := "lockgentest_rename_" + randomHex(4)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // on a connection of its own: admin is closed by then
		ctx := context.Background()
		conn, err := s.connect(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(ctx)
		for _, n := range []string{name, name + "_a", name + "_b"} {
			if err := dropDatabase(ctx, conn, n); err != nil {
				t.Error(err)
			}
		}
	})
	rename := func(from, to string, wait time.Duration) error {
		return execInUseRetry(ctx, admin, "ALTER DATABASE "+pgx.Identifier{from}.Sanitize()+" RENAME TO "+pgx.Identifier{to}.Sanitize(), wait)
	}

	user, err := pgx.ConnectConfig(ctx, s.config(name))
	if err != nil {
		t.Fatal(err)
	}
	if err := rename(name, name+"_a", 300*time.Millisecond); err == nil || !strings.Contains(err.Error(), "55006") {
		t.Fatalf("renaming a database in use for 300ms: %v, want 55006", err)
	}
	go func() {
		time.Sleep(200 * time.Millisecond)
		_ = user.Close(context.Background())
	}()
	if err := rename(name, name+"_b", inUseWait); err != nil {
		t.Fatalf("renaming once the session left: %v", err)
	}
}
