package doctor

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// probeStatements is how many statements the pooler probe sends back to
// back on one client connection: the first sets a session marker, the
// others read it.
const probeStatements = 5

// probeSetting is the session setting (a placeholder of the custom prefix
// "lockgen") that marks the probe's server session. Its value is random per
// run, so a marker that an earlier run left on a pooled server connection
// is never mistaken for this run's.
const probeSetting = "lockgen.doctor_probe"

// probe is what the pooler probe found. It runs once per doctor run and
// serves the pooler and exclusion checks.
//
// A transaction pooler moves a client between server connections at
// transaction boundaries. Two things show it: statements sent back to back
// on one client connection that are answered by different backends, or that
// lose a session-level setting (set_config(name, value, false)) the first
// one made (PgBouncer with server_round_robin=1 hands each transaction the
// least recently used server connection); and a second client that lands
// on the first one's server connection and sees its setting (PgBouncer's
// default hands out the most recently used one). Neither can prove session
// pooling: a transaction pooler can keep a client on one server connection
// for as long as no other client needs it.
type probe struct {
	err  error  // the probe could not run
	what string // what failed, with err

	known     bool   // the driver exposes the pid announced at connect
	announced uint32 // the announced pid, with known

	pidsA      []int32 // backends that answered the first connection's statements, in order
	markerSeen int     // how many of the first connection's later statements saw its marker
	pidB       int32   // backend that answered the second connection
	bSawMarker bool    // the second connection saw the first one's marker

	// stmtErr is set when a transaction of two statements was refused, as
	// PgBouncer's pool_mode=statement refuses every transaction.
	stmtErr error
}

// poolerProbe runs the probe once per run and returns its outcome.
func (e *env) poolerProbe(ctx context.Context) *probe {
	if e.probe == nil {
		e.probe = runProbe(ctx, e.DB)
	}
	return e.probe
}

func runProbe(ctx context.Context, db *sql.DB) *probe {
	p := &probe{}
	a, b, err := twoConns(ctx, db)
	if err != nil {
		p.err, p.what = err, "two connections"
		return p
	}
	defer a.Close()
	defer b.Close()
	p.announced, p.known = announcedPID(a)
	var token [8]byte
	_, _ = rand.Read(token[:])
	marker := hex.EncodeToString(token[:])
	var pid int32
	var ignored string
	if err := a.QueryRowContext(ctx, `SELECT pg_catalog.pg_backend_pid(), pg_catalog.set_config($1, $2, false)`, probeSetting, marker).Scan(&pid, &ignored); err != nil {
		p.err, p.what = err, "pg_backend_pid() and set_config()"
		return p
	}
	p.pidsA = append(p.pidsA, pid)
	// Put the setting back on whichever server connection this lands on:
	// a placeholder setting is harmless, but a pooler keeps it.
	defer func() {
		_, _ = a.ExecContext(context.WithoutCancel(ctx), `SELECT pg_catalog.set_config($1, '', false)`, probeSetting)
	}()
	read := func(c *sql.Conn) (int32, bool, error) {
		var pid int32
		var got sql.NullString
		err := c.QueryRowContext(ctx, `SELECT pg_catalog.pg_backend_pid(), pg_catalog.current_setting($1, true)`, probeSetting).Scan(&pid, &got)
		return pid, got.String == marker, err
	}
	for range probeStatements - 1 {
		pid, seen, err := read(a)
		if err != nil {
			p.err, p.what = err, "pg_backend_pid() and current_setting()"
			return p
		}
		p.pidsA = append(p.pidsA, pid)
		if seen {
			p.markerSeen++
		}
	}
	if p.pidB, p.bSawMarker, err = read(b); err != nil {
		p.err, p.what = err, "pg_backend_pid() and current_setting() on a second connection"
		return p
	}
	if p.moved() || p.shared() || p.proxied() {
		if err := twoStatementTx(ctx, a); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			p.stmtErr = err
		}
	}
	return p
}

// moved reports that the first connection's statements were answered by
// more than one backend, or lost its session setting.
func (p *probe) moved() bool {
	return slices.ContainsFunc(p.pidsA, func(pid int32) bool { return pid != p.pidsA[0] }) || p.markerSeen < len(p.pidsA)-1
}

// shared reports that the second connection landed on a server session
// the first one used.
func (p *probe) shared() bool { return p.bSawMarker || slices.Contains(p.pidsA, p.pidB) }

// txPooler reports proof of transaction (or statement) pooling.
func (p *probe) txPooler() bool { return p.moved() || p.shared() }

// proxied reports that something between the client and the server
// announced a pid that is not the server's: a pooler.
func (p *probe) proxied() bool { return p.known && p.announced != uint32(p.pidsA[0]) }

// evidence says what the probe saw.
func (p *probe) evidence() string {
	var b strings.Builder
	fmt.Fprintf(&b, "one connection sent %d statements back to back: answered by backends %s; the session setting %s that the first set (set_config(…, false)) was seen by %d of the %d that followed",
		len(p.pidsA), pids(p.pidsA), probeSetting, p.markerSeen, len(p.pidsA)-1)
	fmt.Fprintf(&b, "; a second connection was answered by backend %d", p.pidB)
	if p.bSawMarker {
		b.WriteString(" and saw the first connection's setting")
	} else {
		b.WriteString(" and did not see the first connection's setting")
	}
	return b.String()
}

// checkPooler tells a direct connection from a pooler, proves transaction
// (or statement) pooling when it sees it, and judges the path by the uses
// the service declares.
func checkPooler(ctx context.Context, e *env) Check {
	p := e.poolerProbe(ctx)
	if p.err != nil {
		return unanswered(p.what, p.err)
	}
	ev := p.evidence()
	if p.stmtErr != nil {
		return Check{Status: Fail,
			Detail: fmt.Sprintf("a pooler answers and refuses a transaction of two statements (%v), as PgBouncer's pool_mode=statement does: every lockgen call runs a transaction, so none can work; %s", p.stmtErr, ev),
			Fix:    "use pool_mode=transaction (transaction locks) or session (also session locks), or connect directly"}
	}
	switch {
	case p.txPooler():
		via := "a pooler moves clients between server connections"
		if p.proxied() {
			via = fmt.Sprintf("a pooler answers (the pid announced at connect, %d, is not the server's) and moves clients between server connections", p.announced)
		}
		var how []string
		if p.moved() {
			how = append(how, "one client's statements ran in more than one server session")
		}
		if p.shared() {
			how = append(how, "a second client ran in the first one's server session")
		}
		detail := fmt.Sprintf("%s: %s, as PgBouncer's pool_mode=transaction does (%s); %s; %s",
			via, strings.Join(how, " and "), ev, e.txPoolerUses(), e.usesText())
		if e.needsSessionPath() {
			return Check{Status: Fail, Detail: detail,
				Fix: "give session locks, leader election and Migrate a direct URL or a pool in pool_mode=session, or lead with WithLease, which works here; if this service uses only transaction locks and leases, say so: lockgen doctor -uses exclusive,lease"}
		}
		return Check{Status: Pass, Detail: detail}
	case p.proxied():
		detail := fmt.Sprintf("a pooler answers (the pid announced at connect, %d, is not the server's, %d), and this probe saw no transaction pooling: %s. A probe can prove transaction pooling, never session pooling: a transaction pooler whose other clients are idle can look like this; %s",
			p.announced, p.pidsA[0], ev, e.usesText())
		if e.needsSessionPath() {
			return Check{Status: Warn, Detail: detail,
				Fix: "confirm the pool's mode (SHOW CONFIG on PgBouncer's admin console): pool_mode=session is safe for every lockgen call (declare it with WithSessionPooler()); pool_mode=transaction is safe only for transaction locks"}
		}
		return Check{Status: Pass, Detail: detail + ": transaction locks work through a pooler in either mode"}
	}
	detail := fmt.Sprintf("no pooler seen: %s", ev)
	if p.known {
		detail += fmt.Sprintf("; the pid announced at connect is the server's (%d)", p.announced)
	}
	return Check{Status: Pass, Detail: detail}
}

func twoConns(ctx context.Context, db *sql.DB) (*sql.Conn, *sql.Conn, error) {
	a, err := db.Conn(ctx)
	if err != nil {
		return nil, nil, err
	}
	b, err := db.Conn(ctx)
	if err != nil {
		a.Close()
		return nil, nil, err
	}
	return a, b, nil
}

// announcedPID is the backend pid the server (or a pooler) announced at
// connect (BackendKeyData); ok is false for drivers other than pgx stdlib.
func announcedPID(c *sql.Conn) (pid uint32, ok bool) {
	_ = c.Raw(func(dc any) error {
		if pc, is := dc.(interface{ Conn() *pgx.Conn }); is {
			pid, ok = pc.Conn().PgConn().PID(), true
		}
		return nil
	})
	return pid, ok
}

// twoStatementTx runs a transaction of two statements.
func twoStatementTx(ctx context.Context, c *sql.Conn) error {
	tx, err := c.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT 1`); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `SELECT 2`); err != nil {
		return err
	}
	return tx.Commit()
}

func pids(ps []int32) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = fmt.Sprint(p)
	}
	return "[" + strings.Join(s, " ") + "]"
}
