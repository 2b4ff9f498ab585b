// Package faultproxy is an in-process TCP proxy for tests that need a
// connection to fail in a controlled way: cut abruptly, turned half-open
// (nothing moves but nothing closes), cut right after a chosen message
// reached the server and before the client reads the answer, or held open
// and silent once a chosen answer comes from the server, even after the
// server ended its side ([HoldClient]).
//
//	px := faultproxy.New(t, "127.0.0.1:5432")
//	// connect the client under test to px.Addr() instead of the server
//	px.OnClientWrite(func(p []byte) faultproxy.Action {
//		if faultproxy.HasQuery(p, "commit") {
//			return faultproxy.ForwardThenCutClient
//		}
//		return faultproxy.Forward
//	})
//
// [ToTestDB] starts one in front of the package database's server, and
// [Proxy.Route] points a pgx configuration at it.
//
// The proxy is closed, every connection cut and every goroutine it started
// ended, when the test ends.
package faultproxy

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// Action tells the proxy what to do with bytes a client wrote; see
// [Proxy.OnClientWrite].
type Action int

const (
	// Forward passes the bytes on to the server.
	Forward Action = iota
	// ForwardThenCutClient passes the bytes on to the server and then resets
	// the client's connection. Nothing the server sends afterwards reaches the
	// client; the server side is half-closed (it reads the bytes, then EOF), so
	// the server acts on them although the client never sees the answer.
	ForwardThenCutClient
	// HoldClient, returned by a hook of [Proxy.OnServerWrite], passes
	// neither these bytes nor anything the server sends afterwards to the
	// client, and keeps the client's connection open and silent, even once
	// the server has ended its side, until the client leaves or the proxy
	// closes: a path that holds a client whose server session died instead
	// of passing the loss on.
	HoldClient
)

// Proxy forwards TCP connections from a local listener to a target address
// and injects faults on demand. Its methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	ctx    context.Context // canceled by close; bounds dials to the target
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	links  map[*link]struct{}
	gate   chan struct{} // closed while forwarding is on; open during a blackhole
	hook   func([]byte) Action
	each   func() func([]byte) Action // OnClientWriteEach's
	hooks  int                        // counts installs of hook or each
	shook  func([]byte) Action        // OnServerWrite's
	closed bool
}

// New starts a proxy on 127.0.0.1 (a free port) forwarding to target
// ("host:port"). It fails t if it cannot listen, and closes the proxy when t
// ends.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("faultproxy: listen: %v", err)
	}
	gate := make(chan struct{})
	close(gate)
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{target: target, ln: ln, ctx: ctx, cancel: cancel, links: map[*link]struct{}{}, gate: gate}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr returns the proxy's listening address, "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Conns returns the number of proxied connections currently open.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// CutAll resets every open connection, client and server side, at once (TCP
// RST, no orderly close). Connections accepted later are proxied normally.
func (p *Proxy) CutAll() {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		p.drop(l, true)
	}
}

// Blackhole stops (on) or resumes (off) forwarding in both directions on
// every connection, without closing anything: each side sees a healthy but
// silent peer, as with a half-open connection or a network partition. Bytes
// read after Blackhole(true) returns are held and delivered in order when it
// is turned off, as TCP retransmission would.
func (p *Proxy) Blackhole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate: // forwarding is on
		if on {
			p.gate = make(chan struct{})
		}
	default:
		if !on {
			close(p.gate)
		}
	}
}

// OnClientWrite installs hook (nil removes it). The proxy calls it with
// every chunk of bytes read from a client, before forwarding it, on the
// connection's own goroutine; hooks for different connections may run
// concurrently. p is only valid during the call. A chunk is what one read
// returned: usually one write of the client, possibly several or part of one.
func (p *Proxy) OnClientWrite(hook func(p []byte) Action) {
	p.mu.Lock()
	p.hook, p.each = hook, nil
	p.hooks++
	p.mu.Unlock()
}

// OnClientWriteEach installs a hook per connection (nil removes it), in place
// of [Proxy.OnClientWrite]'s: newHook is called once for each connection, at
// its first chunk after the install, and the hook it returns sees only that
// connection's chunks, as OnClientWrite's hook sees all of them. A hook can
// so keep what its connection sent before, such as a statement that marks
// its transaction.
func (p *Proxy) OnClientWriteEach(newHook func() func(p []byte) Action) {
	p.mu.Lock()
	p.hook, p.each = nil, newHook
	p.hooks++
	p.mu.Unlock()
}

// OnServerWrite installs hook (nil removes it), called as [Proxy.OnClientWrite]'s
// is, with the bytes read from a server before they are passed to the
// client. Forward passes them on; HoldClient holds the client (see
// [HoldClient]).
func (p *Proxy) OnServerWrite(hook func(p []byte) Action) {
	p.mu.Lock()
	p.shook = hook
	p.mu.Unlock()
}

// HasError reports whether p holds a complete PostgreSQL ErrorResponse
// message ('E') whose SQLSTATE (its 'C' field) is code, such as "57P01"
// (terminating connection due to administrator command).
func HasError(p []byte, code string) bool {
	for len(p) >= 5 {
		n := int(binary.BigEndian.Uint32(p[1:5]))
		if n < 4 || 1+n > len(p) {
			return false
		}
		if p[0] == 'E' {
			for _, f := range strings.Split(string(p[5:1+n]), "\x00") {
				if f == "C"+code {
					return true
				}
			}
		}
		p = p[1+n:]
	}
	return false
}

// HasQuery reports whether p holds a complete PostgreSQL simple-protocol
// Query message ('Q') whose text is sql, ignoring case and surrounding white
// space. pgx sends COMMIT and ROLLBACK this way, as "commit" and "rollback".
func HasQuery(p []byte, sql string) bool {
	for len(p) >= 5 {
		n := int(binary.BigEndian.Uint32(p[1:5]))
		if n < 4 || 1+n > len(p) {
			return false
		}
		body := p[5 : 1+n]
		if p[0] == 'Q' && strings.EqualFold(strings.TrimSpace(strings.TrimSuffix(string(body), "\x00")), sql) {
			return true
		}
		p = p[1+n:]
	}
	return false
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		var d net.Dialer
		dctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
		s, err := d.DialContext(dctx, "tcp", p.target)
		cancel()
		if err != nil {
			_ = c.Close()
			continue
		}
		l := &link{client: c, server: s, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			_ = s.Close()
			return
		}
		p.links[l] = struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.up(l)
		go p.down(l)
	}
}

// up copies client -> server. When the client closes or is cut, the server
// side is half-closed so that the server still reads what was forwarded.
func (p *Proxy) up(l *link) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := l.client.Read(buf)
		if n > 0 {
			if !p.pass(l) {
				return
			}
			action := Forward
			if hook := p.currentHook(l); hook != nil {
				action = hook(buf[:n])
			}
			if action == ForwardThenCutClient {
				l.stopToClient()
			}
			if _, werr := l.server.Write(buf[:n]); werr != nil {
				p.drop(l, true)
				return
			}
			if action == ForwardThenCutClient {
				reset(l.client)
			}
		}
		if err != nil {
			if l.isHeld() {
				p.drop(l, true) // the server side is gone: nothing to half-close
				return
			}
			select {
			case <-l.done: // torn down: the server side is already closed
			default:
				if tc, ok := l.server.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
			}
			return
		}
	}
}

// down copies server -> client and ends the link when the server is done.
func (p *Proxy) down(l *link) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := l.server.Read(buf)
		if n > 0 {
			if !p.pass(l) {
				return
			}
			if hook := p.currentServerHook(); hook != nil && !l.isHeld() && hook(buf[:n]) == HoldClient {
				l.hold()
			}
			if !l.writeClient(buf[:n]) {
				p.drop(l, true)
				return
			}
		}
		if err != nil {
			if l.isHeld() {
				// Keep the client: the link ends when it leaves (up).
				_ = l.server.Close()
				return
			}
			p.drop(l, !errors.Is(err, io.EOF))
			return
		}
	}
}

// pass waits while the blackhole is on; false if the link ended meanwhile.
func (p *Proxy) pass(l *link) bool {
	p.mu.Lock()
	gate := p.gate
	p.mu.Unlock()
	select {
	case <-gate:
		return true
	case <-l.done:
		return false
	}
}

// currentHook is the hook for l's next chunk; it is called on l's up
// goroutine only, which alone touches l's own hook.
func (p *Proxy) currentHook(l *link) func([]byte) Action {
	p.mu.Lock()
	hook, each, hooks := p.hook, p.each, p.hooks
	p.mu.Unlock()
	if each == nil {
		return hook
	}
	if l.hooks != hooks || l.hook == nil {
		l.hook, l.hooks = each(), hooks
	}
	return l.hook
}

func (p *Proxy) currentServerHook() func([]byte) Action {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.shook
}

func (p *Proxy) drop(l *link, abrupt bool) {
	l.teardown(abrupt)
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

func (p *Proxy) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	_ = p.ln.Close()
	p.CutAll()
	p.wg.Wait()
	p.mu.Lock()
	clear(p.links)
	p.mu.Unlock()
}

// link is one proxied connection.
type link struct {
	client, server net.Conn
	done           chan struct{}
	once           sync.Once

	mu   sync.Mutex // serializes writes to client with stopToClient
	cut  bool       // nothing more goes to the client
	held bool       // HoldClient: and the client stays connected

	hook  func([]byte) Action // OnClientWriteEach's hook for this link (up's)
	hooks int                 // the install that made hook
}

// hold stops everything to the client and keeps it connected.
func (l *link) hold() {
	l.mu.Lock()
	l.cut, l.held = true, true
	l.mu.Unlock()
}

func (l *link) isHeld() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held
}

func (l *link) stopToClient() {
	l.mu.Lock()
	l.cut = true
	l.mu.Unlock()
}

// writeClient writes b to the client unless it was cut; false on failure.
func (l *link) writeClient(b []byte) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut {
		return true // swallowed: the client is gone on purpose
	}
	_, err := l.client.Write(b)
	return err == nil
}

// teardown closes both sides once; abrupt sends TCP RST instead of FIN.
func (l *link) teardown(abrupt bool) {
	l.once.Do(func() {
		close(l.done)
		if abrupt {
			// Server first: once the client side is closed, up would
			// half-close the server side, an orderly FIN before the RST.
			reset(l.server)
			reset(l.client)
			return
		}
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

// reset closes c with SO_LINGER 0, so the peer gets RST.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
