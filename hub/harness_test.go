package hub

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/output"
	"github.com/vk-ci/vk/hub/pki"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/proto/job"
	"github.com/vk-ci/vk/reqsign"
)

// testStart is the fixed start of every hub test's fake clock. It is
// close to real time because request signatures are checked against it.
var testStart = time.Now().UTC().Truncate(time.Second)

var testPlacement = client.Placement{Pool: "linux", Labels: []string{"ssd"},
	Envelope: client.Envelope{Mem: 2 << 30, CPUs: 2, Disk: 10 << 30}}

// harness runs a real hub (Start, TLS 1.3 on 127.0.0.1:0, bbolt store in
// a temp dir) with a fake clock, one enrolled relay signing real requests
// (reqsign.Transport), and plays the relay's and a node's sessions through
// the driver's exported methods.
type harness struct {
	t     testing.TB
	clk   *clock.Fake
	dir   string
	srv   *Server
	cfg   Config
	relay string
	key   ed25519.PrivateKey
	hc    *http.Client
	node  *fakeNode
	rsend *fakeRelay
	logs  *syncBuffer // every log line of every hub start, JSON
	// outWaits receives a value each time an output long poll parks.
	outWaits chan string
	// wrapStore is passed to Start as Options.WrapStore (nil: none).
	wrapStore func(store.Store) store.Store
	// wrapOutput, when set, wraps the output store at each start.
	wrapOutput func(output.Store) output.Store
}

// signalingOutput is the real output store that reports parked waits.
type signalingOutput struct {
	output.Store
	waits chan string
}

func (s signalingOutput) Wait(ctx context.Context, job string, offset int64) error {
	select {
	case s.waits <- job:
	default:
	}
	return s.Store.Wait(ctx, job, offset)
}

// Stats is the wrapped output log's, so the hub exposes its metrics.
func (s signalingOutput) Stats() output.LogStats {
	if st, ok := s.Store.(outputStats); ok {
		return st.Stats()
	}
	return output.LogStats{}
}

// Sweep is the wrapped store's, so the hub's start sweeps the harness's
// output directory as it would its own.
func (s signalingOutput) Sweep(ctx context.Context, keep func(job string) bool) ([]string, error) {
	sw, ok := s.Store.(interface {
		Sweep(context.Context, func(string) bool) ([]string, error)
	})
	if !ok {
		return nil, nil
	}
	return sw.Sweep(ctx, keep)
}

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	written chan struct{} // closed and replaced on every write; nil until a waiter needs it
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.written != nil {
		close(s.written)
		s.written = nil
	}
	return s.b.Write(p)
}

// waitFor waits until the logs hold sub, failing the test after d.
func (s *syncBuffer) waitFor(t *testing.T, sub string, d time.Duration) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		if bytes.Contains(s.b.Bytes(), []byte(sub)) {
			s.mu.Unlock()
			return
		}
		if s.written == nil {
			s.written = make(chan struct{})
		}
		ch := s.written
		s.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("no log line holding %q within %s", sub, d)
		}
	}
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type fakeNode struct{ frames chan dispatch.Message }

func (f *fakeNode) Send(m dispatch.Message) error {
	select {
	case f.frames <- m:
	default:
		panic("fake node: frame queue full")
	}
	return nil
}

type fakeRelay struct{ frames chan client.RelayMessage }

func (f *fakeRelay) Send(m client.RelayMessage) error {
	select {
	case f.frames <- m:
	default:
	}
	return nil
}

// newHarness starts a hub with the test defaults, changed by the
// configure functions given (nil ones skipped).
func newHarness(t testing.TB, configure ...func(*Config)) *harness {
	t.Helper()
	key, err := reqsign.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, clk: clock.NewFake(testStart), dir: t.TempDir(), relay: "relay-1", key: key, logs: &syncBuffer{}}
	h.cfg = DefaultConfig()
	h.cfg.Addr = "127.0.0.1:0"
	h.cfg.StateDir = h.dir
	// Runners that never took a job make probes, one fleet-wide by
	// default (ARB-19); tests that need several tickets out raise it.
	h.cfg.CapacityPolicy = &PolicyConfig{ProbeLimit: 64}
	// Queued reservations answer 202 at once; TestReserveImmediateWait
	// turns the API-17 short wait on.
	h.cfg.ImmediateWaitMillis = 0
	for _, c := range configure {
		if c != nil {
			c(&h.cfg)
		}
	}
	h.start()
	h.enrol()
	return h
}

// enrol creates h's relay principal in the store.
func (h *harness) enrol() {
	h.t.Helper()
	pub := h.key.Public().(ed25519.PublicKey)
	if err := h.srv.Store().CreatePrincipal(h.t.Context(), store.Principal{ID: h.relay, Kind: store.KindRelay, PublicKey: pub, Created: testStart}); err != nil {
		h.t.Fatal(err)
	}
}

// enrolNode creates node principal id in the store, as `vk-hub token
// create --kind node` and the node's join do.
func (h *harness) enrolNode(id string) {
	h.t.Helper()
	key, err := reqsign.GenerateKey()
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.srv.Store().CreatePrincipal(h.t.Context(), store.Principal{ID: id, Kind: store.KindNode, PublicKey: key.Public().(ed25519.PublicKey), Created: testStart}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) start() {
	h.t.Helper()
	log := slog.New(slog.NewMultiHandler(testlog.New(h.t).Handler(),
		slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	dir, err := output.Open(filepath.Join(h.dir, "output"), log)
	if err != nil {
		h.t.Fatal(err)
	}
	h.outWaits = make(chan string, 16)
	var out output.Store = signalingOutput{dir, h.outWaits}
	if h.wrapOutput != nil {
		out = h.wrapOutput(out)
	}
	srv, err := Start(h.t.Context(), h.cfg, log, Options{Clock: h.clk, Output: out, WrapStore: h.wrapStore})
	if err != nil {
		h.t.Fatal(err)
	}
	waitPending(h.t, h, 2) // the driver's tick and the answer pruner
	h.srv = srv
	h.t.Cleanup(func() { srv.Shutdown(context.Background()) })
	tcfg, err := pki.ClientConfig(srv.CAPEM(), "127.0.0.1")
	if err != nil {
		h.t.Fatal(err)
	}
	h.hc = &http.Client{Transport: &reqsign.Transport{Key: h.key, Principal: h.relay, TLSConfig: tcfg, Now: h.clk.Now}}
	h.node = &fakeNode{frames: make(chan dispatch.Message, 1024)}
	h.rsend = &fakeRelay{frames: make(chan client.RelayMessage, 1024)}
}

// restart stops the hub without any cleanup of its state and starts a new
// one on the same state dir (FAIL-19).
func (h *harness) restart() {
	h.t.Helper()
	if err := h.srv.Shutdown(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	h.start()
}

// call sends a signed request; body nil sends none. It returns the status
// and body.
func (h *harness) call(method, path string, body any) (int, []byte, http.Header) {
	h.t.Helper()
	var rd io.Reader
	if body != nil {
		b, ok := body.([]byte)
		if !ok {
			var err error
			if b, err = json.Marshal(body); err != nil {
				h.t.Fatal(err)
			}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(h.t.Context(), method, h.srv.URL()+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

// want checks a call's status and decodes its body into out (when non-nil).
func (h *harness) want(status int, out any, method, path string, body any) []byte {
	h.t.Helper()
	got, b, _ := h.call(method, path, body)
	if got != status {
		h.t.Fatalf("%s %s = %d %s, want %d", method, path, got, b, status)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			h.t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
	return b
}

// wantErr checks an error answer's status and code.
func (h *harness) wantErr(status int, code client.Code, method, path string, body any) client.Error {
	h.t.Helper()
	var e client.Error
	h.want(status, &e, method, path, body)
	if e.Code != code {
		h.t.Fatalf("%s %s: code %q (%s), want %q", method, path, e.Code, e.Error, code)
	}
	return e
}

// relayUp plays the relay's session: connected, report with runners "r1"
// and "r2" of testPlacement (request_concurrency rc), first heartbeat. Two
// runners because a runner that took no job has at most one probe out
// (ARB-19).
func (h *harness) relayUp(rc int, admissions ...string) {
	h.t.Helper()
	ctx := h.t.Context()
	d := h.srv.Driver()
	if err := d.RelayConnected(ctx, h.relay, h.rsend); err != nil {
		h.t.Fatal(err)
	}
	rep := &client.RelayReport{Concurrent: 10, Runners: []client.RunnerReport{
		{Name: "r1", Placement: testPlacement, RequestConcurrency: rc, TokenAccepted: true},
		{Name: "r2", Placement: testPlacement, RequestConcurrency: rc, TokenAccepted: true}}}
	if err := d.RelayFrame(ctx, h.relay, rep); err != nil {
		h.t.Fatal(err)
	}
	h.heartbeat(admissions, nil)
}

// heartbeat sends a relay heartbeat for runner r1.
func (h *harness) heartbeat(requests []string, jobs []client.JobAdmission) {
	h.t.Helper()
	hb := &client.RelayHeartbeat{Runners: []client.RunnerHeartbeat{{Name: "r1", State: client.RunnerPolling, RequestAdmissions: requests, JobAdmissions: jobs}}}
	if err := h.srv.Driver().RelayFrame(h.t.Context(), h.relay, hb); err != nil {
		h.t.Fatal(err)
	}
}

// nodeUp plays node "n1": connected, report (pool linux, label ssd, room
// for 4 envelopes), held.
func (h *harness) nodeUp(held dispatch.Held) {
	h.t.Helper()
	ctx := h.t.Context()
	d := h.srv.Driver()
	if err := d.NodeConnected(ctx, "n1", h.node, false); err != nil {
		h.t.Fatal(err)
	}
	rep := &dispatch.Report{Resources: dispatch.Resources{Mem: 8 << 30, Disk: 40 << 30, CPUs: 8}, Pools: []string{"linux"}, Labels: []string{"ssd"}}
	h.nodeSay(rep)
	h.nodeSay(&held)
}

func (h *harness) nodeSay(m dispatch.Message) {
	h.t.Helper()
	if err := h.srv.Driver().NodeFrame(h.t.Context(), "n1", m); err != nil {
		h.t.Fatalf("node frame %T: %v", m, err)
	}
}

// expectFrame returns the node's next frame, which must be of type T. The
// timeout is a failsafe: frames are sent before the call that caused them
// returns.
func expectFrame[T dispatch.Message](h *harness) T {
	h.t.Helper()
	select {
	case m := <-h.node.frames:
		v, ok := m.(T)
		if !ok {
			var zero T
			h.t.Fatalf("node got %T %+v, want %T", m, m, zero)
		}
		return v
	case <-time.After(5 * time.Second):
		var zero T
		h.t.Fatalf("node got nothing, want %s", reflect.TypeOf(zero))
		return zero
	}
}

// noFrame checks the node got nothing more.
func (h *harness) noFrame() {
	h.t.Helper()
	select {
	case m := <-h.node.frames:
		h.t.Fatalf("node got unexpected %T %+v", m, m)
	default:
	}
}

// reserve queues a reservation for runner r1 and returns the ticket.
func (h *harness) reserve() string { return h.reserveFor("r1") }

// reserveFor queues a reservation for runner and returns the ticket.
func (h *harness) reserveFor(runner string) string {
	h.t.Helper()
	var tk client.ReservationTicket
	h.want(http.StatusAccepted, &tk, "POST", "/v1/reservations", client.ReservationRequest{Runner: runner, Queue: true,
		RequestID: client.NewRequestID(), Placement: testPlacement})
	return tk.Ticket
}

// grant reserves for r1, accepts the offer as the node and returns the
// grant.
func (h *harness) grant() client.ReservationGrant { return h.grantFor("r1") }

func (h *harness) grantFor(runner string) client.ReservationGrant {
	h.t.Helper()
	tk := h.reserveFor(runner)
	off := expectFrame[dispatch.Offer](h)
	h.nodeSay(&dispatch.OfferReply{Reservation: off.Reservation, Reply: dispatch.ReplyAccepted, LeaseSecs: 90})
	var g client.ReservationGrant
	h.want(http.StatusCreated, &g, "GET", "/v1/reservations/tickets/"+tk, nil)
	return g
}

// claimed returns a claimed grant of r1.
func (h *harness) claimed() client.ReservationGrant { return h.claimedFor("r1") }

func (h *harness) claimedFor(runner string) client.ReservationGrant {
	h.t.Helper()
	g := h.grantFor(runner)
	h.want(http.StatusNoContent, nil, "POST", "/v1/reservations/"+g.Admission+"/claim", nil)
	return g
}

const canary = "CANARY-s3cr3t-9f2c"

// testSpec returns a runnable spec whose secrets are all the canary.
func testSpec(gitlabJob int64) job.JobSpec {
	return job.NewGitLabCI(&job.CiJob{
		Job:         job.JobInfo{ID: gitlabJob, ProjectID: 42, ProjectPath: "acme/web"},
		Token:       canary + "-token",
		Sources:     job.Sources{RepoURL: "https://gitlab.example.com/acme/web.git", Ref: "main"},
		TimeoutSecs: 3600,
		Variables: []job.Variable{{Key: "DEPLOY_KEY", Value: canary + "-var", Masked: true}, {Key: "PLAIN", Value: "visible", Public: true},
			// GitLab sends the job token inside this URL, neither public nor masked.
			{Key: "CI_REPOSITORY_URL", Value: "https://gitlab-ci-token:" + canary + "-token@gitlab.example.com/acme/web.git"},
			{Key: "PRIVATE", Value: canary + "-private"}, {Key: "KEY_FILE", Value: canary + "-file", File: true, Public: true}},
		Steps:               []job.Step{{Name: "script", Script: []string{"echo hi"}}},
		Services:            []job.Image{{Name: "postgres:16", Variables: []job.Variable{{Key: "POSTGRES_PASSWORD", Value: canary + "-svc", Masked: true}}}},
		RegistryCredentials: []job.RegistryCredential{{URL: "registry.example.com", Username: "gitlab-ci-token", Password: canary + "-registry"}},
		Dependencies:        []job.Dependency{{ID: 7, Name: "build", Token: canary + "-dep"}},
		Trace:               job.TraceSettings{LimitBytes: 4 << 20},
		ServerURL:           "https://gitlab.example.com",
	})
}

// submit submits a job on a claimed grant after reporting outcome job.
func (h *harness) submitOn(g client.ReservationGrant, gitlabJob int64) client.JobView {
	return h.submitOnFor(g, "r1", gitlabJob)
}

// finishedWithOutput submits GitLab job gitlabJob on a fresh claim, has
// the node accept it, send data as its whole output and finish it, and
// returns the job once the hub has recorded the result.
func (h *harness) finishedWithOutput(gitlabJob int64, data string) client.JobView {
	v := h.submitOn(h.claimed(), gitlabJob)
	expectFrame[dispatch.Start](h)
	h.nodeSay(&dispatch.JobUpdate{Job: v.ID, State: dispatch.JobAccepted})
	h.nodeSay(&dispatch.Output{Job: v.ID, Offset: 0, Data: []byte(data)})
	expectFrame[dispatch.OutputAck](h)
	h.nodeSay(&dispatch.Result{Job: v.ID, Result: client.JobResult{OutputLen: int64(len(data))}})
	expectFrame[dispatch.Recorded](h)
	return v
}

func (h *harness) submitOnFor(g client.ReservationGrant, runner string, gitlabJob int64) client.JobView {
	h.t.Helper()
	h.want(http.StatusNoContent, nil, "POST", "/v1/reservations/"+g.Admission+"/outcome", client.OutcomeRequest{Admission: g.Admission, Outcome: client.OutcomeJob})
	var v client.JobView
	h.want(http.StatusCreated, &v, "POST", "/v1/jobs", client.JobSubmission{Runner: runner, Admission: g.Admission, Reservation: g.Reservation,
		RequestID: client.NewRequestID(), Placement: testPlacement, PlaceWithinSecs: 300, Spec: testSpec(gitlabJob)})
	return v
}

func storePath(h *harness) string { return filepath.Join(h.dir, "hub.db") }

// tick runs a driver tick now.
type tick struct{}

func (tick) run(d *Driver) { d.onTick() }

// advance moves the fake clock and runs a driver tick, so deadlines due by
// then have fired when it returns.
func (h *harness) advance(dur time.Duration) {
	h.t.Helper()
	h.clk.Advance(dur)
	d := h.srv.Driver()
	if err := d.ask(h.t.Context(), tick{}); err != nil {
		h.t.Fatal(err)
	}
}
