package pgadvisory

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// heldKeysSQL is a shared connection's check: its backend pid and the
// advisory keys it holds, granted, in the current database, each as 'x'
// (exclusive) or 's' (shared) and the key, separated by commas. One query
// checks every lock on the connection.
const heldKeysSQL = `SELECT pg_backend_pid(), COALESCE((SELECT string_agg(CASE WHEN l.mode = 'ShareLock' THEN 's' ELSE 'x' END
    || ((l.classid::bigint << 32) | l.objid::bigint)::text, ',')
  FROM pg_catalog.pg_locks AS l
  WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted AND l.pid = pg_backend_pid()
    AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())), '')`

// heldKey is an advisory key in a mode.
type heldKey struct {
	id     int64
	shared bool
}

// watch arms the connection's watcher: a timer whose function checks the
// connection, one interval after the previous check ended, until it is
// given back or lost. The interval and the check timeout are the smallest
// among the connection's current locks (WithCheckInterval,
// WithCheckTimeout); a lock that wants a shorter interval re-arms the
// timer (tryLocked). A timer, not a goroutine per connection: opening and
// giving back a connection then costs no goroutine hand-off.
func (sc *sharedConn) watch() {
	interval, _ := sc.timings()
	sc.p.mu.Lock()
	defer sc.p.mu.Unlock()
	sc.armed = interval
	sc.timer = time.AfterFunc(interval, sc.tick)
}

// tick runs one check and re-arms the timer unless the connection is done.
func (sc *sharedConn) tick() {
	if !sc.check() {
		return
	}
	interval, _ := sc.timings()
	sc.p.mu.Lock()
	defer sc.p.mu.Unlock()
	if !sc.dead {
		sc.armed = interval
		sc.timer.Reset(interval)
	}
}

// timings is the check interval and timeout: the smallest among the
// connection's locks, or the defaults without locks.
func (sc *sharedConn) timings() (interval, timeout time.Duration) {
	sc.p.mu.Lock()
	defer sc.p.mu.Unlock()
	interval, timeout = defaultCheckInterval, defaultCheckTimeout
	first := true
	for l := range sc.locks {
		if first || l.c.interval < interval {
			interval = l.c.interval
		}
		if first || l.c.checkTimeout < timeout {
			timeout = l.c.checkTimeout
		}
		first = false
	}
	return interval, timeout
}

// check runs one check of every lock on the connection and reports
// whether the connection is still in use: on a failure, the connection is
// closed and every lock's work canceled (fail).
func (sc *sharedConn) check() bool {
	select {
	case sc.sem <- struct{}{}:
	case <-sc.stop:
		return false
	}
	defer sc.releaseSem()
	_, timeout := sc.timings()
	sc.p.mu.Lock()
	if sc.dead {
		sc.p.mu.Unlock()
		return false
	}
	want := make(map[heldKey]struct{}, len(sc.locks))
	for l := range sc.locks {
		for _, id := range l.c.ids {
			want[heldKey{id, l.c.shared}] = struct{}{}
		}
	}
	sc.p.mu.Unlock()
	if len(want) == 0 {
		return true
	}
	var pid int32
	var held string
	if err := sc.run(bgCtx, timeout, heldKeysSQL, nil, &pid, &held); err != nil {
		sc.fail(err) // a check that fails is a loss, as a dedicated connection's
		return false
	}
	total := len(want)
	for _, k := range parseHeldKeys(held) {
		delete(want, k)
	}
	moved := ""
	if pid != sc.pid {
		moved = fmt.Sprintf(" (the check was answered by backend pid %d, the locks were taken on pid %d)", pid, sc.pid)
	}
	if len(want) > 0 {
		missing := make([]string, 0, len(want))
		for k := range want {
			missing = append(missing, strconv.FormatInt(k.id, 10))
		}
		slices.Sort(missing)
		sc.fail(fmt.Errorf("backend holds %d of %d locks%s; missing: %s", total-len(want), total, moved, strings.Join(missing, ", ")))
		return false
	}
	if moved != "" {
		sc.fail(fmt.Errorf("the connection's backend changed%s", moved))
		return false
	}
	return true
}

// parseHeldKeys reads heldKeysSQL's list.
func parseHeldKeys(s string) []heldKey {
	if s == "" {
		return nil
	}
	parts := strings.Split(s, ",")
	keys := make([]heldKey, 0, len(parts))
	for _, p := range parts {
		if len(p) < 2 {
			continue
		}
		id, err := strconv.ParseInt(p[1:], 10, 64)
		if err != nil {
			continue
		}
		keys = append(keys, heldKey{id: id, shared: p[0] == 's'})
	}
	return keys
}
