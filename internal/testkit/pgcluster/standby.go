package pgcluster

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// standbyReadyTimeout bounds the wait for a started standby to answer
// queries in recovery.
const standbyReadyTimeout = 60 * time.Second

// StartStandby creates a streaming hot standby of c (pg_basebackup -R),
// starts it on its own port and returns once it accepts connections and
// pg_is_in_recovery() is true. It is stopped and deleted when t ends.
func (c *Cluster) StartStandby(t testing.TB) *Cluster {
	t.Helper()
	s, err := c.createStandby(t.Logf)
	if err != nil {
		fail(t, err)
	}
	t.Cleanup(func() { s.cleanup(t) })
	return s
}

func (c *Cluster) createStandby(logf func(string, ...any)) (_ *Cluster, err error) {
	began := time.Now()
	if _, err := findPostgres("pg_basebackup"); err != nil {
		return nil, err
	}
	s := &Cluster{bin: c.bin, run: c.run, settings: c.settings, primary: c}
	if err := s.makeRoot(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = s.reaper.release()
		}
	}()

	// -R writes standby.signal and primary_conninfo; -c fast avoids waiting
	// for a spread checkpoint; -N skips fsync; no manifest is needed. The
	// copied postgresql.conf includes pgcluster.conf, which startServer
	// rewrites with the standby's own port and socket directory.
	source := fmt.Sprintf("host=%s port=%d user=%s", host, c.port, Superuser)
	err = s.run.run(s.root, filepath.Join(s.bin, "pg_basebackup"), "-D", s.DataDir(), "-R",
		"-X", "stream", "-c", "fast", "-N", "--no-manifest", "-d", source)
	if err != nil {
		return nil, err
	}
	copied := time.Now()
	if err := s.startServer(); err != nil {
		return nil, err
	}
	if err := waitForQuery(s.URL(), "SELECT pg_is_in_recovery()", standbyReadyTimeout, nil); err != nil {
		return nil, fmt.Errorf("%w\nstandby log %s:\n%s", err, s.LogFile(), tail(s.LogFile(), 30))
	}
	logf("pgcluster: standby of port %d ready on port %d in %v (pg_basebackup %v, start %v)", c.port, s.port,
		time.Since(began).Round(time.Millisecond), copied.Sub(began).Round(time.Millisecond),
		time.Since(copied).Round(time.Millisecond))
	return s, nil
}

// Primary returns the cluster c is a standby of, or nil.
func (c *Cluster) Primary() *Cluster { return c.primary }
