// Package connlimit bounds what unauthenticated peers can make a server
// hold: a listener that caps its open connections and, per peer address,
// the connections not yet authenticated; a byte budget for request bodies
// read before their signature is checked; and the body read deadline.
//
// A connection counts as unauthenticated from accept until the handler
// serving it calls [Authenticated] with the request's context (after the
// signature verified, or once a session upgrade was authenticated). The
// TLS handshake, the header read and the body read of a request are all
// before that point, so an address that opens many connections and stalls
// them, sends headers a byte at a time or stalls a body holds at most
// MaxUnauthPerPeer of them; past the cap new connections from it are
// closed at accept. Authenticated connections (a relay's long polls, a
// node's session) no longer count against their address.
//
// Use: wrap the listener with [NewListener] and set the http.Server's
// ConnContext to [ConnContext].
package connlimit

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Limits are a listener's caps; a zero field means no cap.
type Limits struct {
	// MaxConns caps the listener's open connections.
	MaxConns int
	// MaxUnauthPerPeer caps, per peer IP address, the open connections
	// that have not been authenticated.
	MaxUnauthPerPeer int
}

// Listener is a net.Listener enforcing [Limits]. Create it with
// [NewListener].
type Listener struct {
	net.Listener
	lim Limits

	mu      sync.Mutex
	open    int
	unauth  map[string]int // by peer IP; entries at zero are deleted
	refused atomic.Int64
}

// NewListener wraps ln with lim.
func NewListener(ln net.Listener, lim Limits) *Listener {
	return &Listener{Listener: ln, lim: lim, unauth: map[string]int{}}
}

// Accept returns the next connection within the caps; connections past a
// cap are closed at once and not returned.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		peer := peerOf(c.RemoteAddr())
		l.mu.Lock()
		if (l.lim.MaxConns > 0 && l.open >= l.lim.MaxConns) || (l.lim.MaxUnauthPerPeer > 0 && l.unauth[peer] >= l.lim.MaxUnauthPerPeer) {
			l.mu.Unlock()
			l.refused.Add(1)
			c.Close()
			continue
		}
		l.open++
		l.unauth[peer]++
		l.mu.Unlock()
		return &Conn{Conn: c, l: l, peer: peer}, nil
	}
}

// Stats is a snapshot of a listener's counts.
type Stats struct {
	// Open is the number of open connections.
	Open int
	// Unauthenticated is the number of open connections not yet
	// authenticated, over all peers.
	Unauthenticated int
	// Refused counts connections closed at accept for a cap.
	Refused int64
}

// Stats returns the listener's current counts.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, v := range l.unauth {
		n += v
	}
	return Stats{Open: l.open, Unauthenticated: n, Refused: l.refused.Load()}
}

func (l *Listener) dropUnauth(peer string) {
	if l.unauth[peer]--; l.unauth[peer] <= 0 {
		delete(l.unauth, peer)
	}
}

func peerOf(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// Conn is a connection accepted by a [Listener].
type Conn struct {
	net.Conn
	l      *Listener
	peer   string
	authed bool      // guarded by l.mu
	closed sync.Once // releases the counts once
}

// Close closes the connection and releases its counts.
func (c *Conn) Close() error {
	c.closed.Do(func() {
		c.l.mu.Lock()
		c.l.open--
		if !c.authed {
			c.authed = true
			c.l.dropUnauth(c.peer)
		}
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// authenticate stops counting c against its peer's unauthenticated cap.
func (c *Conn) authenticate() {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if !c.authed {
		c.authed = true
		c.l.dropUnauth(c.peer)
	}
}

type ctxKey struct{}

// ConnContext is an http.Server ConnContext: it records the connection's
// [Conn] (under a TLS layer or not) for [Authenticated].
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if lc, ok := c.(*Conn); ok {
		return context.WithValue(ctx, ctxKey{}, lc)
	}
	return ctx
}

// Authenticated marks the connection serving the request of ctx as
// authenticated. It does nothing for a connection not from a [Listener].
func Authenticated(ctx context.Context) {
	if c, ok := ctx.Value(ctxKey{}).(*Conn); ok {
		c.authenticate()
	}
}

// Budget bounds the bytes of request bodies read before their request
// is authenticated, over all connections. The zero Budget and a nil one
// admit everything.
type Budget struct {
	max int64

	mu   sync.Mutex
	used int64
}

// NewBudget returns a budget of max bytes; max <= 0 means no bound.
func NewBudget(max int64) *Budget { return &Budget{max: max} }

// Acquire reserves n bytes; false when that would pass the budget. A
// true answer must be followed by Release(n).
func (b *Budget) Acquire(n int64) bool {
	if b == nil || b.max <= 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.max {
		return false
	}
	b.used += n
	return true
}

// Release returns n bytes to the budget.
func (b *Budget) Release(n int64) {
	if b == nil || b.max <= 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}

// Used returns the bytes reserved now.
func (b *Budget) Used() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// BodyDeadline is how long reading a body of n bytes may take at
// perMiB per started MiB (at least one): 2 MiB at 4 s/MiB is 8 s.
func BodyDeadline(n int64, perMiB time.Duration) time.Duration {
	mib := (n + 1<<20 - 1) >> 20
	return time.Duration(max(mib, 1)) * perMiB
}
