package hub

import (
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/vk-ci/vk/hub/pki"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// uiBrowser is an operator's browser: TLS pinned to the hub's CA, cookies
// kept, redirects not followed (the forms answer 303).
type uiBrowser struct {
	t  *testing.T
	hc *http.Client
	// user and pass, when set, go as HTTP Basic credentials.
	user, pass string
}

func newUIBrowser(t *testing.T, h *harness) *uiBrowser {
	t.Helper()
	tcfg, err := pki.ClientConfig(h.srv.CAPEM(), "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	jar, _ := cookiejar.New(nil)
	return &uiBrowser{t: t, hc: &http.Client{Jar: jar, Transport: &http.Transport{TLSClientConfig: tcfg},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (b *uiBrowser) do(method, u string, form url.Values) (int, string) {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if b.pass != "" {
		req.SetBasicAuth(b.user, b.pass)
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

var formRE = regexp.MustCompile(`(?s)<form[^>]*action="([^"]+)"[^>]*>\s*<input type="hidden" name="csrf" value="([^"]+)">`)

// approveVia GETs page, finds the form posting to an action ending in
// suffix, and submits it with state=approved.
func (b *uiBrowser) approveVia(page, suffix string) {
	b.t.Helper()
	code, body := b.do("GET", page, nil)
	if code != http.StatusOK {
		b.t.Fatalf("GET %s = %d", page, code)
	}
	for _, m := range formRE.FindAllStringSubmatch(body, -1) {
		action := html.UnescapeString(m[1])
		if !strings.HasSuffix(action, suffix) {
			continue
		}
		u, _ := url.Parse(page)
		ref, _ := url.Parse(action)
		code, _ := b.do("POST", u.ResolveReference(ref).String(), url.Values{"csrf": {html.UnescapeString(m[2])}, "state": {"approved"}})
		if code != http.StatusSeeOther {
			b.t.Fatalf("POST %s = %d, want 303", action, code)
		}
		return
	}
	b.t.Fatalf("page %s has no form posting to …%s:\n%s", page, suffix, body)
}

// with [ui] addr set, the hub serves its web UI on
// its own TLS listener; approval_url points there by default; approving
// the pending server and then the pending project through the UI's forms
// changes what the relay is told and what the hub accepts.
//
// spec: OPS-06, API-56
func TestUIApprovesEndToEnd(t *testing.T) {
	h := newHarness(t)
	h.cfg.Approvals.Required = true
	h.cfg.UI.Addr = "127.0.0.1:0"
	h.restart()
	base := h.srv.UIURL()
	if base != "https://"+h.srv.UIAddr() || !strings.HasPrefix(base, "https://127.0.0.1:") {
		t.Fatalf("UI URL = %q (addr %q)", base, h.srv.UIAddr())
	}
	ctx := t.Context()
	d := h.srv.Driver()
	if err := d.RelayConnected(ctx, h.relay, h.rsend); err != nil {
		t.Fatal(err)
	}
	rep := &client.RelayReport{GitLabURL: "https://gitlab.example.com", Runners: []client.RunnerReport{
		{Name: "r1", Placement: testPlacement, RequestConcurrency: 1}, {Name: "r2", Placement: testPlacement, RequestConcurrency: 1}}}
	if err := d.RelayFrame(ctx, h.relay, rep); err != nil {
		t.Fatal(err)
	}
	st := (<-h.rsend.frames).(*client.ServerStatus)
	if st.Status != client.ApprovalPending || st.ApprovalURL != base+"/gitlab" {
		t.Fatalf("server status = %+v, want pending at %s/gitlab", st, base)
	}

	b := newUIBrowser(t, h)
	if code, body := b.do("GET", base+"/", nil); code != http.StatusOK || !strings.Contains(body, "<html") {
		t.Fatalf("fleet page = %d %.200s", code, body)
	}
	b.approveVia(st.ApprovalURL, "/gitlab/gitlab.example.com/approval")
	if st := (<-h.rsend.frames).(*client.ServerStatus); st.Status != client.ApprovalApproved {
		t.Fatalf("server status after the UI approval = %+v", st)
	}

	h.heartbeat(nil, nil)
	h.nodeUp(dispatch.Held{})
	g := h.claimed()
	h.want(http.StatusNoContent, nil, "POST", "/v1/reservations/"+g.Admission+"/outcome", client.OutcomeRequest{Admission: g.Admission, Outcome: client.OutcomeJob})
	e := h.wantErr(http.StatusForbidden, client.CodeApprovalPending, "POST", "/v1/jobs", submission(g, 61))
	if want := base + "/gitlab/gitlab.example.com/projects/42"; e.ApprovalURL != want {
		t.Fatalf("approval_url = %q, want %q", e.ApprovalURL, want)
	}
	expectFrame[dispatch.Release](h)
	b.approveVia(e.ApprovalURL, "/gitlab/gitlab.example.com/projects/42/approval")
	g2 := h.claimedFor("r2")
	if v := h.submitOnFor(g2, "r2", 62); v.State != client.JobStarting {
		t.Fatalf("job after the UI approved its project = %+v", v)
	}
	expectFrame[dispatch.Start](h)
	// The queue and jobs pages read the driver's state.
	for _, p := range []string{"/queue", "/jobs"} {
		if code, _ := b.do("GET", base+p, nil); code != http.StatusOK {
			t.Errorf("GET %s = %d", p, code)
		}
	}
	// The Jobs page names a job's project by its GitLab server's
	// instance, as approvals do, and the project page it links to lists
	// the job.
	_, jobs := b.do("GET", base+"/jobs", nil)
	if !strings.Contains(jobs, `href="/gitlab/gitlab.example.com/projects/42"`) {
		t.Fatalf("jobs page links no /gitlab/gitlab.example.com/projects/42:\n%s", jobs)
	}
	if code, page := b.do("GET", base+"/gitlab/gitlab.example.com/projects/42", nil); code != http.StatusOK ||
		strings.Contains(page, "No job of this project") || !strings.Contains(page, v62ID(t, h)) {
		t.Fatalf("project page = %d, without the project's job:\n%s", code, page)
	}
	// The Relays page shows the relay, its runners and their states.
	if code, page := b.do("GET", base+"/relays", nil); code != http.StatusOK || !strings.Contains(page, h.relay) ||
		!strings.Contains(page, "<td>r1</td>") || !strings.Contains(page, "polling") || !strings.Contains(page, "gitlab.example.com") {
		t.Errorf("relays page = %d:\n%s", code, page)
	}
	// A URL or a made-up instance names no page; a server the hub never
	// saw gets no Approve/Reject buttons, and a decision on it is refused.
	if code, _ := b.do("GET", base+"/gitlab/"+url.PathEscape("https://gitlab.example.com")+"/projects/42", nil); code != http.StatusNotFound {
		t.Errorf("project page of a URL = %d, want 404", code)
	}
	if code, page := b.do("GET", base+"/gitlab/other.example.com/projects/42", nil); code != http.StatusOK || strings.Contains(page, `value="approved"`) {
		t.Errorf("project page of an unseen server = %d, with an Approve button: %v", code, strings.Contains(page, `value="approved"`))
	}
}

// v62ID is the hub job ID of GitLab job 62.
func v62ID(t *testing.T, h *harness) string {
	t.Helper()
	js, err := h.srv.Store().ListJobs(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range js {
		if j.GitLabJobID == 62 {
			return j.ID
		}
	}
	t.Fatal("no hub job of GitLab job 62")
	return ""
}

// with ui.token the UI wants HTTP Basic credentials; the
// CSRF key survives a restart (a form rendered before it still posts).
//
// spec: OPS-06
func TestUIBasicAuthAndCSRFKeyPersisted(t *testing.T) {
	h := newHarness(t)
	h.cfg.UI.Addr = "127.0.0.1:0"
	h.cfg.UI.Token = "s3cret-token"
	h.restart()
	b := newUIBrowser(t, h)
	if code, _ := b.do("GET", h.srv.UIURL()+"/", nil); code != http.StatusUnauthorized {
		t.Fatalf("without credentials = %d, want 401", code)
	}
	b.user, b.pass = "alice", "s3cret-token"
	if code, _ := b.do("GET", h.srv.UIURL()+"/", nil); code != http.StatusOK {
		t.Fatalf("with credentials = %d, want 200", code)
	}
	k1, err := h.srv.Store().GetMeta(t.Context(), metaUICSRFKey)
	if err != nil || len(k1) < 32 {
		t.Fatalf("csrf key = %d bytes, %v", len(k1), err)
	}
	h.restart()
	k2, err := h.srv.Store().GetMeta(t.Context(), metaUICSRFKey)
	if err != nil || string(k1) != string(k2) {
		t.Fatalf("csrf key changed across a restart (%v)", err)
	}
}

// The [ui] table and immediate_wait_ms decode strictly and validate.
func TestUIAndImmediateWaitConfig(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, body, want string
	}{
		{"ok", "version = 1\nimmediate_wait_ms = 0\n[ui]\naddr = \"127.0.0.1:9443\"\ntoken = \"t\"\nuser = \"ops\"\n", ""},
		{"user without token", "version = 1\n[ui]\naddr = \"127.0.0.1:9443\"\nuser = \"ops\"\n", "ui.user needs ui.token"},
		{"bad addr", "version = 1\n[ui]\naddr = \"nope\"\n", "ui.addr"},
		{"wait too long", "version = 1\nimmediate_wait_ms = 9000\n", "immediate_wait_ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := dir + "/" + strings.ReplaceAll(tc.name, " ", "_") + ".toml"
			if err := writeFile(p, tc.body); err != nil {
				t.Fatal(err)
			}
			c, err := LoadConfig(p)
			if err == nil {
				err = c.Validate()
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want == "" && (c.UI.Addr != "127.0.0.1:9443" || c.UI.Token != "t" || c.UI.User != "ops" || c.ImmediateWaitMillis != 0):
				t.Fatalf("loaded %+v", c)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error = %v, want %q", err, tc.want)
			}
		})
	}
	if DefaultConfig().ImmediateWaitMillis != 1000 || DefaultConfig().UI.Addr != "" {
		t.Fatal("defaults: immediate_wait_ms 1000 and the UI off")
	}
}

func writeFile(p, body string) error { return os.WriteFile(p, []byte(body), 0o600) }
