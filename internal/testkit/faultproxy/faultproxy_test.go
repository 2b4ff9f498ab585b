package faultproxy_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/faultproxy"
)

// echoServer echoes every connection and records what it received and
// whether each connection ended with EOF (orderly) or an error.
type echoServer struct {
	ln net.Listener
	wg sync.WaitGroup

	mu       sync.Mutex
	received bytes.Buffer
	ends     []error // one per finished connection: nil for EOF
}

func newEchoServer(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &echoServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go s.serve(c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		s.wg.Wait()
	})
	return s
}

func (s *echoServer) serve(c net.Conn) {
	defer s.wg.Done()
	defer c.Close()
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			s.mu.Lock()
			s.received.Write(buf[:n])
			s.mu.Unlock()
			if _, werr := c.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			s.mu.Lock()
			s.ends = append(s.ends, err)
			s.mu.Unlock()
			return
		}
	}
}

func (s *echoServer) got() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.received.String()
}

func (s *echoServer) endings() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]error(nil), s.ends...)
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// roundTrip writes msg and reads len(msg) bytes back.
func roundTrip(c net.Conn, msg string) (string, error) {
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	buf := make([]byte, len(msg))
	_, err := io.ReadFull(c, buf)
	return string(buf), err
}

// query is a PostgreSQL simple-protocol Query message.
func query(sql string) []byte {
	b := []byte{'Q', 0, 0, 0, 0}
	b = append(b, sql...)
	b = append(b, 0)
	binary.BigEndian.PutUint32(b[1:5], uint32(len(b)-1))
	return b
}

func TestProxyForwards(t *testing.T) {
	srv := newEchoServer(t)
	px := faultproxy.New(t, srv.ln.Addr().String())
	c := dial(t, px.Addr())
	got, err := roundTrip(c, "hello")
	require.NoError(t, err)
	require.Equal(t, "hello", got)
	require.Equal(t, 1, px.Conns())
	require.Equal(t, "hello", srv.got())
}

func TestProxyCutAll(t *testing.T) {
	srv := newEchoServer(t)
	px := faultproxy.New(t, srv.ln.Addr().String())
	c := dial(t, px.Addr())
	_, err := roundTrip(c, "before") // control: the link works
	require.NoError(t, err)

	px.CutAll()
	_, err = roundTrip(c, "after")
	require.Error(t, err)
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "a cut must be an error at once, not a timeout: %v", err)
	require.Eventually(t, func() bool { return px.Conns() == 0 }, 10*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool {
		e := srv.endings()
		return len(e) == 1 && e[0] != nil // the server saw a reset, not an orderly EOF
	}, 10*time.Second, 5*time.Millisecond, "%v", srv.endings())

	// New connections are proxied normally.
	c2 := dial(t, px.Addr())
	got, err := roundTrip(c2, "again")
	require.NoError(t, err)
	require.Equal(t, "again", got)
}

func TestProxyBlackhole(t *testing.T) {
	srv := newEchoServer(t)
	px := faultproxy.New(t, srv.ln.Addr().String())
	c := dial(t, px.Addr())
	_, err := roundTrip(c, "a") // control: the link works
	require.NoError(t, err)

	px.Blackhole(true)
	_, err = c.Write([]byte("b"))
	require.NoError(t, err)
	// Nothing comes back and nothing is closed: a read only times out.
	require.NoError(t, c.SetReadDeadline(time.Now().Add(100*time.Millisecond)))
	_, err = c.Read(make([]byte, 1))
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "want a timeout on a half-open link, got %v", err)
	require.Equal(t, "a", srv.got(), "the held byte must not reach the server")
	require.Equal(t, 1, px.Conns())

	px.Blackhole(true) // idempotent
	px.Blackhole(false)
	px.Blackhole(false)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(30*time.Second)))
	buf := make([]byte, 1)
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err)
	require.Equal(t, "b", string(buf), "held bytes are delivered when the blackhole ends")
	require.Equal(t, "ab", srv.got())
}

func TestProxyForwardThenCutClient(t *testing.T) {
	srv := newEchoServer(t)
	px := faultproxy.New(t, srv.ln.Addr().String())
	px.OnClientWrite(func(p []byte) faultproxy.Action {
		if faultproxy.HasQuery(p, "commit") {
			return faultproxy.ForwardThenCutClient
		}
		return faultproxy.Forward
	})
	c := dial(t, px.Addr())
	other := string(query("select 1"))
	got, err := roundTrip(c, other) // control: other messages pass both ways
	require.NoError(t, err)
	require.Equal(t, other, got)

	commit := string(query("commit"))
	_, err = roundTrip(c, commit)
	require.Error(t, err, "the client must not read the answer")
	require.Eventually(t, func() bool { return srv.got() == other+commit }, 10*time.Second, 5*time.Millisecond,
		"the server must have received the message")
	require.Eventually(t, func() bool {
		e := srv.endings()
		return len(e) == 1 && e[0] == nil // orderly EOF after the message: the server had the chance to act on it
	}, 10*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool { return px.Conns() == 0 }, 10*time.Second, 5*time.Millisecond)

	px.OnClientWrite(nil)
	c2 := dial(t, px.Addr())
	got, err = roundTrip(c2, commit)
	require.NoError(t, err, "without the hook the message is forwarded normally")
	require.Equal(t, commit, got)
}

// TestProxyOnClientWriteEach: each connection gets a hook of its own, so a
// hook can act on what its connection sent before: here a COMMIT is cut only
// on the connection that sent "mark" first.
func TestProxyOnClientWriteEach(t *testing.T) {
	srv := newEchoServer(t)
	px := faultproxy.New(t, srv.ln.Addr().String())
	px.OnClientWriteEach(func() func([]byte) faultproxy.Action {
		marked := false
		return func(p []byte) faultproxy.Action {
			switch {
			case faultproxy.HasQuery(p, "mark"):
				marked = true
			case marked && faultproxy.HasQuery(p, "commit"):
				return faultproxy.ForwardThenCutClient
			}
			return faultproxy.Forward
		}
	})
	plain, marking := dial(t, px.Addr()), dial(t, px.Addr())
	mark, commit := string(query("mark")), string(query("commit"))
	got, err := roundTrip(marking, mark)
	require.NoError(t, err)
	require.Equal(t, mark, got)
	got, err = roundTrip(plain, commit)
	require.NoError(t, err, "control: the connection that sent no mark keeps its COMMIT")
	require.Equal(t, commit, got)
	_, err = roundTrip(marking, commit)
	require.Error(t, err, "the marked connection's COMMIT is cut")

	px.OnClientWriteEach(nil)
	got, err = roundTrip(plain, commit)
	require.NoError(t, err, "without the hook the message is forwarded normally")
	require.Equal(t, commit, got)
}

func TestHasQuery(t *testing.T) {
	parse := append([]byte{'P', 0, 0, 0, 12}, "\x00commit\x00\x00\x00"...)
	binary.BigEndian.PutUint32(parse[1:5], uint32(len(parse)-1))
	for _, tc := range []struct {
		name string
		p    []byte
		want bool
	}{
		{"commit", query("commit"), true},
		{"upper case and spaces", query(" COMMIT "), true},
		{"other text", query("rollback"), false},
		{"prefix only", query("commit_later"), false},
		{"second message", append(query("select 1"), query("commit")...), true},
		{"extended protocol Parse", parse, false},
		{"truncated", query("commit")[:6], false},
		{"empty", nil, false},
		{"bad length", []byte{'Q', 0, 0, 0, 1, 'x'}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, faultproxy.HasQuery(tc.p, "commit"))
		})
	}
}

// TestProxyCloseNoLeak shows that closing the proxy at the end of a test ends
// every goroutine it started, including those holding data in a blackhole.
func TestProxyCloseNoLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Run("inner", func(t *testing.T) {
		srv := newEchoServer(t)
		px := faultproxy.New(t, srv.ln.Addr().String())
		for range 3 {
			c := dial(t, px.Addr())
			_, err := roundTrip(c, "x")
			require.NoError(t, err)
		}
		// Control: while open, the proxy runs goroutines (accept + 2 per link).
		require.GreaterOrEqual(t, runtime.NumGoroutine(), before+7)
		px.Blackhole(true)
		c := dial(t, px.Addr())
		_, err := c.Write([]byte("held"))
		require.NoError(t, err)
	})
	// Polled by hand: require.Eventually runs its condition on a goroutine of
	// its own, which would be counted.
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	require.LessOrEqual(t, runtime.NumGoroutine(), before, "goroutines left behind by the proxy")
}

// TestProxyTargetDown shows that a client of a proxy whose target refuses
// connections is closed rather than left hanging.
func TestProxyTargetDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	px := faultproxy.New(t, addr)
	c := dial(t, px.Addr())
	require.NoError(t, c.SetReadDeadline(time.Now().Add(30*time.Second)))
	_, err = c.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)
	require.False(t, errors.Is(err, os.ErrDeadlineExceeded))
}

// TestProxyHoldClient: once the server hook holds the client, neither
// that answer nor the server's end reaches it: the client's reads time out
// where, without the hook (the control), it reads the answer and EOF.
func TestProxyHoldClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() { // answers "bye" to anything, then closes
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 16)
			_, _ = c.Read(buf)
			_, _ = c.Write([]byte("bye"))
			_ = c.Close()
		}
	}()
	for _, hold := range []bool{false, true} {
		px := faultproxy.New(t, ln.Addr().String())
		if hold {
			px.OnServerWrite(func(p []byte) faultproxy.Action {
				if bytes.Contains(p, []byte("bye")) {
					return faultproxy.HoldClient
				}
				return faultproxy.Forward
			})
		}
		c := dial(t, px.Addr())
		_, err := c.Write([]byte("hi"))
		require.NoError(t, err)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(500*time.Millisecond)))
		got, err := io.ReadAll(c)
		if !hold {
			require.NoError(t, err, "the control reads the answer, then EOF")
			require.Equal(t, "bye", string(got))
			continue
		}
		var ne net.Error
		require.ErrorAs(t, err, &ne, "held: the read times out")
		require.True(t, ne.Timeout())
		require.Empty(t, got)
		require.Equal(t, 1, px.Conns(), "the held client's link stays open")
		require.NoError(t, c.Close())
		require.Eventually(t, func() bool { return px.Conns() == 0 }, 5*time.Second, 10*time.Millisecond,
			"the link ends once the held client leaves")
	}
}

func TestHasError(t *testing.T) {
	msg := func(typ byte, body string) []byte {
		b := append([]byte{typ, 0, 0, 0, 0}, body...)
		binary.BigEndian.PutUint32(b[1:5], uint32(len(b)-1))
		return b
	}
	fatal := msg('E', "SFATAL\x00C57P01\x00Mterminating connection due to administrator command\x00\x00")
	require.True(t, faultproxy.HasError(fatal, "57P01"))
	require.True(t, faultproxy.HasError(append(msg('N', "SNOTICE\x00C00000\x00\x00"), fatal...), "57P01"), "after another message")
	require.False(t, faultproxy.HasError(fatal, "55P03"), "another SQLSTATE")
	require.False(t, faultproxy.HasError(msg('N', "SNOTICE\x00C57P01\x00\x00"), "57P01"), "a notice is no error")
	require.False(t, faultproxy.HasError(fatal[:8], "57P01"), "truncated")
}
