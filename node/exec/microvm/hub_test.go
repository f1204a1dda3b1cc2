package microvm

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/testlog"
)

func ethFrame(payload string) []byte {
	return binary.BigEndian.AppendUint32(nil, uint32(len(payload))) // then the payload
}

func dialHub(t *testing.T, path string) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// The job's network repeats each VM's frames to every other VM of the
// job, never back to the sender, and closes a port whose stream is not
// frames.
func TestHubRepeatsFramesToTheOtherVMs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "net.sock")
	h, err := startHub(path, testlog.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	a, b, c := dialHub(t, path), dialHub(t, path), dialHub(t, path)
	// The hub has all three ports once it accepted each.
	for h.portCount() < 3 {
		time.Sleep(time.Millisecond) // polling the hub's accept loop
	}
	send := func(conn net.Conn, payload string) {
		t.Helper()
		if _, err := conn.Write(append(ethFrame(payload), payload...)); err != nil {
			t.Fatal(err)
		}
	}
	recv := func(conn net.Conn) string {
		t.Helper()
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		f, err := readEthFrame(conn)
		if err != nil {
			t.Fatal(err)
		}
		return string(f[4:])
	}
	send(a, "from-a")
	if got := recv(b); got != "from-a" {
		t.Errorf("b got %q", got)
	}
	if got := recv(c); got != "from-a" {
		t.Errorf("c got %q", got)
	}
	send(b, "from-b")
	// a hears b's frame and not its own: its next frame is b's.
	if got := recv(a); got != "from-b" {
		t.Errorf("a got %q, want b's frame (never its own)", got)
	}
	if got := recv(c); got != "from-b" {
		t.Errorf("c got %q", got)
	}
	// A length past any Ethernet frame closes that port only.
	if _, err := c.Write(binary.BigEndian.AppendUint32(nil, maxEthFrame+1)); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(c); err != nil {
		t.Errorf("the broken port was not closed: %v", err)
	}
	send(a, "after")
	if got := recv(b); got != "after" {
		t.Errorf("b got %q after c's port closed", got)
	}
}

func FuzzReadEthFrame(f *testing.F) {
	f.Add(append(ethFrame("abc"), "abc"...))
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := readEthFrame(bytes.NewReader(b))
		if err != nil {
			return
		}
		n := binary.BigEndian.Uint32(fr)
		if n == 0 || n > maxEthFrame || int(n)+4 != len(fr) || !bytes.Equal(fr, b[:len(fr)]) {
			t.Fatalf("frame %x from %x", fr, b)
		}
	})
}
