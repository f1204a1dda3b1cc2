// Package hubfake is a stateful fake of the hub's client API for vk-gitlab's
// tests: a TLS 1.3 server on loopback that verifies every request's
// signature (reqsign.VerifyRequest) and keeps tickets, admissions,
// reservations and jobs the way the hub's API answers them (API-03..45).
// The test plays the node: it moves jobs to running, appends output and
// finishes them. It is a real server spoken to by the real hubclient, not
// an interface mock; it exists because the relay must not import the hub.
package hubfake

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/vk-ci/vk/hubclient"
	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/reqsign"
)

// Hub is the fake hub. Create it with New.
type Hub struct {
	t     testing.TB
	srv   *httptest.Server
	mux   *http.ServeMux
	caPEM []byte
	key   ed25519.PrivateKey
	clk   clock.Clock

	// Mu guards everything below; tests read the exported maps under it
	// (WaitFor's condition runs with it held).
	Mu      sync.Mutex
	change  chan struct{}
	seq     int
	Tickets map[string]*client.ReservationGrant // nil grant while waiting
	Adms    map[string]*Admission
	Rsv     map[string]bool // reservation → released
	Jobs    map[string]*Job
	byReq   map[string]string // submission request_id → job
	Calls   map[string]int    // by route
	// knobs
	GrantAtOnce bool          // Reserve answers 201 at once
	HoldTickets bool          // ticket polls wait until grantTickets
	AutoRun     bool          // submitted jobs go running at once
	SubmitErr   *client.Error // refuse submissions with this body
	SubmitCode  int
	CancelEnds  bool                       // a cancel finishes the job as canceled
	LeaseSecs   int                        // lease of new grants; 0 means 90
	FailNext    map[string]int             // route → number of 503s to answer
	OnSubmit    func(client.JobSubmission) // called before a new submission is answered
}

// Admission is a grant as the fake keeps it.
type Admission struct {
	Reservation string
	Claimed     bool
	Outcomes    []client.Outcome
}

// Job is a submitted job as the fake keeps it.
type Job struct {
	Sub     client.JobSubmission
	View    client.JobView
	Output  []byte
	Cancels []client.CancelMode
	Settled int
}

// RelayID is the relay the fake knows.
const RelayID = "relay-1"

// New starts a fake hub for t (closed at t's end); clk verifies signature
// times and must be the relay's clock.
func New(t testing.TB, clk clock.Clock) *Hub {
	t.Helper()
	cert, caPEM, err := selfSigned()
	if err != nil {
		t.Fatal(err)
	}
	key, err := reqsign.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	h := &Hub{t: t, caPEM: caPEM, key: key, clk: clk, change: make(chan struct{}),
		Tickets: map[string]*client.ReservationGrant{}, Adms: map[string]*Admission{}, Rsv: map[string]bool{},
		Jobs: map[string]*Job{}, byReq: map[string]string{}, Calls: map[string]int{}, FailNext: map[string]int{}, AutoRun: true}
	mux := http.NewServeMux()
	for route, f := range map[string]func(http.ResponseWriter, *http.Request, []byte){
		client.RouteReserve: h.reserve, client.RouteTicketGet: h.pollTicket, client.RouteTicketDelete: h.cancelTicket,
		client.RouteClaim: h.claim, client.RouteOutcome: h.outcome, client.RouteRenew: h.renew,
		client.RouteReservationDelete: h.release, client.RouteSubmit: h.submit, client.RouteJobGet: h.getJob,
		client.RouteOutput: h.output, client.RouteCancel: h.cancel, client.RouteSettle: h.settle,
	} {
		mux.HandleFunc(route, h.wrap(route, f))
	}
	h.mux = mux
	h.srv = httptest.NewUnstartedServer(mux)
	h.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13, NextProtos: []string{"http/1.1"}}
	h.srv.StartTLS()
	t.Cleanup(h.srv.Close)
	return h
}

// selfSigned makes a self-signed certificate for 127.0.0.1 that is its own
// CA, and its PEM.
func selfSigned() (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hubfake"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// Handle serves pattern with handler on the fake's listener, e.g. a real
// hub/session relay server at client.RouteRelaySession (its tests may import
// the hub; this package may not).
func (h *Hub) Handle(pattern string, handler http.Handler) { h.mux.Handle(pattern, handler) }

// URL is the fake's base URL (https://127.0.0.1:port).
func (h *Hub) URL() string { return h.srv.URL }

// CAPEM is the certificate to pin.
func (h *Hub) CAPEM() []byte { return h.caPEM }

// Key is the relay key the fake accepts for RelayID.
func (h *Hub) Key() ed25519.PrivateKey { return h.key }

// Client returns a hubclient for RelayID, on the fake's clock.
func (h *Hub) Client(t testing.TB) *hubclient.Client {
	c, err := hubclient.New(hubclient.Config{HubURL: h.srv.URL, CAPEM: h.caPEM, Key: h.key, Principal: RelayID,
		Clock: h.clk, Log: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (h *Hub) wrap(route string, f func(http.ResponseWriter, *http.Request, []byte)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.TLS == nil || r.TLS.Version != tls.VersionTLS13 {
			http.Error(w, "want TLS 1.3", http.StatusBadRequest)
			return
		}
		lookup := func(_ context.Context, id string) (ed25519.PublicKey, error) {
			if id != RelayID {
				return nil, errors.New("unknown relay")
			}
			return h.key.Public().(ed25519.PublicKey), nil
		}
		if _, err := reqsign.VerifyRequest(r, body, lookup, h.clk.Now(), 0); err != nil {
			h.t.Errorf("%s: signature refused: %v", route, err)
			writeErr(w, http.StatusUnauthorized, client.CodeUnauthorized, "bad signature")
			return
		}
		h.Mu.Lock()
		h.Calls[route]++
		h.changedLocked() // WaitFor conditions may count calls
		if h.FailNext[route] > 0 {
			h.FailNext[route]--
			h.Mu.Unlock()
			writeErr(w, http.StatusServiceUnavailable, client.CodeUnavailable, "busy")
			return
		}
		h.Mu.Unlock()
		f(w, r, body)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, code client.Code, msg string) {
	writeJSON(w, status, client.Error{Error: msg, Code: code})
}

// changedLocked wakes long polls and waiters.
func (h *Hub) changedLocked() {
	close(h.change)
	h.change = make(chan struct{})
}

// waitChange waits until the next change, ctx's end or d.
func (h *Hub) waitChange(ctx context.Context, ch <-chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
	case <-ctx.Done():
	case <-t.C:
	}
}

func (h *Hub) newGrantLocked() *client.ReservationGrant {
	h.seq++
	g := &client.ReservationGrant{Admission: fmt.Sprintf("adm-%d", h.seq), Reservation: fmt.Sprintf("rsv-%d", h.seq),
		Node: "node-1", Envelope: client.Envelope{Mem: 1 << 30, CPUs: 1, Disk: 1 << 30}, LeaseSecs: cmp.Or(h.LeaseSecs, 90)}
	h.Adms[g.Admission] = &Admission{Reservation: g.Reservation}
	h.Rsv[g.Reservation] = false
	return g
}

func (h *Hub) reserve(w http.ResponseWriter, r *http.Request, body []byte) {
	var req client.ReservationRequest
	if err := json.Unmarshal(body, &req); err != nil || req.Runner == "" || !req.Queue || req.RequestID == "" {
		writeErr(w, 400, client.CodeInvalid, "bad reservation request")
		return
	}
	h.Mu.Lock()
	defer h.Mu.Unlock()
	defer h.changedLocked()
	if h.GrantAtOnce {
		writeJSON(w, http.StatusCreated, h.newGrantLocked())
		return
	}
	h.seq++
	t := fmt.Sprintf("tkt-%d", h.seq)
	h.Tickets[t] = nil
	writeJSON(w, http.StatusAccepted, client.ReservationTicket{Ticket: t})
}

func (h *Hub) pollTicket(w http.ResponseWriter, r *http.Request, _ []byte) {
	t := r.PathValue("ticket")
	wait, _ := strconv.Atoi(r.URL.Query().Get("wait"))
	deadline := time.Now().Add(time.Duration(wait) * time.Second)
	for {
		h.Mu.Lock()
		g, ok := h.Tickets[t]
		if !ok {
			h.Mu.Unlock()
			writeErr(w, http.StatusGone, client.CodeReservationGone, "no such ticket")
			return
		}
		if g == nil && !h.HoldTickets {
			g = h.newGrantLocked()
			h.Tickets[t] = g
			h.changedLocked()
		}
		if g != nil {
			delete(h.Tickets, t)
			h.Mu.Unlock()
			writeJSON(w, http.StatusCreated, g)
			return
		}
		ch := h.change
		h.Mu.Unlock()
		if !time.Now().Before(deadline) {
			writeJSON(w, http.StatusAccepted, client.ReservationTicket{Ticket: t})
			return
		}
		h.waitChange(r.Context(), ch, time.Until(deadline))
		if r.Context().Err() != nil {
			return
		}
	}
}

// GrantTickets lets held ticket polls be granted.
func (h *Hub) GrantTickets() {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	h.HoldTickets = false
	h.changedLocked()
}

func (h *Hub) cancelTicket(w http.ResponseWriter, r *http.Request, _ []byte) {
	h.Mu.Lock()
	delete(h.Tickets, r.PathValue("ticket"))
	h.changedLocked()
	h.Mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (h *Hub) claim(w http.ResponseWriter, r *http.Request, _ []byte) {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	a := h.Adms[r.PathValue("id")]
	if a == nil || h.Rsv[a.Reservation] {
		writeErr(w, http.StatusGone, client.CodeReservationGone, "no such grant")
		return
	}
	a.Claimed = true
	h.changedLocked()
	w.WriteHeader(http.StatusNoContent)
}

func (h *Hub) outcome(w http.ResponseWriter, r *http.Request, body []byte) {
	var req client.OutcomeRequest
	if err := json.Unmarshal(body, &req); err != nil || req.Admission != r.PathValue("admission") {
		writeErr(w, 400, client.CodeInvalid, "bad outcome")
		return
	}
	h.Mu.Lock()
	defer h.Mu.Unlock()
	a := h.Adms[req.Admission]
	if a == nil {
		writeErr(w, 404, client.CodeNotFound, "no such admission")
		return
	}
	if n := len(a.Outcomes); n > 0 && a.Outcomes[n-1] != req.Outcome {
		writeErr(w, 409, client.CodeConflict, "outcome already reported")
		return
	}
	a.Outcomes = append(a.Outcomes, req.Outcome)
	if req.Outcome != client.OutcomeJob {
		h.Rsv[a.Reservation] = true // ARB-34
	}
	h.changedLocked()
	w.WriteHeader(http.StatusNoContent)
}

func (h *Hub) renew(w http.ResponseWriter, r *http.Request, _ []byte) {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	id := r.PathValue("id")
	if released, ok := h.Rsv[id]; !ok || released {
		writeErr(w, http.StatusGone, client.CodeReservationGone, "gone")
		return
	}
	writeJSON(w, http.StatusOK, client.ReservationGrant{Reservation: id, LeaseSecs: 90})
}

func (h *Hub) release(w http.ResponseWriter, r *http.Request, _ []byte) {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	if _, ok := h.Rsv[r.PathValue("id")]; ok {
		h.Rsv[r.PathValue("id")] = true
	}
	h.changedLocked()
	w.WriteHeader(http.StatusNoContent)
}

func (h *Hub) submit(w http.ResponseWriter, r *http.Request, body []byte) {
	var sub client.JobSubmission
	if err := json.Unmarshal(body, &sub); err != nil || sub.RequestID == "" || sub.Spec.GitLabCI == nil {
		writeErr(w, 400, client.CodeInvalid, fmt.Sprintf("bad submission: %v", err))
		return
	}
	h.Mu.Lock()
	defer h.Mu.Unlock()
	defer h.changedLocked()
	if id, ok := h.byReq[sub.RequestID]; ok {
		writeJSON(w, http.StatusCreated, h.Jobs[id].View)
		return
	}
	if h.SubmitErr != nil {
		if a := h.Adms[sub.Admission]; a != nil {
			a.Outcomes = append(a.Outcomes, client.OutcomeEmpty) // API-34
		}
		writeJSON(w, h.SubmitCode, h.SubmitErr)
		return
	}
	if h.OnSubmit != nil {
		h.OnSubmit(sub)
	}
	h.seq++
	id := fmt.Sprintf("job-%d", h.seq)
	j := &Job{Sub: sub, View: client.JobView{ID: id, Revision: 1, State: client.JobQueued}}
	if h.AutoRun {
		j.View.State, j.View.Node, j.View.Revision = client.JobRunning, "node-1", 2
	}
	h.Jobs[id] = j
	h.byReq[sub.RequestID] = id
	writeJSON(w, http.StatusCreated, j.View)
}

func (h *Hub) getJob(w http.ResponseWriter, r *http.Request, _ []byte) {
	after, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
	wait, _ := strconv.Atoi(r.URL.Query().Get("wait"))
	deadline := time.Now().Add(time.Duration(wait) * time.Second)
	for {
		h.Mu.Lock()
		j := h.Jobs[r.PathValue("id")]
		if j == nil {
			h.Mu.Unlock()
			writeErr(w, 404, client.CodeNotFound, "no such job")
			return
		}
		v := j.View
		v.OutputLen = int64(len(j.Output))
		ch := h.change
		h.Mu.Unlock()
		if v.Revision > after || !time.Now().Before(deadline) {
			writeJSON(w, http.StatusOK, v)
			return
		}
		h.waitChange(r.Context(), ch, time.Until(deadline))
		if r.Context().Err() != nil {
			return
		}
	}
}

func (h *Hub) output(w http.ResponseWriter, r *http.Request, _ []byte) {
	off, _ := strconv.ParseInt(r.URL.Query().Get("offset"), 10, 64)
	h.Mu.Lock()
	j := h.Jobs[r.PathValue("id")]
	if j == nil {
		h.Mu.Unlock()
		writeErr(w, 404, client.CodeNotFound, "no such job")
		return
	}
	n := int64(len(j.Output))
	if off > n {
		h.Mu.Unlock()
		w.Header().Set(client.HeaderOutputLength, strconv.FormatInt(n, 10))
		writeErr(w, http.StatusRequestedRangeNotSatisfiable, client.CodeInvalid, "past the end")
		return
	}
	end := min(n, off+1<<20)
	data := append([]byte(nil), j.Output[off:end]...)
	complete := j.View.State == client.JobFinished && end == n
	h.Mu.Unlock()
	w.Header().Set(client.HeaderOutputOffset, strconv.FormatInt(off, 10))
	w.Header().Set(client.HeaderOutputLength, strconv.FormatInt(n, 10))
	w.Header().Set(client.HeaderOutputComplete, strconv.FormatBool(complete))
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	w.Write(data)
}

func (h *Hub) cancel(w http.ResponseWriter, r *http.Request, body []byte) {
	var req client.CancelRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeErr(w, 400, client.CodeInvalid, "bad cancel")
		return
	}
	h.Mu.Lock()
	defer h.Mu.Unlock()
	j := h.Jobs[r.PathValue("id")]
	if j == nil {
		writeErr(w, 404, client.CodeNotFound, "no such job")
		return
	}
	j.Cancels = append(j.Cancels, req.Mode)
	if j.View.State != client.JobFinished {
		if j.View.Cancel != client.CancelImmediate {
			j.View.Cancel = req.Mode
		}
		j.View.Revision++
		if h.CancelEnds {
			h.finishLocked(j, &client.JobResult{Failure: client.FailureCanceled})
		}
	}
	h.changedLocked()
	writeJSON(w, http.StatusAccepted, j.View)
}

func (h *Hub) settle(w http.ResponseWriter, r *http.Request, _ []byte) {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	j := h.Jobs[r.PathValue("id")]
	if j == nil {
		writeErr(w, 404, client.CodeNotFound, "no such job")
		return
	}
	if j.View.State != client.JobFinished {
		writeErr(w, 409, client.CodeConflict, "not finished")
		return
	}
	j.Settled++
	h.changedLocked()
	w.WriteHeader(http.StatusNoContent)
}

func (h *Hub) finishLocked(j *Job, res *client.JobResult) {
	res.OutputLen = int64(len(j.Output))
	j.View.State, j.View.Result = client.JobFinished, res
	j.View.Revision++
}

// Test-side controls: the test plays the node.

// WaitFor waits until cond (called under the hub's lock) holds.
func (h *Hub) WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		h.Mu.Lock()
		ok := cond()
		ch := h.change
		h.Mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		h.waitChange(t.Context(), ch, time.Until(deadline))
	}
}

// OnlyJob returns the single job's ID, waiting for it.
func (h *Hub) OnlyJob(t testing.TB) string {
	t.Helper()
	var id string
	h.WaitFor(t, "a submitted job", func() bool {
		for k := range h.Jobs {
			id = k
		}
		return len(h.Jobs) == 1
	})
	return id
}

// AppendOutput appends b to job id's output, as a node streams it.
func (h *Hub) AppendOutput(id string, b []byte) {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	j := h.Jobs[id]
	j.Output = append(j.Output, b...)
	h.changedLocked()
}

// SetRunning marks job id accepted by its node.
func (h *Hub) SetRunning(id string) {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	j := h.Jobs[id]
	j.View.State, j.View.Node = client.JobRunning, "node-1"
	j.View.Revision++
	h.changedLocked()
}

// Finish ends job id with res.
func (h *Hub) Finish(id string, res client.JobResult) {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	h.finishLocked(h.Jobs[id], &res)
	h.changedLocked()
}

// Job returns a copy of job id.
func (h *Hub) Job(id string) Job {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	j := *h.Jobs[id]
	j.Output = append([]byte(nil), j.Output...)
	j.Cancels = append([]client.CancelMode(nil), j.Cancels...)
	return j
}
