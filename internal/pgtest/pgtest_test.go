package pgtest

import (
	"bufio"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A cluster starts, answers SQL, keeps its data across a restart, and a
// second cluster is a separate one.
func TestStartRestart(t *testing.T) {
	s := Start(t)
	db := s.NewDatabase(t)
	s.Exec(t, db, "CREATE TABLE k (v int); INSERT INTO k VALUES (42)")
	if got := s.Exec(t, db, "SELECT v FROM k"); got != "42" {
		t.Fatalf("SELECT = %q, want 42", got)
	}
	if os.Geteuid() == 0 {
		if got := s.Exec(t, db, "SELECT current_setting('data_directory')"); !strings.HasPrefix(got, filepath.Dir(s.DataDir())) {
			t.Fatalf("data directory %q not under the test's temp dir", got)
		}
	}
	if got := s.Exec(t, db, "SHOW fsync"); got != "off" {
		t.Fatalf("fsync = %q, want off for a logic-test cluster", got)
	}
	s.Restart(t)
	if got := s.Exec(t, db, "SELECT v FROM k"); got != "42" {
		t.Fatalf("after restart SELECT = %q, want 42", got)
	}
	other := Start(t)
	if other.Addr() == s.Addr() {
		t.Fatal("two clusters on one address")
	}
	if got := other.Exec(t, "postgres", "SELECT count(*) FROM pg_database WHERE datname = '"+db+"'"); got != "0" {
		t.Fatalf("second cluster sees the first's database: %q", got)
	}
}

// Bytes pass through the proxy; a black hole holds them back until lifted;
// a cut closes the connection.
func TestProxy(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 1024)
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					c.Write(buf[:n])
				}
			}()
		}
	}()
	p := NewProxy(t, echo.Addr().String())
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	roundTrip := func(msg string) (string, error) {
		if _, err := c.Write([]byte(msg + "\n")); err != nil {
			return "", err
		}
		return r.ReadString('\n')
	}
	if got, err := roundTrip("one"); err != nil || got != "one\n" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}
	p.Blackhole(true)
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if got, err := roundTrip("two"); err == nil {
		t.Fatalf("black hole let %q through", got)
	}
	c.SetReadDeadline(time.Time{})
	p.Blackhole(false)
	if got, err := r.ReadString('\n'); err != nil || got != "two\n" {
		t.Fatalf("after the black hole lifted: %q, %v", got, err)
	}
	p.Cut()
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("read after Cut succeeded")
	}
}
