package ui

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"strings"
	"testing"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/job"
)

// spec: OPS-01, OPS-02, OPS-06, API-56
func TestPages(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name   string
		path   string
		status int
		want   []string
	}{
		{"fleet", "/", 200, []string{"<title>Fleet · vk hub</title>", `href="/nodes/n1"`, "build-1", "ready", "fast, linux",
			"16 CPU · 64G mem · 500G disk", "4 / 8", "draining", "1 / 2", "3 nodes", `action="/nodes/n1/pools"`,
			`action="/nodes/n1/ceiling"`, `action="/nodes/n1/drain"`, "End drain", "4s ago"}},
		{"node", "/nodes/n1", 200, []string{"Node n1", "ready", `href="/jobs/j-2"`, "Set pools", "Set ceiling", `value="none"`, `value="fast,linux"`, "Drain"}},
		{"node missing", "/nodes/nope", 404, []string{"Not found", "nope"}},
		{"queue", "/queue", 200, []string{"waiting: tenant cap 20 reached", "waiting: no ready node of the placement has room",
			"acme", "normal", "production", "1m15s ago", "2 of 4", "~5m40s", `href="/jobs/j-9"`, `href="/gitlab/gitlab.example.com/projects/12"`, "3 waiting"}},
		{"jobs", "/jobs", 200, []string{`href="/jobs/j-2"`, "running", "step_script", "1m30s", "script", "exit code 1", "4711"}},
		{"jobs bad limit", "/jobs?limit=x", 400, []string{"limit"}},
		{"job", "/jobs/j-2", 200, []string{"Job j-2", "running", "Running with vk", "progress 100%", `href="/nodes/n1"`}},
		{"job queued", "/jobs/j-9", 200, []string{"Job j-9", "Waiting", "no ready node of the placement has room", "position 2 of 4", "class production", "estimated wait ~5m40s"}},
		{"job finished", "/jobs/j-1", 200, []string{"script", "exit code 1", "No output is kept"}},
		{"job missing", "/jobs/nope", 404, []string{"Not found"}},
		{"servers", "/gitlab", 200, []string{"GitLab › Servers", "Pending approval", "https://gitlab.example.com",
			`action="/gitlab/gitlab.example.com/approval"`, "Approve", "Reject", "old.example.com", "alice",
			`href="/gitlab/gitlab.example.com/projects/12"`, "acme/web"}},
		{"project", "/gitlab/gitlab.example.com/projects/12", 200, []string{"Project acme/web", "pending",
			`action="/gitlab/gitlab.example.com/projects/12/approval"`, "j-9", "waiting: no ready node", `href="/jobs/j-2"`}},
		{"project unseen", "/gitlab/gitlab.example.com/projects/99", 200, []string{"not seen yet", "Approve", "Reject"}},
		{"project zero", "/gitlab/gitlab.example.com/projects/0", 404, nil},
		{"project not a number", "/gitlab/gitlab.example.com/projects/x", 404, nil},
		{"policy", "/policy", 200, []string{"Read-only", "acme", "relay-a", "probe_limit = 2", "weight = 3", "none"}},
		{"audit", "/audit", 200, []string{"The audit log is empty."}},
		{"css", "/static/ui.css", 200, []string{"--accent"}},
		{"unknown", "/nope", 404, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, resp := e.get(tc.path, tc.status)
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("GET %s lacks %q", tc.path, w)
				}
			}
			if got := resp.Header.Get("Content-Security-Policy"); !strings.Contains(got, "default-src 'none'") {
				t.Errorf("GET %s: Content-Security-Policy %q", tc.path, got)
			}
			if tc.path != "/static/ui.css" && strings.Contains(body, "<script") {
				t.Errorf("GET %s has a script element", tc.path)
			}
		})
	}
}

// A hostile node label, name, tenant, wait reason, project path, audit
// detail or job output is shown as text, never as markup.
func TestHostileNamesEscaped(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.st.PutApproval(ctx, store.Approval{Instance: "gitlab.example.com", Project: 13, Path: hostile, State: store.ApprovalPending})
	e.st.AppendAudit(ctx, store.AuditEntry{Time: t0, Actor: hostile, Action: "x", Subject: hostile, Detail: hostile})
	for _, path := range []string{"/", "/nodes/n3", "/queue", "/jobs/j-2", "/gitlab", "/gitlab/gitlab.example.com/projects/13", "/audit"} {
		body, _ := e.get(path, http.StatusOK)
		if strings.Contains(body, "<script") || strings.Contains(body, "<b>evil") {
			t.Errorf("GET %s renders hostile markup", path)
		}
		if !strings.Contains(body, "&lt;script&gt;") && !strings.Contains(body, "&lt;b&gt;evil") {
			t.Errorf("GET %s does not show the hostile name escaped", path)
		}
	}
}

// Backend and store failures become error pages: their sentinels map to
// 404/400, anything else to 500 without the error's text.
func TestErrorMapping(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		status int
	}{
		{"not found", admin.ErrNotFound, 404},
		{"invalid", admin.ErrInvalid, 400},
		{"internal", errors.New("secret internals"), 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.be.fail = map[string]error{"Nodes": tc.err}
			body, _ := e.get("/", tc.status)
			if tc.status == 500 && strings.Contains(body, "secret internals") {
				t.Errorf("500 page leaks the error: %s", body)
			}
		})
	}
}

// The UI under a base path serves and links everything under it, and
// API-56's approval_url of a project (<ui_url>/gitlab/<instance>/projects/<id>)
// and of a server (<ui_url>/gitlab) are pages of it.
// spec: API-56
func TestBasePath(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.BasePath = "/ui" })
	body, _ := e.get("/ui/", http.StatusOK)
	for _, w := range []string{`href="/ui/static/ui.css"`, `href="/ui/queue"`, `href="/ui/nodes/n1"`, `action="/ui/nodes/n1/pools"`} {
		if !strings.Contains(body, w) {
			t.Errorf("/ui/ lacks %q", w)
		}
	}
	e.get("/ui/gitlab", http.StatusOK)
	e.get("/ui/gitlab/gitlab.example.com/projects/12", http.StatusOK)
	e.get("/", http.StatusNotFound)
	resp := e.do("GET", "/ui", nil)
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("GET /ui = %d %q, want 301 /ui/", resp.StatusCode, resp.Header.Get("Location"))
	}
	// A POST redirects under the base path too.
	resp = e.submit("/ui/nodes/n1", "/ui/nodes/n1/ceiling", map[string][]string{"ceiling": {"3"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/nodes/n1?done=ceiling" {
		t.Errorf("POST ceiling = %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	be, st := &fakeBackend{}, &struct{ store.Store }{}
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no backend", Config{Store: st, Operators: LoopbackOnly{}}},
		{"no store", Config{Backend: be, Operators: LoopbackOnly{}}},
		{"no auth", Config{Backend: be, Store: st}},
		{"trailing slash", Config{Backend: be, Store: st, Operators: LoopbackOnly{}, BasePath: "/ui/"}},
		{"relative", Config{Backend: be, Store: st, Operators: LoopbackOnly{}, BasePath: "ui"}},
		{"short key", Config{Backend: be, Store: st, Operators: LoopbackOnly{}, CSRFKey: []byte("short")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg); !errors.Is(err, ErrConfig) {
				t.Errorf("New = %v, want ErrConfig", err)
			}
		})
	}
	if _, err := New(Config{Backend: be, Store: st, Operators: LoopbackOnly{}, BasePath: "/ui"}); err != nil {
		t.Errorf("New with a random key: %v", err)
	}
}

func TestJobOutputTail(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.OutputTail = 16 })
	body, _ := e.get("/jobs/j-2", http.StatusOK)
	if !strings.Contains(body, "progress 100%") || strings.Contains(body, "Running with vk") {
		t.Errorf("job page does not show just the 16-byte tail:\n%s", body)
	}
	if !strings.Contains(body, "last part of 200 bytes") {
		t.Errorf("job page does not say the output is cut")
	}
	e.be.fail = map[string]error{"JobOutputTail": errors.New("disk gone")}
	body, _ = e.get("/jobs/j-2", http.StatusOK)
	if !strings.Contains(body, "could not be read") {
		t.Errorf("job page hides an output read failure")
	}
}

func TestRowFromJob(t *testing.T) {
	for _, tc := range []struct {
		name string
		job  store.Job
		want JobRow
	}{
		{"running", store.Job{ID: "a", State: store.JobRunning, Created: t0.Add(-time90), Updated: t0.Add(-10e9)},
			JobRow{ID: "a", State: store.JobRunning, Created: t0.Add(-time90), Updated: t0.Add(-10e9), Runtime: time90}},
		{"finished", store.Job{ID: "b", State: store.JobFinished, Created: t0.Add(-time90), Updated: t0.Add(-30e9), Result: []byte(`{"failure":"timeout","message":"late","output_len":0}`)},
			JobRow{ID: "b", State: store.JobFinished, Created: t0.Add(-time90), Updated: t0.Add(-30e9), Runtime: time90 - 30e9, Failure: "timeout", Message: "late"}},
		{"unknown failure", store.Job{ID: "c", State: store.JobFinished, Result: []byte(`{"failure":"martian","output_len":0}`)},
			JobRow{ID: "c", State: store.JobFinished, Failure: "other"}},
		{"garbled result", store.Job{ID: "d", State: store.JobFinished, Result: []byte(`{`)},
			JobRow{ID: "d", State: store.JobFinished, Failure: "other"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := RowFromJob(tc.job, t0); got != tc.want {
				t.Errorf("RowFromJob = %+v, want %+v", got, tc.want)
			}
		})
	}
}

const time90 = 90e9

// The UI works offline: no template or stylesheet names an external
// asset, and no page carries a script.
func TestNoExternalAssets(t *testing.T) {
	err := fs.WalkDir(assets, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(assets, p)
		if err != nil {
			return err
		}
		s := strings.ToLower(string(b))
		for _, bad := range []string{"http://", "https://", "//cdn", "<script", "@import", "javascript:"} {
			if strings.Contains(s, bad) {
				t.Errorf("%s contains %q", p, bad)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A job row names the job as GitLab does (name, stage, pipeline,
// project path, from the stored spec), its placement as text, and its
// result as success or failed.
func TestRowFromJobNamesTheJob(t *testing.T) {
	spec, _ := json.Marshal(job.NewGitLabCI(&job.CiJob{Job: job.JobInfo{ID: 7, Name: "test:unit", Stage: "test", PipelineID: 41, ProjectID: 3, ProjectPath: "acme/web"}}))
	pl, _ := json.Marshal(client.Placement{Pool: "linux", Labels: []string{"ssd"}, Envelope: client.Envelope{Mem: 2 * client.GiB, CPUs: 2, Disk: 10 * client.GiB}})
	row := RowFromJob(store.Job{ID: "j", State: store.JobFinished, Spec: spec, Placement: string(pl)}, t0)
	if row.Name != "test:unit" || row.CIStage != "test" || row.Pipeline != 41 || row.ProjectPath != "acme/web" {
		t.Errorf("row = %+v", row)
	}
	if want := "linux [ssd] " + (client.Envelope{Mem: 2 * client.GiB, CPUs: 2, Disk: 10 * client.GiB}).String(); row.Placement != want || strings.Contains(row.Placement, "{") {
		t.Errorf("placement = %q, want %q", row.Placement, want)
	}
	for _, tc := range []struct {
		row  JobRow
		want string
	}{
		{JobRow{State: store.JobFinished}, "success"},
		{JobRow{State: store.JobFinished, Failure: "script_failure"}, "failed"},
		{JobRow{State: store.JobRunning, Stage: "cleanup_file_variables"}, "running"},
	} {
		if got := tc.row.Result(); got != tc.want {
			t.Errorf("Result(%+v) = %q, want %q", tc.row, got, tc.want)
		}
	}
}

// The Relays page lists each relay's session and runners, a runner whose
// token GitLab refused standing out.
func TestRelaysPage(t *testing.T) {
	e := newEnv(t)
	e.be.mu.Lock()
	e.be.relays = []RelayRow{
		{ID: "relay-a", Name: "gl-1", Connected: true, GitLab: "https://gitlab.example.com", Release: "0.4.1", Host: "relay1",
			Runners: []RunnerRow{
				{Name: "linux", Tenant: "web", Placement: "linux mem=2G cpus=2 disk=10G", RequestConcurrency: 2, TokenAccepted: true, State: "polling"},
				{Name: "old", RequestConcurrency: 1, State: "token_refused"},
			}},
		{ID: "relay-b"},
	}
	e.be.mu.Unlock()
	body, _ := e.get("/relays", 200)
	for _, w := range []string{"<title>Relays · vk hub</title>", "relay-a", "gl-1", "connected", "https://gitlab.example.com", "0.4.1",
		"linux mem=2G cpus=2 disk=10G", "web", "polling", "refused by GitLab", "token_refused", "relay-b", "not connected", "No runner reported yet", `aria-current="page">Relays`} {
		if !strings.Contains(body, w) {
			t.Errorf("GET /relays lacks %q", w)
		}
	}
}
