// Package wirecount counts client/server round trips on a network
// connection, for tests that pin down how many round trips an operation costs.
//
// A round trip starts when the client writes after having read something
// from the server since its previous write (the first write on a connection
// also starts one). Writes that follow each other without a read in between
// are one burst, so a pipelined batch counts once, however the driver splits
// it into Write calls. Reads never start a round trip. Counts are exact: no
// sampling and no timing is involved.
//
// Wrap a driver's dial function with [Counter.Dial] (pgx: ConnConfig.DialFunc)
// and compare [Counter.RoundTrips] before and after an operation.
// [Counter.Gate] holds the connection's next round trips back, to count what
// happened before a call returned when part of the work continues in the
// background.
package wirecount

import (
	"context"
	"net"
	"sync"
)

// Counter counts round trips over every connection it wraps.
type Counter struct {
	mu      sync.Mutex
	changed *sync.Cond // signalled when trips, gate or waiting change
	trips   int64
	writes  int64
	reads   int64
	conns   int64
	limit   int64 // with gated: round trips allowed to start
	gated   bool
	waiting int // writers held back by the gate
}

// New returns a Counter with no connections.
func New() *Counter {
	c := &Counter{}
	c.changed = sync.NewCond(&c.mu)
	return c
}

// DialFunc is the shape of a driver's dial hook, such as pgx's
// pgconn.DialFunc.
type DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// Dial returns a dial function that dials with dial (a plain net.Dialer when
// nil) and counts the resulting connection's round trips on c.
func (c *Counter) Dial(dial DialFunc) DialFunc {
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return c.Wrap(nc), nil
	}
}

// Wrap returns nc with its round trips counted on c.
func (c *Counter) Wrap(nc net.Conn) net.Conn {
	c.mu.Lock()
	c.conns++
	c.mu.Unlock()
	return &conn{Conn: nc, c: c, readSinceWrite: true}
}

// RoundTrips is the number of round trips started so far on all connections.
func (c *Counter) RoundTrips() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.trips
}

// Conns is the number of connections wrapped so far.
func (c *Counter) Conns() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conns
}

// Stats returns the round trips, Write calls and non-empty Read calls so far.
func (c *Counter) Stats() (trips, writes, reads int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.trips, c.writes, c.reads
}

// Gate lets n more round trips start and holds back any further one (its
// first Write blocks, before it is counted) until the returned release
// function is called. release is idempotent. Only one gate may be active.
func (c *Counter) Gate(n int64) (release func()) {
	c.mu.Lock()
	if c.gated {
		c.mu.Unlock()
		panic("wirecount: Gate called while a gate is active")
	}
	c.gated, c.limit = true, c.trips+n
	c.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			c.gated = false
			c.changed.Broadcast()
			c.mu.Unlock()
		})
	}
}

// Waiting is the number of round trips currently held back by the gate.
func (c *Counter) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waiting
}

// conn is a net.Conn whose round trips are counted on c.
type conn struct {
	net.Conn
	c *Counter
	// readSinceWrite is true when the server's data was read after the
	// client's last write: the next write starts a round trip. Guarded by c.mu.
	readSinceWrite bool
}

func (w *conn) Write(p []byte) (int, error) {
	c := w.c
	c.mu.Lock()
	if w.readSinceWrite {
		for c.gated && c.trips >= c.limit {
			c.waiting++
			c.changed.Broadcast()
			c.changed.Wait()
			c.waiting--
		}
		c.trips++
		w.readSinceWrite = false
		c.changed.Broadcast()
	}
	c.writes++
	c.mu.Unlock()
	return w.Conn.Write(p)
}

func (w *conn) Read(p []byte) (int, error) {
	n, err := w.Conn.Read(p)
	if n > 0 {
		w.c.mu.Lock()
		w.readSinceWrite = true
		w.c.reads++
		w.c.mu.Unlock()
	}
	return n, err
}
