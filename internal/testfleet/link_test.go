package testfleet

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"
)

// echoServer answers each line with the same line, prefixed by tag.
func echoServer(t *testing.T, tag string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					io.WriteString(c, tag+l)
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip sends one line over a new connection through l and returns
// the answer, or the error.
func roundTrip(l *Link, c net.Conn, msg string) (string, error) {
	if c == nil {
		var err error
		if c, err = net.Dial("tcp", l.Addr()); err != nil {
			return "", err
		}
		defer c.Close()
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

func TestLink(t *testing.T) {
	a, b := echoServer(t, "a:"), echoServer(t, "b:")
	l, err := NewLink(a)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	if got, err := roundTrip(l, nil, "hi"); err != nil || got != "a:hi\n" {
		t.Fatalf("through the link: %q, %v; want a:hi", got, err)
	}

	// Cut resets a live connection; a new one works.
	live, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if got, err := roundTrip(l, live, "one"); err != nil || got != "a:one\n" {
		t.Fatalf("live conn: %q, %v", got, err)
	}
	l.Cut()
	if _, err := roundTrip(l, live, "two"); err == nil {
		t.Error("a cut connection still carried data")
	}
	if got, err := roundTrip(l, nil, "again"); err != nil || got != "a:again\n" {
		t.Errorf("after Cut: %q, %v; want a:again", got, err)
	}

	// Block drops new connections until Heal.
	l.Block()
	if !l.Blocked() {
		t.Error("Blocked() = false after Block")
	}
	if got, err := roundTrip(l, nil, "blocked"); err == nil {
		t.Errorf("blocked link answered %q", got)
	}
	l.Heal()
	if got, err := roundTrip(l, nil, "healed"); err != nil || got != "a:healed\n" {
		t.Errorf("after Heal: %q, %v", got, err)
	}

	// SetTarget moves new connections to another server (a restart on a
	// new port).
	l.SetTarget(b)
	if got, err := roundTrip(l, nil, "moved"); err != nil || got != "b:moved\n" {
		t.Errorf("after SetTarget: %q, %v; want b:moved", got, err)
	}

	// A dead target looks like a closed connection to the client.
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := dead.Addr().String()
	dead.Close()
	l.SetTarget(addr)
	if _, err := roundTrip(l, nil, "void"); err == nil {
		t.Error("a dead target answered")
	}

	if err := l.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if c, err := net.Dial("tcp", l.Addr()); err == nil {
		c.Close()
		t.Error("a closed link still accepts connections")
	}
}
