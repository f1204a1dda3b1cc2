package ui

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/hub/store"
)

// The node forms call the backend with the parsed values, write the admin
// socket's audit entries and redirect (POST/redirect/GET).
// spec: OPS-01, OPS-02
func TestNodeForms(t *testing.T) {
	for _, tc := range []struct {
		name     string
		page     string
		action   string
		fields   url.Values
		call     string
		audit    store.AuditEntry
		location string
	}{
		{"pools from node page", "/nodes/n1", "/nodes/n1/pools", url.Values{"pools": {"gpu, linux,gpu"}},
			`SetPools n1 ["gpu" "linux"]`, store.AuditEntry{Action: "node.pools", Subject: "n1", Detail: "gpu,linux"}, "/nodes/n1?done=pools"},
		{"no pools", "/nodes/n1", "/nodes/n1/pools", url.Values{"pools": {""}},
			`SetPools n1 []`, store.AuditEntry{Action: "node.pools", Subject: "n1"}, "/nodes/n1?done=pools"},
		{"pools from fleet", "/", "/nodes/n2/pools", url.Values{"pools": {"a"}, "back": {"fleet"}},
			`SetPools n2 ["a"]`, store.AuditEntry{Action: "node.pools", Subject: "n2", Detail: "a"}, "/?done=pools"},
		{"ceiling", "/nodes/n1", "/nodes/n1/ceiling", url.Values{"ceiling": {" 4 "}},
			"SetCeiling n1 4", store.AuditEntry{Action: "node.ceiling", Subject: "n1", Detail: "4"}, "/nodes/n1?done=ceiling"},
		{"ceiling zero", "/", "/nodes/n1/ceiling", url.Values{"ceiling": {"0"}, "back": {"fleet"}},
			"SetCeiling n1 0", store.AuditEntry{Action: "node.ceiling", Subject: "n1", Detail: "0"}, "/?done=ceiling"},
		{"ceiling none", "/nodes/n2", "/nodes/n2/ceiling", url.Values{"ceiling": {"none"}},
			"SetCeiling n2 -1", store.AuditEntry{Action: "node.ceiling", Subject: "n2", Detail: "none"}, "/nodes/n2?done=ceiling"},
		{"drain", "/nodes/n1", "/nodes/n1/drain", url.Values{"drain": {"on"}},
			"Drain n1 true", store.AuditEntry{Action: "node.drain", Subject: "n1"}, "/nodes/n1?done=drain"},
		{"undrain", "/", "/nodes/n2/drain", url.Values{"drain": {"off"}, "back": {"fleet"}},
			"Drain n2 false", store.AuditEntry{Action: "node.undrain", Subject: "n2"}, "/?done=undrain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			resp := e.submit(tc.page, tc.action, tc.fields)
			if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != tc.location {
				t.Fatalf("POST %s = %d %q, want 303 %q", tc.action, resp.StatusCode, resp.Header.Get("Location"), tc.location)
			}
			if diff := cmp.Diff([]string{tc.call}, e.be.callLog()); diff != "" {
				t.Errorf("backend calls (-want +got):\n%s", diff)
			}
			tc.audit.Seq, tc.audit.Time, tc.audit.Actor = 1, t0, "alice"
			if diff := cmp.Diff([]store.AuditEntry{tc.audit}, e.audit()); diff != "" {
				t.Errorf("audit (-want +got):\n%s", diff)
			}
			// The page it redirects to says what was done.
			body, _ := e.get(tc.location, http.StatusOK)
			if !containsAll(body, flashes[must(url.Parse(tc.location)).Query().Get("done")]) {
				t.Errorf("GET %s does not confirm the change", tc.location)
			}
		})
	}
}

// A malformed field or a backend refusal changes nothing and writes no
// audit entry.
func TestNodeFormsRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		action string
		fields url.Values
		status int
	}{
		{"ceiling negative", "/nodes/n1/ceiling", url.Values{"ceiling": {"-2"}}, 400},
		{"ceiling word", "/nodes/n1/ceiling", url.Values{"ceiling": {"lots"}}, 400},
		{"drain maybe", "/nodes/n1/drain", url.Values{"drain": {"maybe"}}, 400},
		{"pool control char", "/nodes/n1/pools", url.Values{"pools": {"a\x01b"}}, 400},
		{"unknown node", "/nodes/zz/ceiling", url.Values{"ceiling": {"1"}}, 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			// A token for the right form: only the field (or node) is wrong.
			c := &http.Cookie{Name: sessionCookie, Value: fixedSession}
			tc.fields.Set(csrfField, tokenFor(e, c, tc.action))
			resp := e.do("POST", tc.action, tc.fields, c)
			if resp.StatusCode != tc.status {
				t.Errorf("POST %s = %d, want %d", tc.action, resp.StatusCode, tc.status)
			}
			if n := len(e.audit()); n != 0 {
				t.Errorf("%d audit entries written for a refused form", n)
			}
		})
	}
}

// tokenFor computes the token of the form posting to a node action
// (/nodes/<id>/<kind>) for operator alice.
func tokenFor(e *env, c *http.Cookie, action string) string {
	parts := strings.Split(strings.TrimPrefix(action, "/"), "/")
	s := &server{key: testKey}
	return s.csrfToken("alice", c.Value, "node."+parts[2], parts[1])
}

// Every state-changing POST without its CSRF token, with a wrong one, a
// token of another form, session or operator, or without the session
// cookie, is refused 403 and changes nothing.
func TestCSRFRefused(t *testing.T) {
	e := newEnv(t)
	body, resp := e.get("/nodes/n1", http.StatusOK)
	c := sessionOf(t, resp)
	good := formToken(t, body, "/nodes/n1/ceiling")
	other := &http.Cookie{Name: sessionCookie, Value: "BBBBBBBBBBBBBBBBBBBBBBBB"}
	s := &server{key: testKey}
	for _, tc := range []struct {
		name    string
		action  string
		token   string
		cookies []*http.Cookie
	}{
		{"no token", "/nodes/n1/ceiling", "", []*http.Cookie{c}},
		{"wrong token", "/nodes/n1/ceiling", "AAAA" + good[4:], []*http.Cookie{c}},
		{"no cookie", "/nodes/n1/ceiling", good, nil},
		{"other session", "/nodes/n1/ceiling", good, []*http.Cookie{other}},
		{"malformed cookie", "/nodes/n1/ceiling", good, []*http.Cookie{{Name: sessionCookie, Value: "x"}}},
		{"other node", "/nodes/n2/ceiling", good, []*http.Cookie{c}},
		{"other form", "/nodes/n1/drain", good, []*http.Cookie{c}},
		{"other operator", "/nodes/n1/ceiling", s.csrfToken("mallory", c.Value, formCeiling, "n1"), []*http.Cookie{c}},
		{"project approval", "/gitlab/gitlab.example.com/projects/12/approval", good, []*http.Cookie{c}},
		{"server approval", "/gitlab/gitlab.example.com/approval", good, []*http.Cookie{c}},
		{"approval of another project", "/gitlab/gitlab.example.com/projects/12/approval",
			s.csrfToken("alice", c.Value, formApproval, "gitlab.example.com", "13"), []*http.Cookie{c}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := url.Values{"ceiling": {"1"}, "drain": {"on"}, "state": {"approved"}}
			if tc.token != "" {
				f.Set(csrfField, tc.token)
			}
			resp := e.do("POST", tc.action, f, tc.cookies...)
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("POST %s = %d, want 403", tc.action, resp.StatusCode)
			}
		})
	}
	if calls := e.be.callLog(); len(calls) != 0 {
		t.Errorf("backend called despite refusals: %q", calls)
	}
	if n := len(e.audit()); n != 0 {
		t.Errorf("%d audit entries written despite refusals", n)
	}
	a, _ := e.st.GetApproval(context.Background(), "gitlab.example.com", 12)
	if a.State != store.ApprovalPending {
		t.Errorf("project approval = %s after refused posts, want pending", a.State)
	}
	// The good token still works afterwards.
	if resp := e.do("POST", "/nodes/n1/ceiling", url.Values{"ceiling": {"1"}, csrfField: {good}}, c); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("POST with the page's token = %d, want 303", resp.StatusCode)
	}
}

// Approving or rejecting a project or a server on its page stores the
// decision by the operator, writes the audit entry the admin socket
// writes, tells the hub, and redirects back.
// spec: OPS-06, API-56
func TestApprovals(t *testing.T) {
	for _, tc := range []struct {
		name     string
		page     string
		action   string
		state    store.ApprovalState
		instance string
		project  int64
		path     string
		subject  string
		location string
	}{
		{"approve project", "/gitlab/gitlab.example.com/projects/12", "/gitlab/gitlab.example.com/projects/12/approval", store.ApprovalApproved,
			"gitlab.example.com", 12, "acme/web", "gitlab.example.com/12", "/gitlab/gitlab.example.com/projects/12?done=approved"},
		{"reject project", "/gitlab/gitlab.example.com/projects/12", "/gitlab/gitlab.example.com/projects/12/approval", store.ApprovalRejected,
			"gitlab.example.com", 12, "acme/web", "gitlab.example.com/12", "/gitlab/gitlab.example.com/projects/12?done=rejected"},
		{"approve unseen project ahead", "/gitlab/gitlab.example.com/projects/99", "/gitlab/gitlab.example.com/projects/99/approval", store.ApprovalApproved,
			"gitlab.example.com", 99, "", "gitlab.example.com/99", "/gitlab/gitlab.example.com/projects/99?done=approved"},
		{"approve server", "/gitlab", "/gitlab/gitlab.example.com/approval", store.ApprovalApproved,
			"gitlab.example.com", 0, "https://gitlab.example.com", "gitlab.example.com", "/gitlab?done=approved"},
		{"reject approved server", "/gitlab", "/gitlab/old.example.com/approval", store.ApprovalRejected,
			"old.example.com", 0, "https://old.example.com", "old.example.com", "/gitlab?done=rejected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.clk.Advance(time.Minute)
			resp := e.submit(tc.page, tc.action, url.Values{"state": {string(tc.state)}})
			if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != tc.location {
				t.Fatalf("POST %s = %d %q, want 303 %q", tc.action, resp.StatusCode, resp.Header.Get("Location"), tc.location)
			}
			want := store.Approval{Instance: tc.instance, Project: tc.project, Path: tc.path, State: tc.state, By: "alice", Updated: t0.Add(time.Minute)}
			got, err := e.st.GetApproval(context.Background(), tc.instance, tc.project)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("stored approval (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]store.Approval{want}, e.be.changed); diff != "" {
				t.Errorf("ApprovalChanged (-want +got):\n%s", diff)
			}
			wantAudit := []store.AuditEntry{{Seq: 1, Time: t0.Add(time.Minute), Actor: "alice", Action: "approval." + string(tc.state), Subject: tc.subject, Detail: tc.path}}
			if diff := cmp.Diff(wantAudit, e.audit()); diff != "" {
				t.Errorf("audit (-want +got):\n%s", diff)
			}
			body, _ := e.get(tc.location, http.StatusOK)
			if !containsAll(body, flashes[string(tc.state)], string(tc.state)) {
				t.Errorf("GET %s does not show the decision", tc.location)
			}
		})
	}
}

// A decision the hub fails to apply is reported, not hidden; the stored
// decision and its audit entry stay (the admin socket behaves alike).
func TestApprovalBackendFailure(t *testing.T) {
	e := newEnv(t)
	e.be.fail = map[string]error{"ApprovalChanged": admin.ErrInvalid}
	resp := e.submit("/gitlab", "/gitlab/gitlab.example.com/approval", url.Values{"state": {"approved"}})
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("POST = %d, want 400", resp.StatusCode)
	}
	resp = e.submit("/gitlab", "/gitlab/gitlab.example.com/approval", url.Values{"state": {"maybe"}})
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("POST state=maybe = %d, want 400", resp.StatusCode)
	}
}

// containsAll reports whether s contains every sub, none of them empty.
func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if sub == "" || !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
