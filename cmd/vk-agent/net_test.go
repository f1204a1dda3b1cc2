package main

import (
	"io"
	"net"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseNet(t *testing.T) {
	tests := []struct {
		cmdline   string
		wantAddr  string // "" for no network
		wantHosts string
		wantErr   bool
	}{
		{cmdline: "console=ttyS0 vk.root=/dev/vda"},
		{cmdline: "console=ttyS0 vk.net=10.0.2.2/24 vk.host=10.0.2.3,web,test__base vk.host=10.0.2.4,db",
			wantAddr: "10.0.2.2/24", wantHosts: "10.0.2.3\tweb test__base\n10.0.2.4\tdb\n"},
		{cmdline: "vk.net=10.0.2.2/24 vk.host=bogus,web vk.host=10.0.2.5", wantAddr: "10.0.2.2/24"},
		{cmdline: "vk.net=10.0.2.2/24@52:54:00:76:6B:02 vk.net=10.0.3.15/24@52:54:00:76:6b:fe",
			wantAddr: "10.0.2.2/24@52:54:00:76:6b:02 10.0.3.15/24@52:54:00:76:6b:fe"},
		{cmdline: "vk.net=10.0.2.2/24@not-a-mac", wantErr: true},
		{cmdline: "vk.net=10.0.2.2", wantErr: true},
		{cmdline: "vk.net=fd00::2/64", wantErr: true},
	}
	for _, tt := range tests {
		g, err := parseNet(tt.cmdline)
		if (err != nil) != tt.wantErr {
			t.Errorf("%q: error %v, want error %v", tt.cmdline, err, tt.wantErr)
			continue
		}
		if tt.wantErr {
			continue
		}
		var gots []string
		for _, gi := range g.ifs {
			ones, _ := gi.addr.Mask.Size()
			a := gi.addr.IP.String() + "/" + itoa(ones)
			if gi.mac != "" {
				a += "@" + gi.mac
			}
			gots = append(gots, a)
		}
		got := strings.Join(gots, " ")
		if got != tt.wantAddr {
			t.Errorf("%q: address %q, want %q", tt.cmdline, got, tt.wantAddr)
		}
		hosts := g.hostsFile()
		if !strings.HasPrefix(hosts, "127.0.0.1\tlocalhost\n") || strings.TrimPrefix(hosts, "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n") != tt.wantHosts {
			t.Errorf("%q: hosts %q, want localhost then %q", tt.cmdline, hosts, tt.wantHosts)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// The services' health check: a port that listens is reported up at
// once, one that never does after the wait.
func TestWaitTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := closed.Addr().String()
	closed.Close()
	if pending := waitTCP([]string{ln.Addr().String()}, 5*time.Second); len(pending) != 0 {
		t.Errorf("a listening port is pending: %v", pending)
	}
	start := time.Now()
	pending := waitTCP([]string{ln.Addr().String(), dead}, 300*time.Millisecond)
	if len(pending) != 1 || pending[0] != dead {
		t.Errorf("pending %v, want only %s", pending, dead)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("waitTCP took %v with a 300 ms wait", time.Since(start))
	}
}

// The relay QEMU runs per forwarded connection carries both directions
// between its stdio and the node's socket.
func TestRelay(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "fwd.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		c.Write([]byte("node got " + string(b)))
	}()
	bin := filepath.Join(t.TempDir(), "vk-agent")
	if out, err := osexec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cmd := osexec.Command(bin, "-relay", sock)
	cmd.Stdin = strings.NewReader("GET / HTTP/1.0\r\n\r\n")
	out, err := cmd.Output()
	if err != nil || string(out) != "node got GET / HTTP/1.0\r\n\r\n" {
		t.Errorf("relay: %q, %v", out, err)
	}
}
