package doctor

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/lockgen/lockgen/keyspace"
)

// secondWait bounds how long the exclusion check waits for the second
// connection's transaction while the first holds its transaction open: a
// transaction pooler with one server connection makes it wait for ever.
const secondWait = time.Second

// checkExclusion takes a session-level lock on one connection and tries it
// from a second: the second must not get it. It then does the same with
// transaction-level locks. Every lock it takes is released before it
// returns. Where the pooler probe proved transaction pooling, it takes no
// session lock (it would leak): session locks fail there when a declared
// use needs them, and only transaction locks are tried.
func checkExclusion(ctx context.Context, e *env) Check {
	p := e.poolerProbe(ctx)
	a, b, err := twoConns(ctx, e.DB)
	if err != nil {
		return unanswered("two connections", err)
	}
	defer a.Close()
	defer b.Close()
	if p.err == nil && p.txPooler() {
		return txPoolerExclusion(ctx, e, p, a, b)
	}
	key := probeKey("session")
	var held []*sql.Conn // one entry per grant, on the connection that got it
	defer func() { release(context.WithoutCancel(ctx), key, held, a, b) }()

	gotA, pidA, err := tryLock(ctx, a, key)
	if err != nil {
		return unanswered("pg_try_advisory_lock on the first connection", err)
	}
	if gotA {
		held = append(held, a)
	} else {
		return Check{Status: Warn, Detail: fmt.Sprintf("the first connection could not take the fresh key %d, which nobody should hold; another doctor run?", key),
			Fix: "run lockgen doctor again"}
	}
	gotB, pidB, err := tryLock(ctx, b, key)
	if err != nil {
		return unanswered("pg_try_advisory_lock on the second connection", err)
	}
	if gotB {
		held = append(held, b)
		detail := fmt.Sprintf("a second connection also got the session lock %d that the first held: ", key)
		if pidA == pidB {
			detail += fmt.Sprintf("both were answered by backend %d, which grants a session lock again to the session that holds it, so a pooler multiplexes client connections onto one server session; session locks (RunSession, leaders, Migrate) exclude nobody here", pidA)
		} else {
			detail += fmt.Sprintf("backends %d and %d both hold it, so the server's advisory-lock functions exclude nobody (a stub implementation: CockroachDB documents its session-level ones as no-ops)", pidA, pidB)
		}
		detail += "; " + xactExclusion(ctx, a, b).text
		return Check{Status: Fail, Detail: detail,
			Fix: "connect directly to PostgreSQL, or through a pooler in pool_mode=session, for session locks; lockgen needs PostgreSQL's advisory locks"}
	}
	return Check{Status: Pass,
		Detail: fmt.Sprintf("a second connection (backend %d) could not take the session lock %d that the first (backend %d) held; %s", pidB, key, pidA, xactExclusion(ctx, a, b).text)}
}

// txPoolerExclusion is the exclusion check behind a proven transaction
// pooler: transaction locks are tried; session locks fail when a declared
// use needs them.
func txPoolerExclusion(ctx context.Context, e *env, p *probe, a, b *sql.Conn) Check {
	x := xactExclusion(ctx, a, b)
	if e.needsSessionPath() {
		return Check{Status: Fail,
			Detail: fmt.Sprintf("session locks exclude nobody reliably here: the pooler probe proved transaction pooling (%s), so a session lock stays on a server connection that other clients then use (and are granted it again), and its unlock can run on another server connection (\"you don't own a lock\"), leaking it; no session lock was taken, so none leaked; %s; %s",
				p.evidence(), x.text, e.usesText()),
			Fix: "give session locks, leader election and Migrate a direct URL or a pool in pool_mode=session, or lead with WithLease, which works here; if this service uses only transaction locks and leases, say so: lockgen doctor -uses exclusive,lease"}
	}
	detail := fmt.Sprintf("%s; session locks were not tried: transaction pooling was proven and no declared use needs them (%s)", x.text, e.usesText())
	switch x.outcome {
	case xactExcludes:
		return Check{Status: Pass, Detail: detail}
	case xactExcludesNobody:
		return Check{Status: Fail, Detail: detail, Fix: "lockgen needs PostgreSQL's advisory locks"}
	}
	return Check{Status: Warn, Detail: detail,
		Fix: "give the pool at least two server connections (PgBouncer's default_pool_size), so that a transaction waiting for another's lock does not wait for its server connection"}
}

// xactOutcome is what xactExclusion found.
type xactOutcome int

const (
	xactNotTested xactOutcome = iota
	xactExcludes
	xactExcludesNobody
)

// xactResult is xactExclusion's outcome and what to print.
type xactResult struct {
	outcome xactOutcome
	text    string
}

// xactExclusion tries the same with transaction-level locks, as
// RunExclusive takes them, and says what it found.
func xactExclusion(ctx context.Context, a, b *sql.Conn) xactResult {
	notTested := func(format string, args ...any) xactResult {
		return xactResult{xactNotTested, "transaction locks not tested: " + fmt.Sprintf(format, args...)}
	}
	key := probeKey("xact")
	txA, err := a.BeginTx(ctx, nil)
	if err != nil {
		return notTested("%v", err)
	}
	defer txA.Rollback()
	var gotA bool
	if err := txA.QueryRowContext(ctx, `SELECT pg_catalog.pg_try_advisory_xact_lock($1)`, key).Scan(&gotA); err != nil || !gotA {
		return notTested("the first transaction did not get its lock (%v)", err)
	}
	bctx, cancel := context.WithTimeout(ctx, secondWait)
	defer cancel()
	txB, err := b.BeginTx(bctx, nil)
	if err != nil {
		return notTested("the second connection got no transaction within %v while the first held one open (%v): a pooler with one server connection?", secondWait, err)
	}
	defer txB.Rollback()
	var gotB bool
	if err := txB.QueryRowContext(bctx, `SELECT pg_catalog.pg_try_advisory_xact_lock($1)`, key).Scan(&gotB); err != nil {
		return notTested("the second connection got no answer within %v while the first held its transaction open (%v): a pooler with one server connection?", secondWait, err)
	}
	if gotB {
		return xactResult{xactExcludesNobody, "transaction locks exclude nobody either: a second transaction got the transaction lock the first held"}
	}
	return xactResult{xactExcludes, "transaction locks (RunExclusive) exclude too: a second transaction could not take the transaction lock the first held"}
}

// release unlocks key once for every grant in held, on the connection that
// got it, and checks pg_locks: through a pooler an unlock may land on
// another server connection, so it tries again a few times.
func release(ctx context.Context, key int64, held []*sql.Conn, a, b *sql.Conn) {
	ctx, cancel := context.WithTimeout(ctx, CheckTimeout)
	defer cancel()
	for _, c := range held {
		_, _ = c.ExecContext(ctx, `SELECT pg_catalog.pg_advisory_unlock($1)`, key)
	}
	for i := 0; i < 10 && len(held) > 0; i++ {
		var n int
		if err := a.QueryRowContext(ctx, `SELECT count(*) FROM pg_catalog.pg_locks
			WHERE locktype = 'advisory' AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = $1`, key).Scan(&n); err != nil || n == 0 {
			return
		}
		for _, c := range []*sql.Conn{a, b} {
			_, _ = c.ExecContext(ctx, `SELECT pg_catalog.pg_advisory_unlock($1)`, key)
		}
	}
}

// probeKey is a lock key of this run alone, so that two doctors never
// meet and no service's lock is touched.
func probeKey(kind string) int64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return keyspace.ParamID("lockgen.doctor.exclusion", kind, hex.EncodeToString(b[:]))
}

func tryLock(ctx context.Context, c *sql.Conn, key int64) (got bool, pid int32, err error) {
	err = c.QueryRowContext(ctx, `SELECT pg_catalog.pg_try_advisory_lock($1), pg_catalog.pg_backend_pid()`, key).Scan(&got, &pid)
	return got, pid, err
}
