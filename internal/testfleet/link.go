package testfleet

import (
	"errors"
	"io"
	"net"
	"sync"
)

// Link is a TCP relay on 127.0.0.1 between one client (a node, a relay)
// and one server (the hub, a GitLab). Every connection the client makes
// goes through it, so the harness can cut a session abruptly (both sides
// see a reset, nobody sends a close frame), keep a peer unreachable, and
// point the client at a restarted server on a new port without the
// client's configuration changing. TLS stays end to end: the link copies
// bytes.
//
//	up ──Cut──▶ up (all current connections dropped)
//	up ──Block──▶ blocked (connections dropped, new ones dropped on accept) ──Heal──▶ up
type Link struct {
	ln net.Listener

	mu      sync.Mutex
	target  string                // guarded by mu
	blocked bool                  // guarded by mu
	conns   map[net.Conn]net.Conn // client side → server side; guarded by mu
	closed  bool                  // guarded by mu
	wg      sync.WaitGroup
}

// NewLink listens on 127.0.0.1:0 and forwards to target (host:port).
func NewLink(target string) (*Link, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &Link{ln: ln, target: target, conns: map[net.Conn]net.Conn{}}
	l.wg.Add(1)
	go l.serve()
	return l, nil
}

// Addr is the address clients dial (127.0.0.1:port); it never changes.
func (l *Link) Addr() string { return l.ln.Addr().String() }

// SetTarget points new connections at target.
func (l *Link) SetTarget(target string) {
	l.mu.Lock()
	l.target = target
	l.mu.Unlock()
}

// Cut drops every current connection at once (a reset on both sides).
// New connections are accepted as before.
func (l *Link) Cut() {
	l.mu.Lock()
	l.cutLocked()
	l.mu.Unlock()
}

func (l *Link) cutLocked() {
	for c, s := range l.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0) // RST, not FIN: like a crashed peer or a dead path
		}
		c.Close()
		if s != nil {
			if ts, ok := s.(*net.TCPConn); ok {
				ts.SetLinger(0)
			}
			s.Close()
		}
		delete(l.conns, c)
	}
}

// Block cuts every connection and drops new ones as they arrive, until
// [Link.Heal]: the peer is unreachable.
func (l *Link) Block() {
	l.mu.Lock()
	l.blocked = true
	l.cutLocked()
	l.mu.Unlock()
}

// Heal ends a [Link.Block].
func (l *Link) Heal() {
	l.mu.Lock()
	l.blocked = false
	l.mu.Unlock()
}

// Blocked reports whether the link is blocked.
func (l *Link) Blocked() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.blocked
}

// Close stops listening and drops every connection. Safe to call twice.
func (l *Link) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.cutLocked()
	l.mu.Unlock()
	err := l.ln.Close()
	l.wg.Wait()
	return err
}

func (l *Link) serve() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		l.mu.Lock()
		if l.blocked || l.closed {
			l.mu.Unlock()
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetLinger(0)
			}
			c.Close()
			continue
		}
		target := l.target
		l.conns[c] = nil
		l.mu.Unlock()
		l.wg.Add(1)
		go l.pipe(c, target)
	}
}

func (l *Link) pipe(c net.Conn, target string) {
	defer l.wg.Done()
	s, err := net.Dial("tcp", target)
	l.mu.Lock()
	if _, live := l.conns[c]; !live || err != nil {
		// Cut while dialing, or the server is down: the client sees a
		// closed connection, as it would from a dead server.
		l.mu.Unlock()
		c.Close()
		if s != nil {
			s.Close()
		}
		return
	}
	l.conns[c] = s
	l.mu.Unlock()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(s, c)
	go cp(c, s)
	<-done
	<-done
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
	c.Close()
	s.Close()
}
