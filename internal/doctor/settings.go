package doctor

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// Evidence from docs/operations.md's "Replicas and failover" section, measured by
// TestFaultHalfOpenHoldTime (a holder whose link an in-process proxy
// blackholes). A test holds that page to these strings.
const (
	measuredDefaultHold = "with the defaults the lock was still held after 3 s (it stays until TCP gives up: minutes to hours)"
	measuredIdleTimeout = "with idle_in_transaction_session_timeout = 500ms it was released after 506–512 ms"
)

// maxDeadHolder is the longest a vanished holder may keep its locks before
// keepalives warns.
const maxDeadHolder = 5 * time.Minute

// checkPrimary fails on a hot standby: its advisory locks exclude nobody
// on the primary.
func checkPrimary(ctx context.Context, e *env) Check {
	var standby bool
	if err := e.DB.QueryRowContext(ctx, `SELECT pg_catalog.pg_is_in_recovery()`).Scan(&standby); err != nil {
		return unanswered("pg_is_in_recovery()", err)
	}
	if standby {
		return Check{Status: Fail,
			Detail: "the server is a hot standby (pg_is_in_recovery() = true): advisory locks are local to a server, so a lock taken here excludes nobody on the primary; lockgen refuses it with ErrStandby",
			Fix:    "connect to the primary; with several hosts in the URL, add target_session_attrs=read-write"}
	}
	return Check{Status: Pass, Detail: "the server is a primary (pg_is_in_recovery() = false)"}
}

// checkIdleInTransaction warns when a holder idle inside its transaction
// keeps its locks until its connection dies.
func checkIdleInTransaction(ctx context.Context, e *env) Check {
	s, _, err := e.setting(ctx, "idle_in_transaction_session_timeout")
	if err != nil {
		return unanswered("idle_in_transaction_session_timeout", err)
	}
	d := duration(s)
	evidence := "measured hold times (docs/operations.md) for a holder whose link went silent: " + measuredDefaultHold + "; " + measuredIdleTimeout
	if d == 0 {
		return Check{Status: Warn,
			Detail: fmt.Sprintf("idle_in_transaction_session_timeout = 0 (off; source: %s): a holder paused or stuck inside its lock transaction keeps its locks until its connection dies; %s", s.source, evidence),
			Fix:    "ALTER ROLE <app role> SET idle_in_transaction_session_timeout = '1min' (or ALTER DATABASE; longer than the longest pause between fn's statements)"}
	}
	return Check{Status: Pass,
		Detail: fmt.Sprintf("idle_in_transaction_session_timeout = %v (source: %s): the server ends a holder idle in its transaction for that long, and its locks with it; %s", d, s.source, evidence)}
}

// checkKeepalives warns on settings that keep a vanished holder's locks for
// long: TCP keepalives find a dead client host, and
// client_connection_check_interval a vanished client during a long
// statement.
func checkKeepalives(ctx context.Context, e *env) Check {
	var vals [3]int64
	for i, name := range []string{"tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count"} {
		s, _, err := e.setting(ctx, name)
		if err != nil {
			return unanswered(name, err)
		}
		vals[i], _ = strconv.ParseInt(s.value, 10, 64)
	}
	idle, interval, count := vals[0], vals[1], vals[2]
	check, hasCheck, err := e.setting(ctx, "client_connection_check_interval")
	if err != nil {
		return unanswered("client_connection_check_interval", err)
	}
	const fix = "ALTER SYSTEM SET tcp_keepalives_idle = 60; ALTER SYSTEM SET tcp_keepalives_interval = 10; ALTER SYSTEM SET tcp_keepalives_count = 3; " +
		"ALTER SYSTEM SET client_connection_check_interval = '10s'; SELECT pg_reload_conf(); (a dead holder's locks then go within about 90 s)"
	if idle == 0 {
		return Check{Status: Warn,
			Detail: "this connection is not TCP (a Unix socket), so the server reports no keepalive values for it; clients that connect over TCP get the server's or the OS's (Linux: 7200 s, 75 s, 9)",
			Fix:    "run lockgen doctor over TCP, with the service's URL; " + fix}
	}
	dead := time.Duration(idle+interval*count) * time.Second
	detail := fmt.Sprintf("tcp_keepalives_idle = %ds, tcp_keepalives_interval = %ds, tcp_keepalives_count = %d: the server notices a vanished client host, and releases its locks, after about %v (idle + interval × count)",
		idle, interval, count, dead)
	var problems int
	if dead > maxDeadHolder {
		problems++
		detail += fmt.Sprintf(", longer than %v", maxDeadHolder)
	}
	switch {
	case !hasCheck:
		detail += "; client_connection_check_interval needs PostgreSQL 14: a backend busy in a long statement does not notice its client vanished until the statement ends"
	case duration(check) == 0:
		problems++
		detail += "; client_connection_check_interval = 0 (off): a holder's backend busy in a long statement does not notice its client vanished until the statement ends"
	default:
		detail += fmt.Sprintf("; client_connection_check_interval = %v: a backend in a long statement checks its client that often", duration(check))
	}
	detail += ". Keepalives catch a dead or unreachable host, not a paused holder (see idle_in_transaction_session_timeout)"
	if problems > 0 {
		return Check{Status: Warn, Detail: detail, Fix: fix}
	}
	return Check{Status: Pass, Detail: detail}
}

// checkSynchronousCommit explains what synchronous_commit means for fn's
// writes; fencing forces it on for its own publish.
func checkSynchronousCommit(ctx context.Context, e *env) Check {
	s, _, err := e.setting(ctx, "synchronous_commit")
	if err != nil {
		return unanswered("synchronous_commit", err)
	}
	const fencing = "lockgen's fencing forces synchronous_commit = on for the transaction that publishes a token, whatever this setting says, so tokens stay durable"
	switch s.value {
	case "off":
		delay := "wal_writer_delay"
		if w, ok, _ := e.setting(ctx, "wal_writer_delay"); ok {
			delay = fmt.Sprintf("wal_writer_delay = %v", duration(w))
		}
		return Check{Status: Warn,
			Detail: fmt.Sprintf("synchronous_commit = off (source: %s): a server crash can lose transactions that already reported COMMIT (those of the last 3 × %s). "+
				"The lock was released at that COMMIT, so another holder may already have run on top of work that then vanishes: "+
				"a run-once window whose ledger row is lost runs again, and a fenced write that reported success can be lost; %s", s.source, delay, fencing),
			Fix: "ALTER ROLE <app role> SET synchronous_commit = on; or SET LOCAL synchronous_commit = on inside fn for the writes that must survive a crash"}
	case "local":
		detail := fmt.Sprintf("synchronous_commit = local (source: %s): fn's writes are flushed on this server before COMMIT returns", s.source)
		if names, _, _ := e.setting(ctx, "synchronous_standby_names"); names.value != "" {
			detail += ", but not waited for on the synchronous standbys: a failover can lose them"
		}
		return Check{Status: Pass, Detail: detail + "; " + fencing}
	}
	return Check{Status: Pass,
		Detail: fmt.Sprintf("synchronous_commit = %s (source: %s): a COMMIT that returned is durable, so fn's writes and the run-once ledger row survive a crash; %s", s.value, s.source, fencing)}
}

// duration converts a time setting in its unit.
func duration(s setting) time.Duration {
	n, err := strconv.ParseInt(s.value, 10, 64)
	if err != nil {
		return 0
	}
	switch s.unit {
	case "ms":
		return time.Duration(n) * time.Millisecond
	case "s":
		return time.Duration(n) * time.Second
	case "min":
		return time.Duration(n) * time.Minute
	}
	return time.Duration(n) * time.Second
}
