package pgtest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections from its own loopback address to a
// target, and can fail them the two ways a network does: [Proxy.Cut]
// closes every connection at once (a reset), [Proxy.Blackhole] stops
// moving bytes while keeping connections open (a partition: the client
// only notices by timing out). Closed in t.Cleanup.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns map[net.Conn]struct{} // guarded by mu: both ends of every pair
	hole  bool                  // guarded by mu
	open  chan struct{}         // guarded by mu: closed when the hole is lifted
	cuts  int                   // guarded by mu
}

// NewProxy listens on a free loopback port and forwards to target
// (host:port).
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pgtest: proxy: %v", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, open: make(chan struct{})}
	close(p.open)
	go p.serve()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.pair(c)
	}
}

func (p *Proxy) pair(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()
	go p.pipe(up, c)
	p.pipe(c, up)
}

// pipe copies src to dst, holding bytes back while the proxy is a black
// hole; when either side fails it closes both.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.drop(dst, src)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			open := p.open
			p.mu.Unlock()
			<-open // a black hole: wait until lifted (or Cut closes dst)
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			return
		}
	}
}

func (p *Proxy) drop(a, b net.Conn) {
	a.Close()
	b.Close()
	p.mu.Lock()
	delete(p.conns, a)
	delete(p.conns, b)
	p.mu.Unlock()
}

// Cut closes every connection through the proxy; new ones are accepted
// as before.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	p.cuts++
	// Writers held by a black hole must not write the stale bytes to a
	// new connection: their dst is closed, so Write fails.
}

// Blackhole starts (on) or stops holding back every byte in both
// directions, on open and new connections alike.
func (p *Proxy) Blackhole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on == p.hole {
		return
	}
	p.hole = on
	if on {
		p.open = make(chan struct{})
	} else {
		close(p.open)
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.ln.Close()
	p.Blackhole(false)
	p.Cut()
}
