package hub

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/pki"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/reqsign"
)

// TestPreAuthAttackReport measures what unauthenticated connections cost
// the hub: a child process (this test binary, TestAttackHelper) keeps N
// connections attacking the hub's listener for a while, re-dialling each
// one the hub closes, while this process (the hub) samples its own RSS and
// times legitimate signed requests. Outside the default run:
//
//	VK_ATTACK_REPORT=1 go test ./hub -run TestPreAuthAttackReport -v -timeout 15m
//
// VK_ATTACK_CONNS (default 2000) and VK_ATTACK_SECS (default 20) tune it.
// Each scenario's line goes to the test log; docs/benchmarks.md keeps the
// figures. Loopback only.
func TestPreAuthAttackReport(t *testing.T) {
	if os.Getenv("VK_ATTACK_REPORT") == "" {
		t.Skip("set VK_ATTACK_REPORT=1 to run the attack measurement")
	}
	conns := envInt("VK_ATTACK_CONNS", 2000)
	secs := envInt("VK_ATTACK_SECS", 20)
	t.Logf("| attack | source addresses | connections | peak hub RSS | legit requests | p50 | p99 | max | hub conns open (peak) | closed at accept |")
	t.Logf("|---|---|---|---|---|---|---|---|---|---|")
	for _, sc := range []struct{ mode, sources string }{
		{"none", "one"},
		{"body", "one"}, {"body", "many"},
		{"slow", "one"}, {"slow", "many"},
		{"handshake", "many"},
	} {
		runAttack(t, sc.mode, sc.sources, conns, time.Duration(secs)*time.Second)
	}
}

func envInt(k string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(k)); err == nil && n > 0 {
		return n
	}
	return def
}

func runAttack(t *testing.T, mode, sources string, conns int, dur time.Duration) {
	// The previous scenario's garbage back to the OS first: peaks are
	// this scenario's.
	runtime.GC()
	debug.FreeOSMemory()
	h := newHarness(t)
	h.relayUp(1)
	// The relay has talked to the hub before the attack (its address is
	// trusted, as a working relay's is).
	h.want(http.StatusOK, nil, "POST", "/v1/capacity", client.CapacityRequest{Placement: testPlacement})
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, h.srv.CAPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	var child *exec.Cmd
	if mode != "none" {
		child = exec.Command(os.Args[0], "-test.run=^TestAttackHelper$", "-test.timeout=0")
		// One core for the attacker: on a shared two-core machine it
		// would otherwise take the hub's CPU, not its memory.
		child.Env = append(os.Environ(), "GOMAXPROCS=1", "VK_ATTACK_HELPER=1", "VK_ATTACK_ADDR="+h.srv.Addr(), "VK_ATTACK_CA="+ca,
			"VK_ATTACK_MODE="+mode, "VK_ATTACK_SOURCES="+sources, "VK_ATTACK_N="+strconv.Itoa(conns),
			"VK_ATTACK_RELAY="+h.relay, "VK_ATTACK_TIME="+strconv.FormatInt(h.clk.Now().Unix(), 10),
			"VK_ATTACK_DUR="+dur.String())
		child.Stderr = os.Stderr
		if err := child.Start(); err != nil {
			t.Fatal(err)
		}
		defer child.Process.Kill()
	}
	// Let the attack ramp up for a quarter of the time, then time
	// legitimate requests while sampling RSS and the listener's counts.
	stop := make(chan struct{})
	var peakRSS, peakOpen atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if r := rssBytes(); r > peakRSS.Load() {
				peakRSS.Store(r)
			}
			if st, _ := h.srv.ConnStats(); int64(st.Open) > peakOpen.Load() {
				peakOpen.Store(int64(st.Open))
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	ramp := time.NewTimer(dur / 4)
	<-ramp.C
	var lat []time.Duration
	end := time.Now().Add(dur * 3 / 4)
	failures := map[int]int{}
	for time.Now().Before(end) {
		start := time.Now()
		st, _, _ := h.call("POST", "/v1/capacity", client.CapacityRequest{Placement: testPlacement})
		if st != http.StatusOK {
			failures[st]++
			continue
		}
		lat = append(lat, time.Since(start))
	}
	close(stop)
	wg.Wait()
	if child != nil {
		child.Process.Kill()
		child.Wait()
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(float64(len(lat))*p))].Round(100 * time.Microsecond)
	}
	st, _ := h.srv.ConnStats()
	n := conns
	if mode == "none" {
		n = 0
	}
	failed := 0
	for _, c := range failures {
		failed += c
	}
	t.Logf("| %s | %s | %d | %d MB | %d ok, %d failed %v | %s | %s | %s | %d | %d |", mode, sources, n, peakRSS.Load()>>20,
		len(lat), failed, failures, q(0.5), q(0.99), q(1), peakOpen.Load(), st.Refused)
}

// rssBytes is this process's resident set size.
func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// TestAttackHelper is the attacker of TestPreAuthAttackReport, run in a
// child process. Each of N workers dials the hub (from 127.0.0.2, or from
// an address of its own in 127.1.0.0/16 with VK_ATTACK_SOURCES=many) and
// then, by VK_ATTACK_MODE:
//   - body: headers naming a known relay with a fresh time and a
//     2 MiB − 1 byte body, all of it but the last byte sent, then stalls;
//   - slow: request headers one byte every 3 s;
//   - handshake: a TCP connection that never starts TLS;
//
// and re-dials as soon as the hub closes the connection, until
// VK_ATTACK_DUR passes.
func TestAttackHelper(t *testing.T) {
	if os.Getenv("VK_ATTACK_HELPER") == "" {
		t.Skip("the attacker of TestPreAuthAttackReport")
	}
	addr, mode, many := os.Getenv("VK_ATTACK_ADDR"), os.Getenv("VK_ATTACK_MODE"), os.Getenv("VK_ATTACK_SOURCES") == "many"
	n := envInt("VK_ATTACK_N", 2000)
	dur, _ := time.ParseDuration(os.Getenv("VK_ATTACK_DUR"))
	caPEM, err := os.ReadFile(os.Getenv("VK_ATTACK_CA"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pki.ClientConfig(caPEM, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	body := strings.Repeat("x", 2<<20-2)
	head := fmt.Sprintf("POST /v1/jobs HTTP/1.1\r\nHost: hub\r\nContent-Length: %d\r\n%s: %s\r\n%s: %s\r\n%s: %s\r\n\r\n", 2<<20-1,
		reqsign.HeaderPrincipal, os.Getenv("VK_ATTACK_RELAY"), reqsign.HeaderTime, os.Getenv("VK_ATTACK_TIME"),
		reqsign.HeaderSignature, strings.Repeat("A", 86)+"==")
	deadline := time.Now().Add(dur)
	var wg sync.WaitGroup
	for i := range n {
		src := net.IPv4(127, 0, 0, 2)
		if many {
			src = net.IPv4(127, 1, byte(i>>8), byte(i))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: src}, Timeout: 5 * time.Second}
			for time.Now().Before(deadline) {
				raw, err := d.Dial("tcp", addr)
				if err != nil {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				raw.SetDeadline(deadline)
				switch mode {
				case "handshake":
					io.Copy(io.Discard, raw)
				case "body":
					c := tls.Client(raw, cfg)
					if c.Handshake() == nil {
						io.WriteString(c, head)
						io.WriteString(c, body)
						bufio.NewReader(c).ReadByte() // until the hub answers or closes
					}
				case "slow":
					c := tls.Client(raw, cfg)
					if c.Handshake() == nil {
						for _, b := range []byte("POST /v1/jobs HTTP/1.1\r\nHost: hub\r\n") {
							if _, err := c.Write([]byte{b}); err != nil {
								break
							}
							time.Sleep(3 * time.Second)
						}
					}
				}
				raw.Close()
			}
		}()
	}
	wg.Wait()
}
