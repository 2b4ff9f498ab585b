package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/lockgen/lockgen/keyspace"
	"github.com/lockgen/lockgen/pgadvisory"
)

// OutboxRelay is the leadership: one replica relays the outbox.
var OutboxRelay = pgadvisory.Lock{Name: "examples.leader.outbox_relay", ID: keyspace.ID("examples.leader.outbox_relay")}

// checkInterval is how often each leader's watcher checks its lock.
const checkInterval = 100 * time.Millisecond

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

// event is what a replica reports to the story.
type event struct {
	replica string
	term    int64
	lost    error // set when the leadership context was canceled: its cause
	late    error // set when the deposed leader's late write returned: its error
	lateSet bool
}

// run plays the story against the database at url, printing it to out. It
// returns an error when the database is unreachable or an invariant fails.
func run(ctx context.Context, url string, out io.Writer) (err error) {
	admin, err := open(url, "leader-admin")
	if err != nil {
		return err
	}
	defer admin.Close()
	if err := pgadvisory.Migrate(ctx, admin); err != nil {
		return fmt.Errorf("leader: %w", err)
	}
	adminLocker, err := pgadvisory.New(pgadvisory.Stdlib(admin))
	if err != nil {
		return err
	}
	defer adminLocker.Close()
	table, drop, err := createTable(ctx, admin)
	if err != nil {
		return err
	}
	defer func() {
		if derr := drop(); derr != nil && err == nil {
			err = derr
		}
	}()

	cctx, stopCampaigns := context.WithCancel(ctx)
	events := make(chan event, 16)
	newLeader := make(chan struct{}) // closed once a second leader is elected
	var campaigns []chan error
	for _, name := range []string{"replica-a", "replica-b", "replica-c"} {
		db, err := open(url, "leader-"+name)
		if err != nil {
			stopCampaigns()
			return err
		}
		defer db.Close()
		// Each replica's Locker names it as the leader (WithDefaultHolder).
		locker, err := pgadvisory.New(pgadvisory.Stdlib(db), pgadvisory.WithDefaultHolder(name))
		if err != nil {
			stopCampaigns()
			return err
		}
		defer locker.Close()
		done := make(chan error, 1)
		campaigns = append(campaigns, done)
		go func() { done <- campaign(cctx, locker, name, table, events, newLeader) }()
	}
	defer func() {
		stopCampaigns()
		for _, done := range campaigns {
			if cerr := <-done; cerr != nil && err == nil {
				err = fmt.Errorf("leader: a campaign failed: %w", cerr)
			}
		}
	}()

	var res result
	next := func(what string) (event, error) {
		select {
		case e := <-events:
			return e, nil
		case <-ctx.Done():
			return event{}, fmt.Errorf("leader: waiting for %s: %w", what, ctx.Err())
		}
	}
	first, err := next("the first election")
	if err != nil {
		return err
	}
	res.first = first
	fmt.Fprintf(out, "%s: elected, term %d\n", first.replica, first.term)
	leader, err := adminLocker.CurrentLeader(ctx, OutboxRelay)
	if err != nil {
		return fmt.Errorf("leader: CurrentLeader: %w", err)
	}
	res.reported = leader
	fmt.Fprintf(out, "CurrentLeader: %s, term %d, backend pid %d\n", leader.Holder, leader.Term, leader.PID)

	killed := time.Now()
	if _, err := admin.ExecContext(ctx, `SELECT pg_terminate_backend($1)`, leader.PID); err != nil {
		return fmt.Errorf("leader: pg_terminate_backend: %w", err)
	}
	fmt.Fprintf(out, "postgres: the leader's backend (pid %d) is terminated\n", leader.PID)

	for res.lost == nil || res.second.replica == "" {
		e, err := next("the failover")
		if err != nil {
			return err
		}
		switch {
		case e.lost != nil:
			res.lost, res.lostAfter = e.lost, time.Since(killed)
			fmt.Fprintf(out, "%s: leadership context canceled after %v (check interval %v): lock lost: %v\n",
				e.replica, res.lostAfter.Round(10*time.Millisecond), checkInterval, errors.Is(e.lost, pgadvisory.ErrLockLost))
		case e.term != 0:
			res.second = e
			fmt.Fprintf(out, "%s: elected, term %d\n", e.replica, e.term)
			close(newLeader)
		}
	}
	for !res.lateDone {
		e, err := next("the late write")
		if err != nil {
			return err
		}
		if e.lateSet {
			res.late, res.lateDone = e.late, true
		}
	}
	fmt.Fprintf(out, "%s: late write with term %d: %s\n", first.replica, first.term, lateText(res.late))
	if err := res.check(); err != nil {
		fmt.Fprintf(out, "INVARIANT FAILED: %v\n", err)
		return err
	}
	fmt.Fprintln(out, "ok: one leader at a time, the deposed leader's write rejected")
	return nil
}

// campaign is one replica: it campaigns until ctx ends. As the leader it
// writes with its term, and when its leadership is lost it plays the
// worker that writes once more before it looks at the context: after the
// next leader is elected, with the old term.
func campaign(ctx context.Context, locker *pgadvisory.Locker[*sql.Tx], name, table string, events chan<- event, newLeader <-chan struct{}) error {
	return locker.Campaign(ctx, OutboxRelay, func(lctx context.Context, term int64) error {
		if err := relay(lctx, locker, table, term); err != nil {
			return err
		}
		events <- event{replica: name, term: term}
		<-lctx.Done()
		cause := context.Cause(lctx)
		if ctx.Err() != nil {
			return nil // the story is over
		}
		events <- event{replica: name, lost: cause}
		select {
		case <-newLeader:
		case <-ctx.Done():
			return nil
		}
		late := relay(ctx, locker, table, term)
		events <- event{replica: name, late: late, lateSet: true}
		return cause
	}, pgadvisory.WithCheckInterval(checkInterval))
}

// relay is the leader's work: it advances the relay's position, a write
// to the fenced table that carries the term.
func relay(ctx context.Context, locker *pgadvisory.Locker[*sql.Tx], table string, term int64) error {
	return locker.RunFenced(ctx, term, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE `+table+` SET position = position + 1 WHERE id = 1`)
		return err
	})
}

func lateText(err error) string {
	switch {
	case errors.Is(err, pgadvisory.ErrStaleToken):
		return "rejected by the fenced table (ErrStaleToken)"
	case err == nil:
		return "ACCEPTED (no fencing!)"
	}
	return "failed: " + err.Error()
}

// result is what the story observed.
type result struct {
	first, second event
	reported      pgadvisory.Leader
	lost          error
	lostAfter     time.Duration
	late          error
	lateDone      bool
}

// check verifies the story's invariants.
func (r result) check() error {
	switch {
	case r.reported.Holder != r.first.replica || r.reported.Term != r.first.term:
		return fmt.Errorf("invariant failed: CurrentLeader reported %s term %d, the leader is %s term %d",
			r.reported.Holder, r.reported.Term, r.first.replica, r.first.term)
	case !errors.Is(r.lost, pgadvisory.ErrLockLost):
		return fmt.Errorf("invariant failed: the deposed leader's context cause is %v, not ErrLockLost", r.lost)
	case r.second.replica == "" || r.second.replica == r.first.replica:
		return fmt.Errorf("invariant failed: no other replica was elected (%q after %q)", r.second.replica, r.first.replica)
	case r.second.term <= r.first.term:
		return fmt.Errorf("invariant failed: the new term %d is not higher than %d", r.second.term, r.first.term)
	case !errors.Is(r.late, pgadvisory.ErrStaleToken):
		return fmt.Errorf("invariant failed: the deposed leader's late write returned %v, not ErrStaleToken", r.late)
	}
	return nil
}

// open returns a pgx stdlib pool on url that announces itself as app.
func open(url, app string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("leader: database URL: %w", err)
	}
	cfg.RuntimeParams["application_name"] = app
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(4)
	return db, nil
}

// createTable creates the relay's position table in a private schema,
// fenced by OutboxRelay as "lockgen fence -lock examples.leader.outbox_relay
// -table <schema>.relay" fences it, and returns its name and a func that
// drops the schema.
func createTable(ctx context.Context, admin *sql.DB) (string, func() error, error) {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	schema := "leader_" + hex.EncodeToString(b)
	table := schema + ".relay"
	drop := func() error {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(dctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE`); err != nil {
			return fmt.Errorf("leader: drop schema %s: %w", schema, err)
		}
		return nil
	}
	stmts := append([]string{
		`CREATE SCHEMA ` + schema,
		`CREATE TABLE ` + table + ` (id int PRIMARY KEY, position bigint NOT NULL)`,
		`INSERT INTO ` + table + ` VALUES (1, 0)`,
	}, fenceStatements(table, OutboxRelay.ID)...)
	for _, q := range stmts {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			_ = drop()
			return "", nil, fmt.Errorf("leader: create table: %w", err)
		}
	}
	return table, drop, nil
}

// fenceStatements are the statements of the migration that lockgen fence
// writes for table and a plain lock (without its checks that lockgen's
// schema exists and that the table is no partition), the last of which
// lists the table as fenced by the lock (pgadvisory.fence_register).
func fenceStatements(table string, lockID int64) []string {
	args := "'" + strconv.FormatInt(lockID, 10) + "', 'strict'"
	check := ` FOR EACH STATEMENT EXECUTE FUNCTION pgadvisory.fence_check_statement(` + args + `)`
	return []string{
		`ALTER TABLE ` + table + ` ADD COLUMN fencing_token bigint
			DEFAULT NULLIF(current_setting('pgadvisory.fencing_token', true), '')::bigint`,
		`CREATE TRIGGER zz_pgadvisory_fence BEFORE INSERT OR UPDATE ON ` + table + ` FOR EACH ROW
			WHEN (NEW.fencing_token IS DISTINCT FROM NULLIF(current_setting('pgadvisory.fencing_token', true), '')::bigint)
			EXECUTE FUNCTION pgadvisory.fence_stamp(` + args + `)`,
		`CREATE TRIGGER zz_pgadvisory_fence_insert AFTER INSERT ON ` + table + ` REFERENCING NEW TABLE AS fence_new` + check,
		`CREATE TRIGGER zz_pgadvisory_fence_update AFTER UPDATE ON ` + table + ` REFERENCING OLD TABLE AS fence_old NEW TABLE AS fence_new` + check,
		`CREATE TRIGGER zz_pgadvisory_fence_delete AFTER DELETE ON ` + table + ` REFERENCING OLD TABLE AS fence_old` + check,
		`CREATE TRIGGER zz_pgadvisory_fence_truncate BEFORE TRUNCATE ON ` + table + `
			FOR EACH STATEMENT EXECUTE FUNCTION pgadvisory.fence_truncate_guard(` + args + `)`,
		`SELECT pgadvisory.fence_register('` + table + `'::regclass, ` + args + `, '{}')`,
	}
}
