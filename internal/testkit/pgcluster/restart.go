package pgcluster

import (
	"testing"
)

// Crash stops the server abruptly, as a power cut or a killed postmaster
// would (pg_ctl stop -m immediate): no shutdown checkpoint, and whatever
// WAL was only in the server's shared memory, such as the commit records of
// transactions with synchronous_commit = off that the WAL writer has not
// written yet, is lost. WAL the server wrote to its files survives (the
// operating system keeps running, so fsync = off does not matter here).
// Connections to the cluster break. [Cluster.Restart] starts it again.
func (c *Cluster) Crash(t testing.TB) {
	t.Helper()
	if err := c.run.run(c.root, c.pgCtl(), "stop", "-D", c.DataDir(), "-m", "immediate", "-w", "-t", "60"); err != nil {
		t.Fatalf("pgcluster: crashing the server on port %d: %v", c.port, err)
	}
}

// Restart starts a stopped or crashed server again; it runs crash recovery
// first if needed. The server may come back on another port: take URLs from
// the cluster again afterwards.
func (c *Cluster) Restart(t testing.TB) {
	t.Helper()
	if err := c.startServer(); err != nil {
		t.Fatalf("pgcluster: restarting: %v", err)
	}
}
