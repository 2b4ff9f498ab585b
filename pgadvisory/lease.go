package pgadvisory

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// WithLease makes a leadership of [Locker.Lead] or [Locker.Campaign], or
// the lock of [Locker.RunSession], a lease: a row of
// pgadvisory.lease (migrations/00009_lease.sql) with an expiry on the
// database's clock, instead of a session-level advisory lock. It needs no
// session of its own, so it works through any pooler (PgBouncer in
// transaction mode, Supavisor, RDS Proxy), and holds no connection while
// fn runs: taking, renewing and releasing it are single statements, each
// its own short transaction on a connection borrowed from the pool.
//
// Taking the lease draws a term from lockgen's token sequence and publishes
// it as the lock's fencing token exactly as an election does
// (pgadvisory.leader_elect: a durable commit, writers of the previous term
// still in flight ordered before it, waiting at most 5s for them), so a
// table fenced by the lock rejects the writes of every older term, of a
// lease or of a session-lock leader, with [ErrStaleToken]. Terms of one
// lock strictly increase.
//
// The lease is renewed every ttl/3 while fn runs. The renewals of all the
// leases of one [Locker] with the same ttl are one statement
// (pgadvisory.lease_renew), whatever their number. No wall clocks are
// compared across machines: the database sets the expiry (its
// clock_timestamp() plus ttl), and the holder's own deadline is ttl after
// it sent its last successful acquisition or renewal, on its monotonic
// clock. fn's context is canceled, with a cause wrapping [ErrLockLost],
// ttl/10 before that deadline passes without a successful renewal, and as
// soon as a renewal finds the lease gone, expired or its term superseded
// (a newer term published for the lock). A lease that expired is never
// renewed, even when nobody took it. fn must then stop acting as the
// leader; its fenced writes fail once another leader took over.
//
// When fn returns, the lease is released at once (pgadvisory.lease_release),
// so the next candidate takes it without waiting for the expiry; a release
// that fails leaves the lease to expire. The release's transaction commits
// without waiting for its WAL flush (synchronous_commit off): lost in a
// crash, it leaves the lease to expire, and the successor's durable term
// flushes it anyway, so a hand-off costs one flush. Lead returns fn's error, or an
// error of kind ErrLockLost (Op "watch") if the lease was lost first.
//
// Lead with WithLease tries once: while the lease is held (or a session
// holds the lock) it returns an error matching [ErrLocked] without calling
// fn. [Locker.Campaign] with WithLease waits for the lease without holding
// a connection: it tries again every ttl/10 (within 10ms and 1s, jittered;
// a try on a held lease is one read-only statement) until it takes the
// lease or ctx ends, and at once when the lease is released: the release
// sends NOTIFY pgadvisory_wait, which reaches the campaigns of every
// Locker listening (one listening connection per Locker, outside its
// pool, open while a call waits, as for [WithWait]), and wakes its own
// Locker's campaigns directly. Where no notification arrives (a
// transaction pooler between the Locker and the server, a database/sql
// driver other than pgx's) it takes a released lease within one poll; an
// abandoned one within one poll of its expiry. After its own leader
// resigned it waits two polls, deaf to releases, before trying again, so
// that a candidate already waiting takes the lease first.
//
// [Locker.RunSession] with WithLease holds the lock as a lease, for long
// work through a pooler: the same row, term and rules as a lease
// leadership (the term is published as the lock's token, and
// [Locker.CurrentLeader] reports the holder, the Locker's default holder
// name), fn's context canceled with ErrLockLost as above, the lease
// released when fn returns. It tries once ([ErrLocked]). A lease excludes
// other leases and session-lock leaders of the lock, but not a plain
// RunSession's session lock: do not mix both kinds on one lock.
//
// Refused with [ErrInvalidArgument]: waiting with [WithWait] (Lead and
// RunSession try once), [WithShared] and [WithLocks] (a lease is one
// lock's, with one holder), and the options of session locks
// ([WithCheckInterval], [WithCheckTimeout], [WithSessionPooler]).
// [Locker.CurrentLeader] reports a lease leader (PID 0) while its lease is
// held, unexpired and its term published. ttl must be positive; it is
// sent with microsecond precision. A lease whose acquisition's answer was
// lost (ctx ended, the connection broke) stays taken until it expires.
func WithLease(ttl time.Duration) Option {
	return optionFunc(func(c *callState) {
		c.mark(optLease)
		if ttl <= 0 {
			c.setErr(ErrInvalidArgument, fmt.Errorf("WithLease: ttl must be positive, got %v", ttl))
			return
		}
		c.lease = ttl
	})
}

// The statements of a lease, each its own transaction. Arrays and the
// secret travel as text, so that any database/sql driver can send them.
const (
	leaseAcquireSQL = `SELECT pgadvisory.lease_acquire($1::bigint, $2::text, $3::text::uuid, $4::text::interval, $5::text)`
	leaseRenewSQL   = `SELECT pgadvisory.lease_renew($1::text::bigint[], $2::text::uuid, $3::text::interval)::text`
	// leaseReleaseSQL releases the lease and, when it did, queues NOTIFY
	// pgadvisory_wait "lockID:0", delivered when the release commits: it
	// wakes the campaigns waiting for the lease in every Locker that
	// listens (see runLease).
	leaseReleaseSQL = `SELECT r, (CASE WHEN r THEN pg_catalog.pg_notify('` + waitChannel +
		`', $1::pg_catalog.int8::pg_catalog.text OPERATOR(pg_catalog.||) ':0') END) IS NOT NULL ` +
		`FROM pg_catalog.set_config('synchronous_commit', 'off', true) AS s, pgadvisory.lease_release($1::bigint, $2::text::uuid) AS r`
)

// leaseReleaseTimeout bounds the release when fn returns (and so does the
// ttl).
const leaseReleaseTimeout = 5 * time.Second

// checkLease refuses what a lease does not support yet.
func (c *callState) checkLease() error {
	for _, k := range []optionSet{optWait, optCheckInterval, optCheckTimeout, optSessionPooler, optShared, optLocks} {
		if c.given&k != 0 {
			why := "a lease is renewed every ttl/3 on connections borrowed from the pool, not checked on a session"
			switch k {
			case optWait:
				why = "waiting for a lease is not supported yet: Lead and RunSession with WithLease try once and return ErrLocked while the lease is held " +
					"(Campaign waits for it)"
			case optShared:
				why = "a lease has one holder"
			case optLocks:
				why = "a lease is one lock's"
			}
			return fmt.Errorf("%s with %s: %s", c.optionName(k), c.optionName(optLease), why)
		}
	}
	return nil
}

// leasePoll is how often a campaign with a lease tries to take it while
// another holds it: a tenth of the ttl, within 10ms and 1s. A try on a
// held lease is one short read-only statement.
func leasePoll(ttl time.Duration) time.Duration {
	return min(max(ttl/10, leasePollMin), leasePollMax)
}

// The bounds of leasePoll (variables for the tests of wake-ups, which
// switch polling off).
var (
	leasePollMin = 10 * time.Millisecond
	leasePollMax = time.Second
)

// poolerHint adds to a pooler refusal of Lead that a lease works there.
func (c *callState) poolerHint(detail error) error {
	if !c.lead {
		return detail
	}
	return fmt.Errorf("%w; behind a transaction pooler, lead with WithLease", detail)
}

// leaseState is what a Locker keeps of its leases: its owner secret (one
// per Locker: it renews and releases only this Locker's leases) and the
// leases it holds, renewed together by one goroutine while there are any.
// The package-level functions (deprecated) share one state over all their
// pools: a lease is known by its pool and lock ID, and renewals are grouped
// by pool and ttl.
type leaseState struct {
	mu      sync.Mutex
	secret  string
	holds   map[leaseKey]*leaseHold
	running bool
	kick    chan struct{}
}

// leaseKey names a held lease: its pool (*sql.DB or *pgxpool.Pool) and
// lock ID.
type leaseKey struct {
	pool any
	id   int64
}

// leaseHold is one held lease.
type leaseHold struct {
	c        *callState
	pool     any
	id       int64
	ttl      time.Duration
	deadline time.Time // ttl after the last successful acquisition or renewal was sent (monotonic)
	next     time.Time // when to renew next
	timer    *time.Timer
	cancel   context.CancelCauseFunc
	lost     error
}

// key is h's key in leaseState.holds.
func (h *leaseHold) key() leaseKey { return leaseKey{h.pool, h.id} }

// margin is how long before its deadline a lease counts as lost.
func (h *leaseHold) margin() time.Duration { return h.ttl / 10 }

// ownerSecret is s's owner secret in uuid's text form, made once.
func (s *leaseState) ownerSecret() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.secret == "" {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", fmt.Errorf("pgadvisory: WithLease: owner secret: %w", err)
		}
		h := hex.EncodeToString(b[:])
		s.secret = h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
	}
	return s.secret, nil
}

// leaseQuery runs one statement on pool and scans its one row.
func leaseQuery(ctx context.Context, pool any, query string, args []any, dest ...any) error {
	switch p := pool.(type) {
	case *sql.DB:
		return p.QueryRowContext(ctx, query, args...).Scan(dest...)
	case *pgxpool.Pool:
		return p.QueryRow(ctx, query, args...).Scan(dest...)
	}
	return fmt.Errorf("pgadvisory: internal error: lease on a pool of type %T", pool)
}

// intervalText is d as PostgreSQL interval text.
func intervalText(d time.Duration) string {
	return strconv.FormatInt(d.Microseconds(), 10) + " microseconds"
}

// leadLease is Lead (or RunSession: c.lead is false) with WithLease.
func leadLease(ctx context.Context, c *callState, s *lockerState, pool any, fn func(context.Context, int64) error) error {
	if err := c.checkLease(); err != nil {
		return c.invalid("options", err)
	}
	kind := CallLead
	if !c.lead {
		kind = CallSession
	}
	return c.observed(ctx, kind, "", 0, func(ctx context.Context) error {
		return runLease(ctx, c, &s.lease, &s.waits, &s.polls, pool, fn)
	})
}

// leaseListener opens the listening connections of pool's Locker (see
// waitHub), through which lease releases wake its campaigns.
func leaseListener(pool any) func(context.Context) (notifyConn, error) {
	switch p := pool.(type) {
	case *sql.DB:
		return stdlibListener(p)
	case *pgxpool.Pool:
		return pgxListener(p)
	}
	return nil
}

// runLease takes the lease, runs fn while renewing it, and releases it.
// Lead and RunSession try once; Campaign tries every leasePoll until it
// takes the lease or ctx ends, and at once when a release wakes it: the
// NOTIFY of leaseReleaseSQL through the Locker's listening connection
// (hub), or a release by its own Locker directly. After its leader
// resigned it first waits two polls, deaf to wake-ups, so that the
// candidates already waiting take the lease first. A poll (not a
// wake-up's try) first waits for the Locker's next poll slot (polls).
func runLease(ctx context.Context, c *callState, st *leaseState, hub *waitHub, polls *pollGate, pool any, fn func(context.Context, int64) error) (err error) {
	if err := ctx.Err(); err != nil {
		return c.failure(ctx, "begin", err)
	}
	secret, err := st.ownerSecret()
	if err != nil {
		return c.failure(ctx, "begin", err)
	}
	id := c.ids[0]
	first := time.Now()
	var start time.Time // when the successful acquisition was sent
	var term sql.NullInt64
	args := []any{id, c.holder, secret, intervalText(c.lease), lockTimeoutSetting(defaultPublishTimeout)}
	var sub *waitSub // a campaign's wake-up, from its first try on
	defer func() {
		if sub != nil {
			hub.unsubscribe(sub)
			polls.exit()
		}
	}()
	for wait := c.resigned; ; wait = true {
		if wait {
			if !c.campaign {
				return c.locked()
			}
			poll := leasePoll(c.lease)
			d := poll/2 + mrand.N(poll/2+1)
			var woken <-chan struct{}
			if c.resigned && start.IsZero() {
				d = 2 * poll // after every poller's next try, with a poll to spare
			} else {
				woken = sub.ch
			}
			woke, err := sleepWoken(ctx, d, woken)
			if err == nil && !woke {
				// A poll: it waits for its Locker's next poll slot.
				_, err = polls.wait(ctx, time.Time{}, time.Time{}, woken)
			}
			if err != nil {
				return c.failure(ctx, "lock", err)
			}
		}
		if sub == nil && c.campaign {
			// Subscribed before the try: a release after it wakes the
			// campaign once the Locker listens.
			sub = hub.subscribe([]int64{id}, false, leaseListener(pool))
			polls.enter()
		}
		start = time.Now()
		if err := leaseQuery(ctx, pool, leaseAcquireSQL, args, &term); err != nil {
			if SQLState(err) == "25006" { // lease_acquire on a hot standby
				return c.refusal(ctx, "begin", ErrStandby, err)
			}
			return c.failure(ctx, "elect", err)
		}
		if term.Valid {
			break
		}
	}
	acquired := time.Now()
	c.granted(acquired.Sub(first), 0)
	if sub != nil {
		hub.unsubscribe(sub)
		polls.exit()
		sub = nil
	}

	workCtx, cancel := context.WithCancelCause(ctx)
	h := &leaseHold{c: c, pool: pool, id: id, ttl: c.lease, deadline: start.Add(c.lease), next: start.Add(c.lease / 3), cancel: cancel}
	st.add(h)
	defer func() {
		lost := st.remove(h)
		cancel(nil)
		// Bounded by the ttl too: an unreleased lease expires by then.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), min(leaseReleaseTimeout, c.lease))
		var released, notified bool
		if rerr := leaseQuery(rctx, pool, leaseReleaseSQL, []any{id, secret}, &released, &notified); rerr != nil {
			// The lease expires by itself; fn did not run without it.
			c.emit(Event{Kind: EventError, Err: &Error{Op: OpRelease, LockIDs: c.ids, Name: c.name, SQLState: SQLState(rerr), Kind: classify(rerr), Err: rerr}})
		} else if released {
			// This Locker's campaigns for the lease try at once, without
			// waiting for the NOTIFY to come back through the server.
			hub.wake(id, 0, false)
		}
		rcancel()
		if r := recover(); r != nil {
			if obs := c.obs; obs != nil {
				obs.held = time.Since(acquired)
			}
			panic(r)
		}
		switch {
		case lost != nil:
			err = &Error{Op: OpWatch, LockIDs: c.ids, Name: c.name, Kind: ErrLockLost, Err: joinErr(lost, err)}
		case err != nil || ctx.Err() != nil:
			err = c.fnFailure(ctx, err)
		}
		if obs := c.obs; obs != nil {
			obs.held = time.Since(acquired)
		}
	}()
	return fn(workCtx, term.Int64)
}

// sleepWoken sleeps for d, or until woken (a nil channel never wakes),
// or until ctx is done; woke reports a wake-up.
func sleepWoken(ctx context.Context, d time.Duration, woken <-chan struct{}) (woke bool, err error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case <-t.C:
		return false, nil
	case <-woken:
		return true, nil
	}
}

// add starts holding h: its deadline timer, and the renewer if it is not
// running.
func (s *leaseState) add(h *leaseHold) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holds == nil {
		s.holds = map[leaseKey]*leaseHold{}
		s.kick = make(chan struct{}, 1)
	}
	if old := s.holds[h.key()]; old != nil && old.lost == nil {
		// Its lease expired on the database before this one could be
		// taken: its own deadline has passed too.
		s.lose(old, errors.New("pgadvisory: the lease was taken again by this Locker after it expired"))
	}
	s.holds[h.key()] = h
	h.timer = time.AfterFunc(time.Until(h.deadline)-h.margin(), func() { s.expire(h) })
	if !s.running {
		s.running = true
		go s.renewer()
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// remove stops holding h and returns why it was lost (nil: it was not).
func (s *leaseState) remove(h *leaseHold) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holds[h.key()] == h {
		delete(s.holds, h.key())
	}
	h.timer.Stop()
	select { // the renewer recounts what it renews, and ends when nothing is left
	case s.kick <- struct{}{}:
	default:
	}
	return h.lost
}

// expire is h's deadline timer: h is lost unless a renewal moved its
// deadline meanwhile.
func (s *leaseState) expire(h *leaseHold) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h.lost != nil {
		return
	}
	if left := time.Until(h.deadline) - h.margin(); left > 0 {
		h.timer.Reset(left)
		return
	}
	s.lose(h, fmt.Errorf("pgadvisory: the lease was not renewed within its ttl (%v) of the last successful renewal sent", h.ttl))
}

// lose marks h lost and cancels its fn's context; s.mu is held.
func (s *leaseState) lose(h *leaseHold, why error) {
	h.lost = why
	h.timer.Stop()
	h.cancel(&Error{Op: OpWatch, LockIDs: h.c.ids, Name: h.c.name, Kind: ErrLockLost, Err: why})
}

// renewer renews the leases of s while there are any: when the first one
// is due, all of them, one statement per ttl.
func (s *leaseState) renewer() {
	for {
		s.mu.Lock()
		if len(s.holds) == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		var due time.Time
		for _, h := range s.holds {
			if h.lost == nil && (due.IsZero() || h.next.Before(due)) {
				due = h.next
			}
		}
		s.mu.Unlock()
		if due.IsZero() { // every lease lost: wait for their calls to end
			<-s.kick
			continue
		}
		t := time.NewTimer(time.Until(due))
		select {
		case <-t.C:
			s.renew()
		case <-s.kick:
			t.Stop()
		}
	}
}

// renew sends one renewal per pool and ttl for the leases held now.
func (s *leaseState) renew() {
	type group struct {
		pool any
		ttl  time.Duration
	}
	s.mu.Lock()
	groups := map[group][]*leaseHold{}
	for _, h := range s.holds {
		if h.lost == nil {
			g := group{h.pool, h.ttl}
			groups[g] = append(groups[g], h)
		}
	}
	secret := s.secret
	s.mu.Unlock()
	for g, hs := range groups {
		s.renewGroup(g.pool, secret, g.ttl, hs)
	}
}

// renewGroup renews hs, leases of one pool and ttl, in one statement.
func (s *leaseState) renewGroup(pool any, secret string, ttl time.Duration, hs []*leaseHold) {
	ids := make([]string, len(hs))
	var first time.Time
	for i, h := range hs {
		ids[i] = strconv.FormatInt(h.id, 10)
		if d := h.deadline.Add(-h.margin()); first.IsZero() || d.Before(first) {
			first = d
		}
	}
	if time.Until(first) <= 0 {
		return // their timers end them
	}
	ctx, cancel := context.WithDeadline(context.Background(), first)
	defer cancel()
	sent := time.Now()
	var held string
	err := leaseQuery(ctx, pool, leaseRenewSQL, []any{"{" + strings.Join(ids, ",") + "}", secret, intervalText(ttl)}, &held)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		// Retry soon; the deadline timers end the leases if no retry
		// succeeds in time.
		for _, h := range hs {
			h.next = time.Now().Add(ttl / 10)
		}
		return
	}
	still := map[int64]bool{}
	for _, f := range strings.Split(strings.Trim(held, "{}"), ",") {
		if id, perr := strconv.ParseInt(f, 10, 64); perr == nil {
			still[id] = true
		}
	}
	for _, h := range hs {
		if s.holds[h.key()] != h || h.lost != nil {
			continue
		}
		if !still[h.id] {
			s.lose(h, errors.New("pgadvisory: the lease's renewal found it gone, expired or its term superseded"))
			continue
		}
		h.deadline = sent.Add(ttl)
		h.next = sent.Add(ttl / 3)
		h.timer.Reset(time.Until(h.deadline) - h.margin())
	}
}
