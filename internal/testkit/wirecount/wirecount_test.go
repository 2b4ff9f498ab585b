package wirecount_test

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/wirecount"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// fakeConn is a net.Conn whose server side always has one byte to read.
type fakeConn struct{ net.Conn }

func (fakeConn) Write(p []byte) (int, error) { return len(p), nil }
func (fakeConn) Read(p []byte) (int, error)  { p[0] = 'Z'; return 1, nil }

// emptyConn reads nothing: a read that returns no data is not a response.
type emptyConn struct{ fakeConn }

func (emptyConn) Read([]byte) (int, error) { return 0, io.EOF }

func TestRoundTripsCountWriteBurstsAfterReads(t *testing.T) {
	c := wirecount.New()
	nc := c.Wrap(fakeConn{})
	buf := make([]byte, 8)
	write := func() { _, err := nc.Write([]byte("x")); require.NoError(t, err) }
	read := func() { _, err := nc.Read(buf); require.NoError(t, err) }

	write() // the first write on a connection starts round trip 1
	write() // same burst (pipelined)
	require.EqualValues(t, 1, c.RoundTrips())
	read()
	read() // a response in several reads is still one response
	require.EqualValues(t, 1, c.RoundTrips())
	write() // a write after a read starts round trip 2
	require.EqualValues(t, 2, c.RoundTrips())
	read()
	write()
	read()
	write()
	trips, writes, reads := c.Stats()
	require.Equal(t, [3]int64{4, 5, 4}, [3]int64{trips, writes, reads})

	// A read that brings no data does not end the burst.
	e := c.Wrap(emptyConn{})
	_, err := e.Write([]byte("x"))
	require.NoError(t, err)
	_, _ = e.Read(buf)
	_, err = e.Write([]byte("x"))
	require.NoError(t, err)
	require.EqualValues(t, 5, c.RoundTrips(), "connections add up; the empty read joined two writes into one trip")
	require.EqualValues(t, 2, c.Conns())
}

func TestGateHoldsBackTheNextRoundTrip(t *testing.T) {
	c := wirecount.New()
	nc := c.Wrap(fakeConn{})
	buf := make([]byte, 1)
	release := c.Gate(1)
	defer release()

	_, err := nc.Write([]byte("a")) // round trip 1 is allowed
	require.NoError(t, err)
	_, err = nc.Write([]byte("b")) // same burst: not held back
	require.NoError(t, err)
	_, err = nc.Read(buf)
	require.NoError(t, err)

	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = nc.Write([]byte("c")) // round trip 2 waits for the gate
	}()
	require.Eventually(t, func() bool { return c.Waiting() == 1 }, 10*time.Second, time.Millisecond)
	require.EqualValues(t, 1, c.RoundTrips(), "a held-back round trip is not counted yet")
	select {
	case <-done:
		t.Fatal("the write passed a closed gate")
	default:
	}
	release()
	frontdoor.Await(t, done, "the released write")
	require.EqualValues(t, 2, c.RoundTrips())
	require.Zero(t, c.Waiting())
	release() // idempotent

	release = c.Gate(0) // a new gate after the first was released
	release()
}

func TestDialCountsTheDialedConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		s, err := ln.Accept()
		if err != nil {
			return
		}
		defer s.Close()
		buf := make([]byte, 2)
		for {
			if _, err := io.ReadFull(s, buf); err != nil {
				return
			}
			if _, err := s.Write([]byte("ok")); err != nil {
				return
			}
		}
	}()
	c := wirecount.New()
	nc, err := c.Dial(nil)(context.Background(), "tcp", ln.Addr().String())
	require.NoError(t, err)
	defer nc.Close()
	buf := make([]byte, 2)
	for range 3 {
		_, err = nc.Write([]byte("hi"))
		require.NoError(t, err)
		_, err = io.ReadFull(nc, buf)
		require.NoError(t, err)
	}
	require.EqualValues(t, 3, c.RoundTrips())
}
