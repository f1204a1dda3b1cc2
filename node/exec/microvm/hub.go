package microvm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
)

// A job's private network is an Ethernet hub in the node: a Unix socket
// in the job's directory that each of the job's QEMUs connects to with
// `-netdev stream` (its frames as a 4-byte big-endian length and the
// frame), and which repeats every frame to every other VM of the job.
// Nothing else is on it: no host interface, no route, no NAT, so the
// job's VMs reach each other and nothing beyond (net.mode "none" with
// services). A socket in the job's own 0700 directory needs no root, no
// tap device and no bridge, is gone with the directory, and is private to
// the job by construction — unlike QEMU's multicast `-netdev socket`,
// which every process on the host can join, or a point-to-point `dgram`
// pair, which cannot carry more than two VMs. A hub rather than a
// learning switch: a job has a handful of VMs, and a hub keeps no state a
// guest could fill.

// maxEthFrame bounds a frame on the hub: QEMU's own network buffer is
// under 70 KiB; a larger length is a broken stream, and the port closes.
const maxEthFrame = 1 << 17

// portQueue is how many frames wait for a slow VM before the hub drops
// what it sends it, as a congested switch does.
const portQueue = 256

// hub is one job's network.
type hub struct {
	ln  net.Listener
	log *slog.Logger

	mu    sync.Mutex
	ports map[*hubPort]struct{}
	wg    sync.WaitGroup
}

type hubPort struct {
	conn net.Conn
	out  chan []byte
}

// startHub listens on the Unix socket path.
func startHub(path string, log *slog.Logger) (*hub, error) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("the job's network: %w", err)
	}
	h := &hub{ln: ln, log: log, ports: map[*hubPort]struct{}{}}
	h.wg.Add(1)
	go h.accept()
	return h, nil
}

func (h *hub) accept() {
	defer h.wg.Done()
	for {
		c, err := h.ln.Accept()
		if err != nil {
			return
		}
		p := &hubPort{conn: c, out: make(chan []byte, portQueue)}
		h.mu.Lock()
		h.ports[p] = struct{}{}
		h.mu.Unlock()
		h.wg.Add(2)
		go h.read(p)
		go h.write(p)
	}
}

// read repeats p's frames to every other port until p's stream ends.
func (h *hub) read(p *hubPort) {
	defer h.wg.Done()
	defer h.drop(p)
	for {
		f, err := readEthFrame(p.conn)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				h.log.Warn("microVM network port closed", "err", err)
			}
			return
		}
		h.mu.Lock()
		for q := range h.ports {
			if q == p {
				continue
			}
			select {
			case q.out <- f:
			default: // q is not keeping up: the frame is lost, as on a wire
			}
		}
		h.mu.Unlock()
	}
}

func (h *hub) write(p *hubPort) {
	defer h.wg.Done()
	for f := range p.out {
		if _, err := p.conn.Write(f); err != nil {
			p.conn.Close()
		}
	}
}

func (h *hub) drop(p *hubPort) {
	h.mu.Lock()
	if _, ok := h.ports[p]; ok {
		delete(h.ports, p)
		close(p.out)
	}
	h.mu.Unlock()
	p.conn.Close()
}

// close stops the hub and every port, and waits for them.
func (h *hub) close() {
	h.ln.Close()
	h.mu.Lock()
	for p := range h.ports {
		p.conn.Close()
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// readEthFrame reads one length-prefixed frame and returns it with its
// prefix, ready to repeat.
func readEthFrame(r io.Reader) ([]byte, error) {
	var l [4]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(l[:])
	if n == 0 || n > maxEthFrame {
		return nil, fmt.Errorf("microvm network: frame of %d bytes", n)
	}
	f := make([]byte, 4+n)
	copy(f, l[:])
	if _, err := io.ReadFull(r, f[4:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return f, nil
}

// portCount is how many VMs are on the hub.
func (h *hub) portCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ports)
}
