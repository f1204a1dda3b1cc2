package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/hub/store/memstore"
	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/sched"
)

// t0 is the fixed time of every test.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// testKey is the fixed CSRF key of the tests.
var testKey = bytes.Repeat([]byte("k"), 32)

// fixedSession is a well-formed session cookie value for golden pages.
const fixedSession = "AAAAAAAAAAAAAAAAAAAAAAAA"

// hostile is a name no page may render as markup.
const hostile = `<script>alert("x")</script>`

// env is one UI under test with its fake backend, store and clock.
type env struct {
	t    testing.TB
	h    http.Handler
	be   *fakeBackend
	st   *memstore.Store
	clk  *clock.Fake
	base string
}

type envOpt func(*Config)

// newEnv builds a UI over the standard fixture: three nodes (one with a
// hostile label), a queue of a ticket and a job, two jobs, and approvals
// pending for a server and a project.
func newEnv(t testing.TB, opts ...envOpt) *env {
	t.Helper()
	clk := clock.NewFake(t0)
	estimate340 := int64(340)
	be := &fakeBackend{
		nodes: []admin.Node{
			{ID: "n2", Name: "build-2", State: "draining", Pools: []string{"linux"}, Labels: []string{"docker"}, Ceiling: 2, MaxConcurrency: 8,
				Jobs: 1, Capacity: client.Envelope{CPUs: 8, Mem: 32 * client.GiB, Disk: 200 * client.GiB}, LastSeen: t0.Add(-2 * time.Second)},
			{ID: "n1", Name: "build-1", State: "ready", Pools: []string{"linux", "fast"}, Labels: []string{"ssd", "docker"}, Ceiling: admin.NoCeiling, MaxConcurrency: 8,
				Jobs: 3, Reservations: 1, Capacity: client.Envelope{CPUs: 16, Mem: 64 * client.GiB, Disk: 500 * client.GiB}, LastSeen: t0.Add(-4 * time.Second)},
			{ID: "n3", Name: "<b>evil</b>", State: "unreachable", Labels: []string{hostile}, Ceiling: 0,
				Capacity: client.Envelope{CPUs: 4, Mem: 8 * client.GiB, Disk: 50 * client.GiB}},
		},
		queue: []Waiting{
			{Kind: WaitTicket, ID: "t-1", Tenant: "acme", Relay: "relay-a", Runner: "docker", Placement: "linux", Class: "normal",
				Since: t0.Add(-75 * time.Second), Reason: sched.Reason{Code: sched.ReasonTenantCap, N: 20}.Text()},
			{Kind: WaitJob, ID: "j-9", Tenant: "", Relay: "relay-a", Runner: "docker", Instance: "gitlab.example.com", Project: 12,
				Placement: "linux", Class: "production", Since: t0.Add(-3 * time.Second), Reason: sched.Reason{Code: sched.ReasonNoRoom}.Text(),
				Ahead: 1, Competing: 4, EstimatedSecs: &estimate340},
			{Kind: WaitTicket, ID: "t-2", Tenant: hostile, Class: "probe", Reason: hostile},
		},
		jobs: []JobRow{
			{ID: "j-2", State: store.JobRunning, Node: "n1", Stage: "step_script", Tenant: "acme", Instance: "gitlab.example.com", Project: 12,
				GitLabJob: 4711, Created: t0.Add(-90 * time.Second), Runtime: 90 * time.Second},
			{ID: "j-1", State: store.JobFinished, Node: "n2", Tenant: "acme", Instance: "gitlab.example.com", Project: 7,
				GitLabJob: 4700, Created: t0.Add(-time.Hour), Runtime: 5 * time.Minute, Failure: "script", Message: "exit code 1"},
		},
		outputs: map[string][]byte{"j-2": []byte("\x1b[32;1mRunning with vk\x1b[0;m\r\n$ echo " + hostile + "\n" + hostile + "\nprogress 10%\rprogress 100%\n")},
		policy: admin.Policy{ProbeLimit: 2, Tenants: map[string]admin.Tenant{
			"acme": {Weight: 3, Cap: 20, Relays: []string{"relay-a"}},
			"beta": {Relays: []string{"relay-b"}},
		}},
	}
	st := memstore.New()
	ctx := context.Background()
	for _, a := range []store.Approval{
		{Instance: "gitlab.example.com", Project: 0, Path: "https://gitlab.example.com", State: store.ApprovalPending, Updated: t0.Add(-time.Hour)},
		{Instance: "gitlab.example.com", Project: 12, Path: "acme/web", State: store.ApprovalPending, Updated: t0.Add(-time.Minute)},
		{Instance: "old.example.com", Project: 0, Path: "https://old.example.com", State: store.ApprovalApproved, By: "alice", Updated: t0.Add(-48 * time.Hour)},
	} {
		if err := st.PutApproval(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	res, _ := json.Marshal(client.JobResult{Failure: client.FailureScript, Message: "exit code 1"})
	for _, j := range []store.Job{
		{ID: "j-2", Principal: "relay-a", Runner: "docker", Tenant: "acme", Instance: "gitlab.example.com", Project: 12, GitLabJobID: 4711,
			State: store.JobRunning, Node: "n1", Stage: "step_script", OutputLen: 200, Created: t0.Add(-90 * time.Second), Updated: t0.Add(-10 * time.Second)},
		{ID: "j-1", Principal: "relay-a", Tenant: "acme", Instance: "gitlab.example.com", Project: 7, State: store.JobFinished, Node: "n2",
			Result: res, Created: t0.Add(-time.Hour), Updated: t0.Add(-55 * time.Minute)},
		{ID: "j-9", Principal: "relay-a", Runner: "docker", Instance: "gitlab.example.com", Project: 12, State: store.JobQueued,
			Created: t0.Add(-3 * time.Second), Updated: t0.Add(-3 * time.Second)},
	} {
		if err := st.CreateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	cfg := Config{Backend: be, Store: st, Log: testlog.New(t), Clock: clk, CSRFKey: testKey, Operators: LoopbackOnly{Operator: "alice"}}
	for _, o := range opts {
		o(&cfg)
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, h: h, be: be, st: st, clk: clk, base: cfg.BasePath}
}

// do serves one request from loopback with the given cookies.
func (e *env) do(method, path string, body url.Values, cookies ...*http.Cookie) *http.Response {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		rd = strings.NewReader(body.Encode())
	}
	r := httptest.NewRequest(method, path, rd)
	r.RemoteAddr = "127.0.0.1:40000"
	if body != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for _, c := range cookies {
		r.AddCookie(c)
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	return w.Result()
}

// get fetches a page, failing the test unless it answers want.
func (e *env) get(path string, want int, cookies ...*http.Cookie) (string, *http.Response) {
	e.t.Helper()
	resp := e.do("GET", path, nil, cookies...)
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		e.t.Fatalf("GET %s = %d, want %d\n%s", path, resp.StatusCode, want, b)
	}
	return string(b), resp
}

// session returns the session cookie a response set.
func sessionOf(t testing.TB, resp *http.Response) *http.Cookie {
	t.Helper()
	for _, c := range resp.Cookies() {
		if c.Name == sessionCookie {
			return c
		}
	}
	t.Fatalf("no %s cookie set", sessionCookie)
	return nil
}

// formToken finds the CSRF token of the first form posting to action in
// page, as a browser would submit it.
func formToken(t testing.TB, page, action string) string {
	t.Helper()
	re := regexp.MustCompile(`action="` + regexp.QuoteMeta(html.EscapeString(action)) + `"[^>]*>\s*<input type="hidden" name="csrf" value="([^"]+)"`)
	m := re.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no form posting to %s on the page", action)
	}
	return html.UnescapeString(m[1])
}

// submit loads page like a browser, then posts the form to action with
// its token, cookie and the fields; it returns the response.
func (e *env) submit(page, action string, fields url.Values) *http.Response {
	e.t.Helper()
	body, resp := e.get(page, http.StatusOK)
	c := sessionOf(e.t, resp)
	if fields == nil {
		fields = url.Values{}
	}
	fields.Set(csrfField, formToken(e.t, body, action))
	return e.do("POST", action, fields, c)
}

// audit returns the store's audit log, oldest first.
func (e *env) audit() []store.AuditEntry {
	e.t.Helper()
	es, err := e.st.ListAudit(context.Background(), 0)
	if err != nil {
		e.t.Fatal(err)
	}
	for i, j := 0, len(es)-1; i < j; i, j = i+1, j-1 {
		es[i], es[j] = es[j], es[i]
	}
	return es
}
