package doctor

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockgen/lockgen/keyspace"
)

// secondWait bounds how long the exclusion check waits for the second
// connection's transaction while the first holds its transaction open: a
// transaction pooler with one server connection makes it wait for ever.
const secondWait = time.Second

// probeRounds is how many times each of two connections asks for its
// backend pid when looking for a pooler that multiplexes.
const probeRounds = 3

// checkPooler tells a direct connection from a pooler, and a pooler that
// keeps each client on one server connection (session pooling) from one
// that moves clients between server connections (transaction or statement
// pooling).
func checkPooler(ctx context.Context, e *env) Check {
	a, b, err := twoConns(ctx, e.DB)
	if err != nil {
		return unanswered("two connections", err)
	}
	defer a.Close()
	defer b.Close()
	announced, known := announcedPID(a)
	var seenA, seenB []int32
	for range probeRounds {
		for _, side := range []struct {
			conn *sql.Conn
			seen *[]int32
		}{{a, &seenA}, {b, &seenB}} {
			pid, err := backendPID(ctx, side.conn)
			if err != nil {
				return unanswered("pg_backend_pid()", err)
			}
			*side.seen = append(*side.seen, pid)
		}
	}
	multiplexed := !same(seenA) || !same(seenB) || overlap(seenA, seenB)
	proxied := known && announced != uint32(seenA[0])
	probe := fmt.Sprintf("two connections asked for their backend pid %d times each, alternately: %s and %s", probeRounds, pids(seenA), pids(seenB))

	// A statement pooler refuses transactions of more than one statement.
	if multiplexed || proxied {
		if err := twoStatementTx(ctx, a); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return Check{Status: Fail,
				Detail: fmt.Sprintf("a pooler answers and refuses a transaction of two statements (%v), as PgBouncer's pool_mode=statement does: every lockgen call runs a transaction, so none can work; %s", err, probe),
				Fix:    "use pool_mode=transaction (transaction locks) or session (also session locks), or connect directly"}
		}
	}
	const txnOnly = "transaction locks (RunExclusive, RunOnce, fencing) work through it; session locks (RunSession), leaders and Migrate do not: their lock would stay on a server connection that other clients get"
	switch {
	case multiplexed:
		via := "a pooler moves clients between server connections"
		if proxied {
			via = fmt.Sprintf("a pooler answers (the pid announced at connect, %d, is not the server's) and moves clients between server connections", announced)
		}
		return Check{Status: Warn,
			Detail: fmt.Sprintf("%s, as PgBouncer's pool_mode=transaction does: %s; %s", via, probe, txnOnly),
			Fix:    "give session locks and lockgen migrate a direct URL (or a session-mode pool); transaction locks may stay on this one"}
	case proxied:
		return Check{Status: Warn,
			Detail: fmt.Sprintf("a pooler answers (the pid announced at connect, %d, is not the server's, %d), but each connection kept its server connection: %s, as in pool_mode=session, where session locks are safe. A transaction pooler can also look like this when it has idle server connections to spare", announced, seenA[0], probe),
			Fix:    "confirm the pool's mode: session is safe for every lockgen call; transaction mode is safe only for transaction locks"}
	}
	detail := fmt.Sprintf("no pooler seen: each connection kept its own backend (%s)", probe)
	if known {
		detail += fmt.Sprintf(", and the pid announced at connect is the server's (%d)", announced)
	}
	return Check{Status: Pass, Detail: detail}
}

// checkExclusion takes a session-level lock on one connection and tries it
// from a second: the second must not get it. It then does the same with
// transaction-level locks. Every lock it takes is released before it
// returns.
func checkExclusion(ctx context.Context, e *env) Check {
	a, b, err := twoConns(ctx, e.DB)
	if err != nil {
		return unanswered("two connections", err)
	}
	defer a.Close()
	defer b.Close()
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
		detail += "; " + xactExclusion(ctx, a, b)
		return Check{Status: Fail, Detail: detail,
			Fix: "connect directly to PostgreSQL, or through a pooler in pool_mode=session, for session locks; lockgen needs PostgreSQL's advisory locks"}
	}
	return Check{Status: Pass,
		Detail: fmt.Sprintf("a second connection (backend %d) could not take the session lock %d that the first (backend %d) held; %s", pidB, key, pidA, xactExclusion(ctx, a, b))}
}

// xactExclusion tries the same with transaction-level locks, as
// RunExclusive takes them, and says what it found.
func xactExclusion(ctx context.Context, a, b *sql.Conn) string {
	key := probeKey("xact")
	txA, err := a.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Sprintf("transaction locks not tested: %v", err)
	}
	defer txA.Rollback()
	var gotA bool
	if err := txA.QueryRowContext(ctx, `SELECT pg_catalog.pg_try_advisory_xact_lock($1)`, key).Scan(&gotA); err != nil || !gotA {
		return fmt.Sprintf("transaction locks not tested: the first transaction did not get its lock (%v)", err)
	}
	bctx, cancel := context.WithTimeout(ctx, secondWait)
	defer cancel()
	txB, err := b.BeginTx(bctx, nil)
	if err != nil {
		return fmt.Sprintf("transaction locks not tested: the second connection got no transaction within %v while the first held one open (%v): a pooler with one server connection?", secondWait, err)
	}
	defer txB.Rollback()
	var gotB bool
	if err := txB.QueryRowContext(bctx, `SELECT pg_catalog.pg_try_advisory_xact_lock($1)`, key).Scan(&gotB); err != nil {
		return fmt.Sprintf("transaction locks not tested: the second connection got no answer within %v while the first held its transaction open (%v): a pooler with one server connection?", secondWait, err)
	}
	if gotB {
		return "transaction locks exclude nobody either: a second transaction got the transaction lock the first held"
	}
	return "transaction locks (RunExclusive) exclude too: a second transaction could not take the transaction lock the first held"
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

func backendPID(ctx context.Context, c *sql.Conn) (int32, error) {
	var pid int32
	err := c.QueryRowContext(ctx, `SELECT pg_catalog.pg_backend_pid()`).Scan(&pid)
	return pid, err
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

func same(pids []int32) bool {
	for _, p := range pids {
		if p != pids[0] {
			return false
		}
	}
	return true
}

func overlap(a, b []int32) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}

func pids(ps []int32) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = fmt.Sprint(p)
	}
	return "[" + strings.Join(s, " ") + "]"
}
