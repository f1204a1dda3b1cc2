package relay

import (
	"context"
	"strings"
	"testing"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/realhub"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/proto/client"
)

// Run holds the hub session with the real hub (approvals.required): its
// report names the GitLab server, which the hub records pending; no GitLab
// job is asked for while the server is pending; once the operator approves
// the server, the hub takes reservations for the reported runner (name,
// placement and request_concurrency must match the report) and the job
// runs; a job held keeps running when the operator then rejects the server.
//
// spec: RSESS-01, RSESS-03, RSESS-07, RSESS-08
func TestRunSession(t *testing.T) {
	e := newRunEnvWith(t, 3600, realhub.AutoClock(t), gitlabfake.Options{}, realhub.Options{Approvals: true})
	ctx := t.Context()
	inst := strings.TrimPrefix(e.gl.URL(), "http://")
	// The project is approved up front; the server waits for the operator.
	if err := e.real.Admin().SetApproval(ctx, inst, e.proj.ID, store.ApprovalApproved); err != nil {
		t.Fatal(err)
	}
	glID := e.pipeline(t, "echo first", e.waitLine("end"), "echo done")

	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := Run(rctx, e.cfg, e.toks, testlog.New(t), Options{Clock: e.clk, Hub: e.hub}); err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })

	// The session's report reached the hub, which recorded the GitLab
	// server pending and answered pending (RSESS-01/02).
	e.real.WaitFor("the server recorded pending", func() bool {
		as, err := e.real.Admin().Projects(ctx)
		if err != nil {
			return false
		}
		for _, a := range as {
			if a.Instance == inst && a.Project == 0 && a.State == store.ApprovalPending {
				return true
			}
		}
		return false
	})
	// The pending status was sent in the same driver step as the record.
	if n := len(e.gl.RequestsTo(gitlabfake.RouteJobRequest)); n != 0 {
		t.Fatalf("%d GitLab job requests before approval", n)
	}
	if n := e.hub.Count(client.RouteClaim); n != 0 {
		t.Fatalf("%d claims before approval", n)
	}
	// `vk-hub projects approve <server>`.
	if err := e.real.Admin().SetApproval(ctx, inst, 0, store.ApprovalApproved); err != nil {
		t.Fatal(err)
	}
	id := e.hub.OnlyJob(t)
	if _, err := e.gl.WaitJobState(ctx, glID, gitlabfake.StateRunning); err != nil {
		t.Fatal(err)
	}
	// A job held keeps running whatever the status: the operator now
	// rejects the server (RSESS-08).
	if err := e.real.Admin().SetApproval(ctx, inst, 0, store.ApprovalRejected); err != nil {
		t.Fatal(err)
	}
	e.release(t, "end")
	if _, err := e.gl.WaitJobState(ctx, glID, gitlabfake.StateSuccess); err != nil {
		t.Fatal(err)
	}
	e.hub.WaitFor(t, "settle", func() bool { return e.hub.Settled[id] > 0 })
	if !containsLine(string(e.gl.Trace(glID)), "done") {
		t.Errorf("trace = %q, want the job run to its end", e.gl.Trace(glID))
	}
}
