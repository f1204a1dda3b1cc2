package connlimit

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// serve runs a Listener with lim and hands out what it accepts.
func serve(t *testing.T, lim Limits) (*Listener, chan net.Conn) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewListener(inner, lim)
	t.Cleanup(func() { l.Close() })
	got := make(chan net.Conn, 64)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			got <- c
		}
	}()
	return l, got
}

func dial(t *testing.T, l *Listener, src net.IP) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src}}
	c, err := d.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByPeer reports whether the server closed c (EOF or reset).
func closedByPeer(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Read(make([]byte, 1))
	ne, ok := err.(net.Error)
	return err != nil && !(ok && ne.Timeout())
}

// TestPerPeerUnauthCap: an address holds at most MaxUnauthPerPeer
// unauthenticated connections; another address is unaffected; an
// authenticated connection frees its slot, a closed one too.
func TestPerPeerUnauthCap(t *testing.T) {
	l, got := serve(t, Limits{MaxUnauthPerPeer: 2})
	a := net.IPv4(127, 0, 0, 2)
	dial(t, l, a)
	dial(t, l, a)
	c1, c2 := <-got, <-got
	third := dial(t, l, a)
	if !closedByPeer(third) {
		t.Fatal("third unauthenticated connection of one address was kept")
	}
	if st := l.Stats(); st.Refused != 1 || st.Open != 2 || st.Unauthenticated != 2 {
		t.Fatalf("stats %+v", st)
	}
	dial(t, l, net.IPv4(127, 0, 0, 1)) // another address
	other := <-got
	// Authenticating c1 frees a slot of its address.
	Authenticated(ConnContext(context.Background(), c1))
	dial(t, l, a)
	c3 := <-got
	if st := l.Stats(); st.Open != 4 || st.Unauthenticated != 3 {
		t.Fatalf("after authenticating one: %+v", st)
	}
	for _, c := range []net.Conn{c1, c2, c3, other} {
		c.Close()
		c.Close() // idempotent
	}
	if st := l.Stats(); st.Open != 0 || st.Unauthenticated != 0 {
		t.Fatalf("after closing all: %+v", st)
	}
}

// TestMaxConns: past MaxConns new connections are closed at accept,
// authenticated or not.
func TestMaxConns(t *testing.T) {
	l, got := serve(t, Limits{MaxConns: 1})
	dial(t, l, net.IPv4(127, 0, 0, 1))
	c := <-got
	Authenticated(ConnContext(context.Background(), c))
	if !closedByPeer(dial(t, l, net.IPv4(127, 0, 0, 3))) {
		t.Fatal("connection past MaxConns kept")
	}
	c.Close()
	d := dial(t, l, net.IPv4(127, 0, 0, 3))
	select {
	case s := <-got:
		s.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("no connection accepted after one closed")
	}
	io.WriteString(d, "x")
}

// TestBudget: untrusted peers share the general pool, each within its
// per-peer share; a peer that authenticated draws on the trusted pool,
// which strangers cannot touch.
func TestBudget(t *testing.T) {
	l, got := serve(t, Limits{})
	conn := func(ip net.IP) context.Context {
		dial(t, l, ip)
		return ConnContext(context.Background(), <-got)
	}
	b := NewBudget(BudgetLimits{General: 10, PerPeer: 6, Trusted: 10})
	s1, s2, s3 := conn(net.IPv4(127, 0, 0, 2)), conn(net.IPv4(127, 0, 0, 3)), conn(net.IPv4(127, 0, 0, 4))
	r1, ok := b.Acquire(s1, 6)
	if !ok {
		t.Fatal("first 6 refused")
	}
	if _, ok := b.Acquire(s1, 1); ok {
		t.Fatal("a peer passed its share")
	}
	r2, ok := b.Acquire(s2, 4)
	if !ok {
		t.Fatal("second peer refused within the pool")
	}
	if _, ok := b.Acquire(s3, 1); ok {
		t.Fatal("general pool passed")
	}
	// A peer that authenticated uses the trusted pool though the general
	// one is spent.
	legit := conn(net.IPv4(127, 0, 0, 1))
	Authenticated(legit)
	next := conn(net.IPv4(127, 0, 0, 1))
	rl, ok := b.Acquire(next, 10)
	if !ok {
		t.Fatal("trusted peer refused while strangers hold the general pool")
	}
	if g, tr := b.Used(); g != 10 || tr != 10 {
		t.Fatalf("used %d general, %d trusted", g, tr)
	}
	r1()
	r1() // once only
	r2()
	rl()
	if g, tr := b.Used(); g != 0 || tr != 0 {
		t.Fatalf("after release: %d, %d", g, tr)
	}
	var none *Budget
	if _, ok := none.Acquire(context.Background(), 1<<40); !ok {
		t.Fatal("nil budget refused")
	}
	if BodyDeadline(0, time.Second) != time.Second || BodyDeadline(2<<20-1, 4*time.Second) != 8*time.Second {
		t.Fatal("BodyDeadline")
	}
}
