package hub

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/internal/need"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// browserWidth is the window width every page must fit without a
// horizontal scroll bar.
const browserWidth = 1280

// newChromium starts Debian's headless Chromium under chromedp for one
// test, with a fresh profile and nothing that talks to the network on its
// own; the hub's self-made CA is not in the browser's trust store, so the
// loopback UI's certificate is accepted as is. It skips (fails under CI)
// without chromium.
func newChromium(t *testing.T) context.Context {
	t.Helper()
	var bin string
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		need.Missingf(t, "chromium not installed (apt-get install -y chromium): the UI browser tests need it")
	}
	home := t.TempDir()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("ignore-certificate-errors", true),
		chromedp.UserDataDir(filepath.Join(home, "profile")),
		chromedp.WindowSize(browserWidth, 800),
		chromedp.Env("HOME=" + home),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelCtx := chromedp.NewContext(actx)
	if err := chromedp.Do(bctx); err != nil { // starts the browser
		cancelCtx()
		cancelAlloc()
		t.Fatalf("starting chromium: %v", err)
	}
	// A failsafe for a wedged browser; the whole test takes well under it.
	ctx, cancelTime := context.WithTimeout(bctx, 3*time.Minute)
	t.Cleanup(func() { cancelTime(); cancelCtx(); cancelAlloc() })
	return ctx
}

// browse runs chromedp actions, failing the test on an error.
func browse(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// read runs one chromedp action that returns a value.
func read[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// overflow reports how far the page is wider than the window (0: it
// fits).
func overflow(t *testing.T, ctx context.Context) int {
	t.Helper()
	return read(t, ctx, "measure overflow", chromedp.Evaluate[int](
		`Math.max(document.documentElement.scrollWidth, document.body.scrollWidth) - document.documentElement.clientWidth`))
}

// A real hub serves its UI to headless Chromium: every page loads and
// fits 1280 px without a horizontal scroll bar; an operator approves the
// pending GitLab server and then the pending project by clicking Approve,
// drains and undrains a node, changes its ceiling and sends a relay a
// published release with the Relays page's Update button, and each click
// lands in the hub's store and driver as the admin commands would; a dry
// run of a pasted candidate policy shows the replay's report and changes
// nothing.
// VK_UI_SCREENSHOT_DIR=dir keeps a PNG of every page there as ui-<page>.png
// (docs/img holds them for docs/ui.md).
//
// spec: OPS-01, OPS-02, OPS-04, OPS-06, API-56, BS-18
func TestBrowserOperatorFlow(t *testing.T) {
	ctx := newChromium(t)
	h := newHarness(t)
	h.cfg.Approvals.Required = true
	h.cfg.UI.Addr = "127.0.0.1:0"
	h.restart()
	h.enrolNode("n1")
	base := h.srv.UIURL()
	d := h.srv.Driver()
	if err := d.RelayConnected(t.Context(), h.relay, h.rsend); err != nil {
		t.Fatal(err)
	}
	rep := &client.RelayReport{GitLabURL: "https://gitlab.example.com", Concurrent: 10, Release: "0.4.9", Allow: []string{client.RelayAllowUpdate}, Runners: []client.RunnerReport{
		{Name: "r1", Placement: testPlacement, RequestConcurrency: 1, TokenAccepted: true},
		{Name: "r2", Placement: testPlacement, RequestConcurrency: 1, TokenAccepted: true}}}
	if err := d.RelayFrame(t.Context(), h.relay, rep); err != nil {
		t.Fatal(err)
	}
	if st := (<-h.rsend.frames).(*client.ServerStatus); st.Status != client.ApprovalPending {
		t.Fatalf("server status = %+v, want pending", st)
	}
	approval := func(project int64) store.ApprovalState {
		a, err := h.srv.Store().GetApproval(t.Context(), "gitlab.example.com", project)
		if err != nil {
			t.Fatalf("approval of project %d: %v", project, err)
		}
		return a.State
	}

	// The server: one click on the Servers page.
	serverApprove := `form[action="/gitlab/gitlab.example.com/approval"] button[value="approved"]`
	browse(t, ctx, "approve the server",
		chromedp.Navigate(base+"/gitlab"),
		chromedp.WaitVisible(chromedp.CSS(serverApprove)),
		chromedp.Click(chromedp.CSS(serverApprove)),
		chromedp.WaitNotPresent(chromedp.CSS(serverApprove)))
	if s := approval(0); s != store.ApprovalApproved {
		t.Fatalf("server approval after the click = %q", s)
	}
	if st := (<-h.rsend.frames).(*client.ServerStatus); st.Status != client.ApprovalApproved {
		t.Fatalf("server status after the click = %+v", st)
	}

	// A job of project 42 is refused while the project is pending.
	h.heartbeat(nil, nil)
	h.nodeUp(dispatch.Held{})
	g := h.claimed()
	h.want(http.StatusNoContent, nil, "POST", "/v1/reservations/"+g.Admission+"/outcome", client.OutcomeRequest{Admission: g.Admission, Outcome: client.OutcomeJob})
	e := h.wantErr(http.StatusForbidden, client.CodeApprovalPending, "POST", "/v1/jobs", submission(g, 61))
	expectFrame[dispatch.Release](h)
	if approval(42) != store.ApprovalPending {
		t.Fatal("project 42 is not pending")
	}
	projectApprove := `form[action="/gitlab/gitlab.example.com/projects/42/approval"] button[value="approved"]`
	browse(t, ctx, "approve the project",
		chromedp.Navigate(e.ApprovalURL),
		chromedp.WaitVisible(chromedp.CSS(projectApprove)),
		chromedp.Click(chromedp.CSS(projectApprove)),
		chromedp.WaitNotPresent(chromedp.CSS(projectApprove)))
	if s := approval(42); s != store.ApprovalApproved {
		t.Fatalf("project approval after the click = %q", s)
	}
	g2 := h.claimedFor("r2")
	if v := h.submitOnFor(g2, "r2", 62); v.State != client.JobStarting {
		t.Fatalf("job after the project was approved = %+v", v)
	}
	expectFrame[dispatch.Start](h)

	node := func() (state string, ceiling int) {
		ns, err := d.Nodes(t.Context())
		if err != nil || len(ns) != 1 {
			t.Fatalf("nodes = %+v, %v", ns, err)
		}
		return ns[0].State, ns[0].Ceiling
	}
	// settings drains the node's frames up to its next Settings frame.
	// The timeout is a failsafe: the frame is sent before the POST that
	// caused it is answered.
	settings := func() dispatch.Settings {
		t.Helper()
		for {
			select {
			case m := <-h.node.frames:
				if s, ok := m.(dispatch.Settings); ok {
					return s
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no settings frame")
			}
		}
	}
	drain := `form[action="/nodes/n1/drain"] button`
	browse(t, ctx, "drain n1",
		chromedp.Navigate(base+"/nodes/n1"),
		chromedp.WaitVisible(chromedp.CSS(drain)),
		chromedp.Click(chromedp.CSS(drain)),
		chromedp.WaitVisible(chromedp.Search(`//form[@action="/nodes/n1/drain"]//button[text()="End drain"]`)))
	if s := settings(); !s.Drain {
		t.Errorf("settings after Drain = %+v", s)
	}
	if st, _ := node(); st != "draining" {
		t.Errorf("node state after Drain = %q", st)
	}
	browse(t, ctx, "undrain n1",
		chromedp.Click(chromedp.CSS(drain)),
		chromedp.WaitVisible(chromedp.Search(`//form[@action="/nodes/n1/drain"]//button[text()="Drain"]`)))
	if s := settings(); s.Drain {
		t.Errorf("settings after End drain = %+v", s)
	}
	if st, _ := node(); st == "draining" {
		t.Errorf("node state after End drain = %q", st)
	}
	ceiling := `form[action="/nodes/n1/ceiling"] input[name="ceiling"]`
	browse(t, ctx, "set n1's ceiling",
		chromedp.Clear(chromedp.CSS(ceiling)),
		chromedp.SendKeys(chromedp.CSS(ceiling), "3"),
		chromedp.Submit(chromedp.CSS(ceiling)),
		chromedp.WaitVisible(chromedp.Search(`//dd[text()="3"]`)))
	if s := settings(); s.Ceiling != 3 {
		t.Errorf("settings after the ceiling form = %+v", s)
	}
	if _, c := node(); c != 3 {
		t.Errorf("ceiling after the form = %d, want 3", c)
	}
	// A published release sent to the relay with the Relays page's button
	// (OPS-04).
	if _, err := admin.Dial(admin.SocketPath(h.cfg.StateDir)).PublishRelease(t.Context(), "0.5.0", "c2ln", strings.NewReader("binary")); err != nil {
		t.Fatal(err)
	}
	update := `form[action="/relays/` + h.relay + `/update"] button`
	browse(t, ctx, "update the relay",
		chromedp.Navigate(base+"/relays"),
		chromedp.WaitVisible(chromedp.CSS(update)),
		chromedp.Click(chromedp.CSS(update)),
		chromedp.WaitVisible(chromedp.Search(`//*[contains(text(), "Update sent")]`)))
	for sent := false; !sent; {
		select {
		case m := <-h.rsend.frames:
			if u, ok := m.(*client.Update); ok {
				if u.Release != "0.5.0" || u.Signature != "c2ln" {
					t.Errorf("update frame %+v", u)
				}
				sent = true
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no update frame after the Update button")
		}
	}
	browse(t, ctx, "open the audit log", chromedp.Navigate(base+"/audit"))
	audit := read(t, ctx, "read the audit log", chromedp.Text(chromedp.CSS("main")))
	for _, a := range []string{"approval.approved", "node.drain", "node.undrain", "node.ceiling", "relay.update"} {
		if !strings.Contains(audit, a) {
			t.Errorf("audit page lacks %s:\n%s", a, audit)
		}
	}

	// A dry run from the policy page: paste a candidate, see the replay's
	// report; the policy in force is untouched.
	before, err := d.Policy(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	browse(t, ctx, "dry run a candidate policy",
		chromedp.Navigate(base+"/policy"),
		chromedp.Click(chromedp.CSS(`a[href="/policy/dry-run"]`)),
		chromedp.WaitVisible(chromedp.CSS(`textarea#policy`)),
		chromedp.SetValue(chromedp.CSS(`textarea#policy`), "version = 1\nprobe_limit = 1\nbackoff_max_secs = 30\n"),
		chromedp.Click(chromedp.CSS(`form.dryrun button`)),
		chromedp.WaitVisible(chromedp.CSS(`pre.report`)))
	report := read(t, ctx, "read the dry run", chromedp.Text(chromedp.CSS("main")))
	for _, want := range []string{"Dry run: nothing changed.", "in force", "candidate against the policy in force"} {
		if !strings.Contains(report, want) {
			t.Errorf("the dry run page lacks %q:\n%s", want, report)
		}
	}
	if after, err := d.Policy(t.Context()); err != nil || after.ProbeLimit != before.ProbeLimit || after.BackoffMaxSecs != before.BackoffMaxSecs {
		t.Errorf("the policy after a dry run = %+v, %v; before %+v", after, err, before)
	}
	if o := overflow(t, ctx); o > 0 {
		t.Errorf("the dry run report: %d px wider than a %d px window", o, browserWidth)
	}
	if dir := os.Getenv("VK_UI_SCREENSHOT_DIR"); dir != "" {
		png := read(t, ctx, "shoot the dry run", chromedp.FullScreenshot(100))
		if err := os.WriteFile(filepath.Join(dir, "ui-dryrun.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// Every page loads, has its title and fits the window.
	jobID := v62ID(t, h)
	dir := os.Getenv("VK_UI_SCREENSHOT_DIR")
	for _, p := range []struct{ name, path, want string }{
		{"fleet", "/", "n1"},
		{"node", "/nodes/n1", "n1"},
		{"queue", "/queue", "Queue"},
		{"jobs", "/jobs", jobID},
		{"job", "/jobs/" + jobID, jobID},
		{"servers", "/gitlab", "gitlab.example.com"},
		{"project", "/gitlab/gitlab.example.com/projects/42", "gitlab.example.com"},
		{"relays", "/relays", h.relay},
		{"policy", "/policy", "Capacity policy"},
		{"dryrun-form", "/policy/dry-run", "Candidate policy"},
		{"audit", "/audit", "node.ceiling"},
	} {
		browse(t, ctx, "load "+p.path, chromedp.Navigate(base+p.path))
		body := read(t, ctx, "read "+p.path, chromedp.Text(chromedp.CSS("body")))
		if !strings.Contains(body, p.want) {
			t.Errorf("%s: the page lacks %q:\n%s", p.path, p.want, body)
		}
		if o := overflow(t, ctx); o > 0 {
			t.Errorf("%s: %d px wider than a %d px window", p.path, o, browserWidth)
		}
		if dir != "" {
			png := read(t, ctx, "shoot "+p.path, chromedp.FullScreenshot(100))
			if err := os.WriteFile(filepath.Join(dir, "ui-"+p.name+".png"), png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The measure sees an overflow where there is one (the style is set
	// through the CSSOM: the UI's CSP refuses inline style attributes).
	read(t, ctx, "widen the page", chromedp.Evaluate[bool](
		`const d = document.createElement("div"); d.style.width = "2000px"; d.textContent = "wide"; document.querySelector("main").append(d); true`))
	if o := overflow(t, ctx); o <= 0 {
		t.Errorf("a 2000 px element overflows by %d px: the overflow measure is broken", o)
	}
}
