// Package connlimit bounds what unauthenticated peers can make a server
// hold: a listener that caps its open connections and, per peer address,
// the connections not yet authenticated; a byte budget for request bodies
// read before their signature is checked, with a pool of its own for
// addresses that recently authenticated; and the body read deadline.
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
	unauth  map[string]int       // by peer IP; entries at zero are deleted
	trust   map[string]time.Time // peer IP → when its last request authenticated
	refused atomic.Int64
}

// TrustFor is how long an address stays trusted after a request from it
// authenticated; maxTrusted bounds how many addresses are remembered.
const (
	TrustFor   = 10 * time.Minute
	maxTrusted = 1 << 16
)

func (l *Listener) trusted(peer string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.trust[peer]
	return ok && time.Since(t) < TrustFor
}

// remember marks peer trusted now; l.mu held. When the table is full,
// expired entries go first; if none expired, the address is not added.
func (l *Listener) rememberLocked(peer string) {
	if _, ok := l.trust[peer]; !ok && len(l.trust) >= maxTrusted {
		for p, t := range l.trust {
			if time.Since(t) >= TrustFor {
				delete(l.trust, p)
			}
		}
		if len(l.trust) >= maxTrusted {
			return
		}
	}
	l.trust[peer] = time.Now()
}

// NewListener wraps ln with lim.
func NewListener(ln net.Listener, lim Limits) *Listener {
	return &Listener{Listener: ln, lim: lim, unauth: map[string]int{}, trust: map[string]time.Time{}}
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

// authenticate stops counting c against its peer's unauthenticated cap
// and trusts its peer for [TrustFor].
func (c *Conn) authenticate() {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	c.l.rememberLocked(c.peer)
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
// authenticated, and its peer address as trusted for [TrustFor] (its
// next requests draw on the trusted body pool). It does nothing for a
// connection not from a [Listener].
func Authenticated(ctx context.Context) {
	if c, ok := ctx.Value(ctxKey{}).(*Conn); ok {
		c.authenticate()
	}
}

// IsAuthenticated reports whether the connection serving the request of
// ctx has been marked [Authenticated]; true for a connection not from a
// [Listener] (nothing counts it).
func IsAuthenticated(ctx context.Context) bool {
	c, ok := ctx.Value(ctxKey{}).(*Conn)
	if !ok {
		return true
	}
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	return c.authed
}

// Budget bounds the bytes of request bodies read before their request
// is authenticated. Requests arriving from an address that recently sent
// a request whose signature verified (a trusted peer: a relay's host)
// draw on a pool of their own, so strangers, however many, cannot starve
// them; the others share the general pool, each address at most
// PerPeer bytes of it. A nil Budget admits everything.
type Budget struct {
	lim BudgetLimits

	mu      sync.Mutex
	general int64
	trusted int64
	byPeer  map[string]int64
}

// BudgetLimits are a [Budget]'s pools in bytes; a zero field means no
// bound.
type BudgetLimits struct {
	// General bounds the body bytes of untrusted peers together.
	General int64
	// PerPeer bounds one untrusted address's share of General.
	PerPeer int64
	// Trusted bounds the body bytes of trusted peers together.
	Trusted int64
}

// NewBudget returns a budget with lim.
func NewBudget(lim BudgetLimits) *Budget {
	return &Budget{lim: lim, byPeer: map[string]int64{}}
}

// Acquire reserves n bytes for the request of ctx; ok is false when that
// would pass its pool. When ok, release must be called once the body is
// read.
func (b *Budget) Acquire(ctx context.Context, n int64) (release func(), ok bool) {
	if b == nil {
		return func() {}, true
	}
	peer, trusted := "", false
	if c, isConn := ctx.Value(ctxKey{}).(*Conn); isConn {
		peer, trusted = c.peer, c.l.trusted(c.peer)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if trusted && (b.lim.Trusted <= 0 || b.trusted+n <= b.lim.Trusted) {
		b.trusted += n
		return b.releaser(func() { b.trusted -= n }), true
	}
	if b.lim.General > 0 && b.general+n > b.lim.General {
		return nil, false
	}
	if b.lim.PerPeer > 0 && !trusted && b.byPeer[peer]+n > b.lim.PerPeer {
		return nil, false
	}
	b.general += n
	b.byPeer[peer] += n
	return b.releaser(func() {
		b.general -= n
		if b.byPeer[peer] -= n; b.byPeer[peer] <= 0 {
			delete(b.byPeer, peer)
		}
	}), true
}

func (b *Budget) releaser(undo func()) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			undo()
			b.mu.Unlock()
		})
	}
}

// Used returns the bytes reserved now in the general and trusted pools.
func (b *Budget) Used() (general, trusted int64) {
	if b == nil {
		return 0, 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.general, b.trusted
}

// BodyDeadline is how long reading a body of n bytes may take at
// perMiB per started MiB (at least one): 2 MiB at 4 s/MiB is 8 s.
func BodyDeadline(n int64, perMiB time.Duration) time.Duration {
	mib := (n + 1<<20 - 1) >> 20
	return time.Duration(max(mib, 1)) * perMiB
}
