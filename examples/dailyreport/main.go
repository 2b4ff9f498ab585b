package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	// The business day is Vietnamese; tzdata makes the zone available on
	// machines without /usr/share/zoneinfo.
	_ "time/tzdata"

	"github.com/lockgen/lockgen/pgadvisory"
)

// zone is the time zone the business day is defined in.
const zone = "Asia/Ho_Chi_Minh"

func main() {
	url := os.Getenv("LOCKGEN_DATABASE_URL")
	if url == "" {
		url = "postgres://localhost:5432/test"
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, url, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// run plays the three acts against the database at url, printing the story
// to out. It returns an error when the database is unreachable or an
// invariant fails (not exactly one report, replica A's lock not lost to the
// idle timeout, stale write not rejected).
func run(ctx context.Context, url string, out io.Writer) (err error) {
	admin, err := open(url, "dailyreport-admin", nil)
	if err != nil {
		return err
	}
	defer admin.Close()
	if err := admin.PingContext(ctx); err != nil {
		return fmt.Errorf("dailyreport: cannot reach PostgreSQL: %w%s", err, setupHint(ctx, admin, url, err))
	}
	if err := pgadvisory.Migrate(ctx, admin); err != nil {
		return fmt.Errorf("dailyreport: %w%s", err, setupHint(ctx, admin, url, err))
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return fmt.Errorf("dailyreport: %w", err)
	}
	day := pgadvisory.DailyWindow(time.Now(), loc)

	s, err := newStore(ctx, admin, day)
	if err != nil {
		return fmt.Errorf("%w%s", err, setupHint(ctx, admin, url, err))
	}
	defer func() {
		// A fresh context: the schema is dropped even when ctx has ended.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if cerr := s.drop(cctx); cerr != nil && err == nil {
			err = cerr
		}
	}()

	var replicas []replica
	for _, name := range []string{"replica-a", "replica-b", "replica-c"} {
		// Only replica A's sessions have an idle-in-transaction timeout:
		// act 3's pause makes the server end its lock session.
		var params map[string]string
		if name == "replica-a" {
			params = replicaAParams()
		}
		db, err := open(url, "dailyreport-"+name, params)
		if err != nil {
			return err
		}
		defer db.Close()
		// Warm connections, so that "at once" means the lock, not the dial.
		if err := db.PingContext(ctx); err != nil {
			return fmt.Errorf("dailyreport: %s: %w", name, err)
		}
		locker, err := pgadvisory.New(pgadvisory.Stdlib(db))
		if err != nil {
			return err
		}
		defer locker.Close()
		replicas = append(replicas, replica{name: name, db: db, locker: locker})
	}

	fmt.Fprintf(out, "business day %s (%s), tables in schema %s\n", day, zone, s.schema)
	res := result{day: day}
	res.first = fireAtOnce(ctx, replicas, s)
	res.second = fireAgain(ctx, replicas, s)
	if res.reports, err = s.sentReports(ctx); err != nil {
		return err
	}
	for _, line := range res.lines() {
		fmt.Fprintln(out, line)
	}
	if res.fence, err = pauseAndFence(ctx, replicas[0], replicas[1], s); err != nil {
		return err
	}
	for _, line := range res.fence.lines() {
		fmt.Fprintln(out, line)
	}
	if err := res.check(); err != nil {
		fmt.Fprintf(out, "INVARIANT FAILED: %v\n", err)
		return err
	}
	fmt.Fprintln(out, "ok: exactly one report, stale write rejected")
	return nil
}

// replica is one instance of the service: its own pool and the pool's
// Locker, its own application_name (visible in pg_stat_activity and
// lockgen status).
type replica struct {
	name   string
	db     *sql.DB
	locker *pgadvisory.Locker[*sql.Tx]
}

// open returns a pgx stdlib pool on url that announces itself as app and
// sets params (runtime parameters) on each of its connections.
func open(url, app string, params map[string]string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("dailyreport: database URL: %w", err)
	}
	cfg.RuntimeParams["application_name"] = app
	for k, v := range params {
		cfg.RuntimeParams[k] = v
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(4)
	return db, nil
}

// randomSuffix returns 6 random hex digits for the private schema name.
func randomSuffix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
