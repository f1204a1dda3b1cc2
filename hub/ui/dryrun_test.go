package ui

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/sim"
	"github.com/vk-ci/vk/sim/replay"
)

// dryRunScenario is two backlogged tenants named as the fixture's policy
// names them, on one small node: a trace whose dry run has something to
// show.
const dryRunScenario = `
name = "ui-dry-run"
duration = "20m"
drain = "1s"
[[nodes]]
count = 1
cpus = 8
mem_gib = 32
[[tenants]]
name = "acme"
[[tenants]]
name = "beta"
[[jobs]]
name = "build"
tenant = "acme"
cpus = 2
mem_gib = 4
per_hour = 240
runtime = { kind = "fixed", value = "1m" }
[[jobs]]
name = "test"
tenant = "beta"
cpus = 2
mem_gib = 4
per_hour = 240
runtime = { kind = "fixed", value = "1m" }
`

// traceDir is a hub trace directory holding one file: the scenario's
// run, ending 5 minutes before the test clock's t0.
func traceDir(t *testing.T) string {
	t.Helper()
	s, err := sim.ParseScenario([]byte(dryRunScenario))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	start := t0.Add(-25 * time.Minute)
	var buf bytes.Buffer
	if _, err := replay.WriteSimTrace(context.Background(), &buf, s, 1, start); err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(dir, fmt.Sprintf("trace-%015d.vktrace", start.UnixMilli()))
	if err := os.WriteFile(name, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

const candidatePolicy = `version = 1
[tenants.acme]
weight = 3
[tenants.beta]
weight = 1
`

// The policy page links the dry run; its form posts a pasted candidate
// with a CSRF token and answers the replay's report — trace, in force,
// candidate, and the deltas — while nothing changes: no backend call, no
// audit entry. Without the token, or with a bad window or policy, it is
// refused.
// spec: BS-18
func TestDryRunPage(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.TraceDir = traceDir(t) })
	body, _ := e.get("/policy", http.StatusOK)
	if !strings.Contains(body, `href="/policy/dry-run"`) {
		t.Fatalf("the policy page does not link the dry run:\n%s", body)
	}
	form, _ := e.get("/policy/dry-run", http.StatusOK)
	if !strings.Contains(form, `<textarea id="policy" name="policy"`) || !strings.Contains(form, "[tenants.acme]") {
		t.Fatalf("the dry run form lacks the policy in force to edit:\n%s", form)
	}
	resp := e.submit("/policy/dry-run", "/policy/dry-run", url.Values{"policy": {candidatePolicy}, "window": {"1h"}})
	b, _ := io.ReadAll(resp.Body)
	page := string(b)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("dry run = %d:\n%s", resp.StatusCode, page)
	}
	for _, want := range []string{"Dry run: nothing changed.", "candidate against the policy in force", "acme: share", "beta: share",
		"weight share 50.0% → 75.0%", "in force", "trace"} {
		if !strings.Contains(page, want) {
			t.Errorf("the report lacks %q:\n%s", want, page)
		}
	}
	if calls := e.be.callLog(); len(calls) > 0 {
		t.Errorf("a dry run called the backend: %v", calls)
	}
	if a := e.audit(); len(a) > 0 {
		t.Errorf("a dry run wrote the audit log: %+v", a)
	}
	// refusals
	if r := e.do("POST", "/policy/dry-run", url.Values{"policy": {candidatePolicy}, "window": {"1h"}}); r.StatusCode != http.StatusForbidden {
		t.Errorf("without a CSRF token: %d, want 403", r.StatusCode)
	}
	for _, f := range []url.Values{{"policy": {candidatePolicy}, "window": {"5y"}}, {"policy": {"version = 1\n[tenants.acme]\nweight = -1\n"}, "window": {"1h"}},
		{"policy": {"  "}, "window": {"1h"}}} {
		if r := e.submit("/policy/dry-run", "/policy/dry-run", f); r.StatusCode != http.StatusBadRequest {
			t.Errorf("%v: %d, want 400", f, r.StatusCode)
		}
	}
}

// A policy file uploaded (multipart) is the candidate, and wins over the
// pasted text.
// spec: BS-18
func TestDryRunUpload(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.TraceDir = traceDir(t) })
	form, resp := e.get("/policy/dry-run", http.StatusOK)
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	mw.WriteField(csrfField, formToken(t, form, "/policy/dry-run"))
	mw.WriteField("window", "24h")
	mw.WriteField("policy", "not a policy")
	fw, _ := mw.CreateFormFile("file", "candidate.toml")
	fw.Write([]byte(candidatePolicy))
	mw.Close()
	r := httptest.NewRequest("POST", "/policy/dry-run", &body)
	r.RemoteAddr = "127.0.0.1:40000"
	r.Header.Set("Content-Type", mw.FormDataContentType())
	r.AddCookie(sessionOf(t, resp))
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "Report: candidate.toml") ||
		!strings.Contains(w.Body.String(), "weight share 50.0% → 75.0%") {
		t.Fatalf("upload = %d:\n%s", w.Code, w.Body.String())
	}
}

// Without a trace (trace.disabled) the page says so and offers no form.
func TestDryRunWithoutTrace(t *testing.T) {
	e := newEnv(t)
	page, _ := e.get("/policy/dry-run", http.StatusOK)
	if !strings.Contains(page, "records no workload trace") || strings.Contains(page, "<textarea") {
		t.Fatalf("without a trace:\n%s", page)
	}
}
