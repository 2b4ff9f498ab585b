// Package doctor checks the PostgreSQL server and the connection path that a
// service will use for lockgen's locks, before the traps bite: a hot
// standby, a pooler that multiplexes sessions, an advisory-lock
// implementation that excludes nobody, a missing schema, settings that keep
// a dead holder's lock for hours, a lock table close to full, commits that
// a crash can lose, and a registry out of step with the declarations. It is
// the body of lockgen doctor; the command only prints the [Report].
//
// Every check runs on its own, bounded by [CheckTimeout], and ends as one
// [Check]: pass, warn or fail, the evidence found (Detail) and what to do
// (Fix). The check names are a contract (see [Names]).
package doctor

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/lockgen/lockgen/pgadvisory"
)

// Status is the outcome of one check.
type Status string

// The outcomes.
const (
	Pass Status = "pass"
	Warn Status = "warn" // works, with a risk worth knowing
	Fail Status = "fail" // lockgen's locks are unsafe or will not work here
)

// The check names, in the order Run runs them. They are a contract: tools
// read them from lockgen doctor -json.
const (
	Primary                         = "primary"
	Pooler                          = "pooler"
	Exclusion                       = "exclusion"
	Schema                          = "schema"
	IdleInTransactionSessionTimeout = "idle_in_transaction_session_timeout"
	Keepalives                      = "keepalives"
	LockTable                       = "lock_table"
	SynchronousCommit               = "synchronous_commit"
	Registry                        = "registry"
)

// Names are the check names in the order Run runs them.
var Names = []string{Primary, Pooler, Exclusion, Schema, IdleInTransactionSessionTimeout,
	Keepalives, LockTable, SynchronousCommit, Registry}

// CheckTimeout bounds each check, so that a path that hangs (a pooler out
// of server connections) ends that check, not the run.
const CheckTimeout = 5 * time.Second

// Check is the outcome of one check, as lockgen doctor prints it.
type Check struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	// Detail is the evidence: what was found, with the values read.
	Detail string `json:"detail"`
	// Fix says what to do; "" when there is nothing to do.
	Fix string `json:"fix"`
}

// Report is the outcome of every check, in the order of [Names].
type Report struct {
	Checks []Check `json:"checks"`
}

// Failed reports whether any check failed.
func (r Report) Failed() bool {
	for _, c := range r.Checks {
		if c.Status == Fail {
			return true
		}
	}
	return false
}

// Config says what to check.
type Config struct {
	// DB reaches the server the way the service does (the same URL,
	// through the same pooler, if any). It must allow at least three open
	// connections: the exclusion and pooler checks use two at once. The pgx
	// stdlib driver is needed to detect a pooler by its announced pid.
	// With it, the conformance check timeout_leaves_nothing also opens
	// pools of one connection of its own with DB's configuration (pgx's,
	// and database/sql's under statement_timeout), after closing DB's idle
	// connections, and closes them before it returns.
	DB *sql.DB
	// Declared are the locks the service declares (locks.yaml), for the
	// registry and lock_table checks; nil when no declarations were given.
	Declared []pgadvisory.Declared
	// Source names where Declared came from, e.g. "locks.yaml", for the
	// messages.
	Source string
	// Uses are the entry points the service calls (lockgen doctor -uses):
	// the pooler and exclusion checks fail behind a transaction pooler only
	// when one of them needs a session-level lock. nil means every use.
	Uses []Use
}

// Run runs every check and returns their outcomes. It returns an error only
// when cfg is unusable or the server cannot be reached at all; a check that
// cannot finish is reported as that check's outcome.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if cfg.DB == nil {
		return Report{}, errors.New("doctor: nil *sql.DB")
	}
	if err := cfg.DB.PingContext(ctx); err != nil {
		return Report{}, fmt.Errorf("doctor: %w", err)
	}
	e := &env{Config: cfg}
	var r Report
	for _, name := range Names {
		r.Checks = append(r.Checks, runOne(ctx, name, e))
	}
	return r, nil
}

// checks are the checks by name.
var checks = map[string]func(context.Context, *env) Check{
	Primary:                         checkPrimary,
	Pooler:                          checkPooler,
	Exclusion:                       checkExclusion,
	Schema:                          checkSchema,
	IdleInTransactionSessionTimeout: checkIdleInTransaction,
	Keepalives:                      checkKeepalives,
	LockTable:                       checkLockTable,
	SynchronousCommit:               checkSynchronousCommit,
	Registry:                        checkRegistry,
}

// RunCheck runs the check called name (one of [Names]) alone.
func RunCheck(ctx context.Context, cfg Config, name string) (Check, error) {
	if _, ok := checks[name]; !ok {
		return Check{}, fmt.Errorf("doctor: unknown check %q", name)
	}
	if cfg.DB == nil {
		return Check{}, errors.New("doctor: nil *sql.DB")
	}
	return runOne(ctx, name, &env{Config: cfg}), nil
}

// runOne runs one check within CheckTimeout.
func runOne(ctx context.Context, name string, e *env) Check {
	cctx, cancel := context.WithTimeout(ctx, CheckTimeout)
	defer cancel()
	c := checks[name](cctx, e)
	c.Name = name
	return c
}

// env is what the checks of one run share: the configuration and the
// server settings, read once.
type env struct {
	Config
	settings map[string]setting
	probe    *probe // the pooler probe, run once
}

// setting is one row of pg_settings, as this connection sees it.
type setting struct {
	value, unit, source string
}

// settingNames are the settings the checks read.
var settingNames = []string{
	"idle_in_transaction_session_timeout", "tcp_keepalives_idle", "tcp_keepalives_interval",
	"tcp_keepalives_count", "client_connection_check_interval", "max_locks_per_transaction",
	"max_connections", "max_prepared_transactions", "autovacuum_max_workers", "max_worker_processes",
	"max_wal_senders", "synchronous_commit", "wal_writer_delay",
	"synchronous_standby_names", "server_version_num",
}

// setting returns the named setting; ok is false when the server does not
// have it (client_connection_check_interval before PostgreSQL 14).
func (e *env) setting(ctx context.Context, name string) (setting, bool, error) {
	if e.settings == nil {
		rows, err := e.DB.QueryContext(ctx, `SELECT name, setting, COALESCE(unit, ''), source
			FROM pg_catalog.pg_settings WHERE name = ANY($1)`, settingNames)
		if err != nil {
			return setting{}, false, fmt.Errorf("reading pg_settings: %w", err)
		}
		defer rows.Close()
		got := map[string]setting{}
		for rows.Next() {
			var n string
			var s setting
			if err := rows.Scan(&n, &s.value, &s.unit, &s.source); err != nil {
				return setting{}, false, fmt.Errorf("reading pg_settings: %w", err)
			}
			got[n] = s
		}
		if err := rows.Err(); err != nil {
			return setting{}, false, fmt.Errorf("reading pg_settings: %w", err)
		}
		e.settings = got
	}
	s, ok := e.settings[name]
	return s, ok, nil
}

// unanswered is the outcome of a check whose query failed.
func unanswered(what string, err error) Check {
	if errors.Is(err, context.DeadlineExceeded) {
		return Check{Status: Fail, Detail: fmt.Sprintf("%s: no answer within %v", what, CheckTimeout),
			Fix: "make sure the server and the connection path answer (a pooler out of server connections queues clients)"}
	}
	return Check{Status: Fail, Detail: fmt.Sprintf("%s: %v", what, err),
		Fix: "make sure the role can read what the check reads (pg_settings, pg_locks, the pgadvisory schema)"}
}
