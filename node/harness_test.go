package node

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/session"
	"github.com/vk-ci/vk/internal/sessionclient/sessiontest"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/proto/job"
)

// The tests run the agent against the hub's real session server
// (hub/session) over TLS 1.3 on loopback, with testHub playing the hub
// driver: it stores output the way the hub must (trim overlaps, refuse
// gaps, ack what it holds), answers held with output_ack at its stored
// offsets (NSESS-24) and records results.

const testNode = "node-1"

var testKey = ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))

type testHub struct {
	t      testing.TB
	srv    *session.NodeServer
	hs     *sessiontest.Server // loopback TLS 1.3, the hub's CA; tracks connections for cutAll
	url    string              // https://127.0.0.1:port, the node's HubURL
	cliTLS *tls.Config
	caPEM  []byte

	mu        sync.Mutex
	sess      *session.NodeSession
	log       []dispatch.Message // every frame but output and heartbeat
	changed   chan struct{}      // closed and replaced on every frame
	out       map[string][]byte  // stored output per job
	results   map[string]int     // results received per job
	ignore    int                // results to leave unrecorded per job
	noRecord  bool               // never answer recorded
	noAck     bool               // store output but ack nothing
	acked     map[string]int64   // last ack sent per job
	onOutput  func(n int)        // called (unlocked) after each output frame, with the frame count
	outFrames int
	ups       int
}

func (h *testHub) LookupPrincipal(_ context.Context, kind session.Kind, id string) (session.Principal, error) {
	if kind != session.KindNode || id != testNode {
		return session.Principal{}, fmt.Errorf("%w: %s", session.ErrUnknownPrincipal, id)
	}
	return session.Principal{Key: testKey.Public().(ed25519.PublicKey)}, nil
}

func startHub(t testing.TB) *testHub {
	t.Helper()
	return startHubVersions(t, dispatch.Range{})
}

// startHubVersions is startHub speaking the node-session versions r (zero:
// the hub's default range).
func startHubVersions(t testing.TB, r dispatch.Range) *testHub {
	t.Helper()
	h := &testHub{t: t, changed: make(chan struct{}), out: map[string][]byte{}, results: map[string]int{}, acked: map[string]int64{}}
	h.srv = session.NewNodeServer(session.Config{Lookup: h, Logger: testlog.New(t).With("side", "hub"), HeartbeatSecs: 1, NodeVersions: r}, h)
	mux := http.NewServeMux()
	mux.Handle(dispatch.RouteNodeSession, h.srv)
	h.hs = sessiontest.Start(t, "", mux)
	h.url, h.cliTLS, h.caPEM = h.hs.Origin, h.hs.ClientTLS(t), h.hs.Bundle.CACertPEM
	t.Cleanup(func() { h.srv.Close() }) // before the server closes
	return h
}

func (h *testHub) NodeUp(s *session.NodeSession, _ *dispatch.Hello, resumed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sess = s
	h.ups++
	h.bumpLocked()
}

func (h *testHub) NodeDown(*session.NodeSession, error) {}

func (h *testHub) bumpLocked() {
	close(h.changed)
	h.changed = make(chan struct{})
}

func (h *testHub) NodeMessage(s *session.NodeSession, m dispatch.Message) {
	h.mu.Lock()
	var after func(int)
	n := 0
	switch m := m.(type) {
	case *dispatch.Output:
		have := h.out[m.Job]
		end := m.Offset + int64(len(m.Data))
		if len(m.Data) > dispatch.MaxOutputChunk {
			h.t.Errorf("output chunk of %d bytes (NSESS-15)", len(m.Data))
		}
		if end > h.acked[m.Job]+dispatch.MaxUnackedOutput {
			h.t.Errorf("output of %s up to %d with %d acked: more than 4 MiB unacked (NODE-11)", m.Job, end, h.acked[m.Job])
		}
		switch {
		case m.Offset > int64(len(have)):
			h.t.Errorf("output gap: job %s chunk at %d, stored %d", m.Job, m.Offset, len(have))
		case end > int64(len(have)):
			h.out[m.Job] = append(have, m.Data[int64(len(have))-m.Offset:]...)
		}
		if !h.noAck {
			h.ackLocked(s, m.Job)
		}
		h.outFrames++
		after, n = h.onOutput, h.outFrames
		h.bumpLocked()
		h.mu.Unlock()
		if after != nil {
			after(n)
		}
		return
	case *dispatch.Egress:
		if v := s.Version(); v < dispatch.VersionEgress {
			h.t.Errorf("egress frame on a version %d session (NSESS-20)", v)
		}
		h.log = append(h.log, m)
		h.bumpLocked()
		h.mu.Unlock()
		return
	case *dispatch.Heartbeat:
		h.log = append(h.log, m)
		h.bumpLocked()
		h.mu.Unlock()
		return
	case *dispatch.Held:
		for _, j := range m.Jobs {
			h.ackLocked(s, j.Job)
		}
	case *dispatch.Result:
		h.results[m.Job]++
		if m.Result.OutputLen != int64(len(h.out[m.Job])) {
			h.t.Errorf("result of %s with output_len %d while the hub holds %d bytes (NODE-13)", m.Job, m.Result.OutputLen, len(h.out[m.Job]))
		}
		if !h.noRecord && h.results[m.Job] > h.ignore {
			s.Send(&dispatch.Recorded{Job: m.Job})
		}
	}
	h.log = append(h.log, m)
	h.bumpLocked()
	h.mu.Unlock()
}

// ackLocked acks everything stored of job.
func (h *testHub) ackLocked(s *session.NodeSession, job string) {
	h.acked[job] = int64(len(h.out[job]))
	s.Send(&dispatch.OutputAck{Job: job, Offset: h.acked[job]})
}

// send sends m to the node on the current session.
func (h *testHub) send(m dispatch.Message) {
	h.t.Helper()
	h.mu.Lock()
	s := h.sess
	h.mu.Unlock()
	if s == nil {
		h.t.Fatal("no node session")
	}
	if err := s.Send(m); err != nil {
		h.t.Fatalf("send %T: %v", m, err)
	}
}

// sendLive sends m on a live session: when the current one has ended (a
// test ended it), it waits up to 30 s for the node's next session.
func (h *testHub) sendLive(m dispatch.Message) {
	h.t.Helper()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		h.mu.Lock()
		s, ch := h.sess, h.changed
		h.mu.Unlock()
		if s != nil {
			err := s.Send(m)
			if err == nil {
				return
			}
			if !errors.Is(err, session.ErrEnded) {
				h.t.Fatalf("send %T: %v", m, err)
			}
		}
		select {
		case <-ch:
		case <-deadline.C:
			h.t.Fatalf("send %T: no live node session in 30 s", m)
		}
	}
}

// waitFor returns the first frame since index from (of h.log) that match
// accepts, waiting up to 30 s; it returns its index too.
func waitFor[T dispatch.Message](h *testHub, from int, match func(T) bool) (T, int) {
	h.t.Helper()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		h.mu.Lock()
		for i := from; i < len(h.log); i++ {
			if m, ok := h.log[i].(T); ok && (match == nil || match(m)) {
				h.mu.Unlock()
				return m, i
			}
		}
		ch := h.changed
		h.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			var zero T
			h.t.Fatalf("no %T matching in 30 s; frames: %s", zero, h.dump())
			return zero, 0
		}
	}
}

// waitCond waits up to 30 s for cond (called under h.mu).
func (h *testHub) waitCond(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		h.mu.Lock()
		ok := cond()
		ch := h.changed
		h.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			h.t.Fatalf("waiting for %s: timed out; frames: %s", what, h.dump())
		}
	}
}

func (h *testHub) mark() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.log)
}

func (h *testHub) dump() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b strings.Builder
	for _, m := range h.log {
		if _, ok := m.(*dispatch.Heartbeat); ok {
			continue
		}
		fmt.Fprintf(&b, "\n  %T %+v", m, m)
	}
	return b.String()
}

// cutAll closes every TCP connection under the node's feet.
func (h *testHub) cutAll() { h.hs.CutAll() }

func (h *testHub) output(job string) []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]byte(nil), h.out[job]...)
}

// testConfig is a node with 8 GiB, 20 GiB disk and 4 CPUs, no local
// runner, no cgroups.
func testConfig(t testing.TB, dir string) Config {
	cfg := DefaultConfig()
	cfg.Node.StateDir = dir
	cfg.Node.Name = "test-node"
	cfg.Node.Runner = RunnerNone
	cfg.Node.Labels = []string{"linux"}
	cfg.Resources = ResourcesConfig{Mem: 8 * client.GiB, Disk: 20 * client.GiB, CPUs: 4}
	cfg.Executor.Cgroups = false
	// Tests run as root with the process backend: say so explicitly.
	cfg.Executor.AllowRootJobs = true
	cfg.Registry.URL = "https://registry.example.com"
	return cfg
}

func startAgent(t testing.TB, h *testHub, cfg Config, opts Options) *Agent {
	t.Helper()
	opts.Identity = &Identity{NodeID: testNode, Key: testKey, HubURL: h.url}
	opts.TLSConfig = h.cliTLS
	a, err := Start(t.Context(), cfg, testlog.New(t).With("side", "node"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		a.Shutdown(ctx)
	})
	return a
}

// connected starts a hub and an agent and waits for the agent's held.
func connected(t *testing.T, mod func(*Config), opts Options) (*testHub, *Agent) {
	t.Helper()
	h := startHub(t)
	cfg := testConfig(t, t.TempDir())
	if mod != nil {
		mod(&cfg)
	}
	a := startAgent(t, h, cfg, opts)
	waitFor[*dispatch.Held](h, 0, nil)
	return h, a
}

var env1 = client.Envelope{Mem: 1 * client.GiB, Disk: 2 * client.GiB, CPUs: 1}

// testSpec is a job running script with GIT_STRATEGY=none (no checkout),
// sections on, timestamps on.
func testSpec(script ...string) job.JobSpec {
	return job.NewGitLabCI(&job.CiJob{
		Job:         job.JobInfo{ID: 77, ProjectID: 5, ProjectPath: "group/project"},
		Token:       "glcbt-secret-token",
		Sources:     job.Sources{RepoURL: "https://gitlab.example.com/group/project.git"},
		TimeoutSecs: 600,
		Variables:   []job.Variable{{Key: "GIT_STRATEGY", Value: "none"}},
		Steps:       []job.Step{{Name: job.StepScript, Script: script, When: "on_success"}, {Name: job.StepAfterScript, Script: []string{"echo after-script-ran"}, When: "always"}},
		Trace:       job.TraceSettings{LimitBytes: 32 << 20, Sections: true},
		ServerURL:   "https://gitlab.example.com",
	})
}

// connectedB is connected for benchmarks.
func connectedB(b *testing.B) (*testHub, *Agent) {
	b.Helper()
	h := startHub(b)
	a := startAgent(b, h, testConfig(b, b.TempDir()), Options{})
	waitFor[*dispatch.Held](h, 0, nil)
	return h, a
}
