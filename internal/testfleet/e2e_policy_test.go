package testfleet_test

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub"
	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/testfleet"
	"github.com/vk-ci/vk/internal/testfleet/fleettest"
	"github.com/vk-ci/vk/proto/client"
)

// lastLines returns the last n non-empty lines of a trace, each without
// the node's or relay's timestamp prefix and ANSI colour codes.
func lastLines(trace []byte, n int) []string {
	var out []string
	for _, l := range strings.Split(string(trace), "\n") {
		l = stripANSI(l)
		if f := strings.SplitN(l, " ", 3); len(f) == 3 && strings.HasSuffix(f[0], "Z") && len(f[1]) >= 3 {
			l = f[2]
		}
		if strings.TrimSpace(l) != "" {
			out = append(out, strings.TrimSpace(l))
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return out
}

func stripANSI(s string) string { return fleettest.StripANSI(s) }

// TestApprovalPending runs a job of a project the hub's operator has not
// approved (its GitLab server is approved): the relay fails it uncommitted
// as runner_configuration_error, its trace ending in the instructions and
// the link (the UI page, or without a UI the hub's URL). Once the operator
// approves the project, a new pipeline runs.
//
// spec: FAIL-20, FAIL-21, FAIL-22, API-49, API-56, OPS-06
func TestApprovalPending(t *testing.T) {
	for _, tc := range []struct{ name, ui string }{
		{"with UI", "https://hub.example.test"},
		{"without UI", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t, testfleet.Options{Approvals: true, Hub: func(c *hub.Config) { c.UIURL = tc.ui }})
			tn := f.Tenants()[0]
			ctx := timeout(t, time.Minute)
			pl, err := tn.CreatePipeline("acme/unapproved", readme, oneJob("wants-approval", "echo must not run"))
			if err != nil {
				t.Fatal(err)
			}
			proj, _ := tn.Project("acme/unapproved")
			id := pl.Jobs["wants-approval"]
			ji, err := tn.WaitState(ctx, id, gitlabfake.StateFailed, gitlabfake.StateSuccess)
			if err != nil {
				t.Fatal(err)
			}
			if ji.State != gitlabfake.StateFailed || ji.FailureReason != "runner_configuration_error" {
				t.Errorf("job = %s (%q), want failed (runner_configuration_error)", ji.State, ji.FailureReason)
			}
			inst := tn.Relay.Instance()
			var wantErr, wantRetry string
			if tc.ui != "" {
				link := tc.ui + "/gitlab/" + url.PathEscape(inst) + "/projects/" + fmt.Sprint(proj.ID)
				wantErr = fmt.Sprintf("ERROR: project acme/unapproved (ID %d) is waiting for approval on the fleet hub: %s", proj.ID, link)
				wantRetry = "Retry this job once an operator has approved it there."
			} else {
				hubURL := tn.Relay.HubURL()
				wantErr = fmt.Sprintf("ERROR: project acme/unapproved (ID %d) is waiting for approval on the fleet hub %s.", proj.ID, hubURL)
				wantRetry = "Retry this job once an operator has approved it (GitLab > Pending)."
			}
			got := lastLines(ji.Trace, 2)
			if len(got) != 2 || got[0] != wantErr || got[1] != wantRetry {
				t.Errorf("trace ends with\n%q\nwant\n%q\n%q\nwhole trace:\n%s", got, wantErr, wantRetry, ji.Trace)
			}
			if bytes.Contains(ji.Trace, []byte("must not run")) {
				t.Error("the unapproved job ran")
			}
			for _, u := range ji.Updates {
				if u.State == "running" {
					t.Errorf("the refused job was committed (PUT state=running): FAIL-20 wants it failed uncommitted")
				}
			}
			// The operator approves the project; its next pipeline runs.
			if err := f.Hub().Admin().SetApproval(ctx, inst, proj.ID, store.ApprovalApproved); err != nil {
				t.Fatal(err)
			}
			pl2, err := tn.CreatePipeline("acme/unapproved", nil, oneJob("approved", "echo now it runs"))
			if err != nil {
				t.Fatal(err)
			}
			ji2, err := tn.WaitState(ctx, pl2.Jobs["approved"], gitlabfake.StateSuccess, gitlabfake.StateFailed)
			if err != nil {
				t.Fatal(err)
			}
			if ji2.State != gitlabfake.StateSuccess {
				t.Errorf("after approval: %s (%s)\n%s", ji2.State, ji2.FailureReason, ji2.Trace)
			}
		})
	}
}

// TestNoCapacity takes a job from GitLab on a reservation whose node is
// lost while the GitLab request is out (GitLab parks the request, the node
// is partitioned past job_lost_after, then GitLab answers): the hub queues
// the job (ARB-37), no node can take it, and after place_within_secs it
// ends no_capacity: failed in GitLab as runner_system_failure with the
// reason, naming the window the relay submitted, in its trace. The
// tenant's relay submits place_within_secs 5 (TenantSpec.PlaceWithinSecs,
// a test-only knob; production always sends 300, ARB-38), so this runs in
// seconds.
//
// spec: ARB-37, ARB-38, FAIL-10, GL-09 (and DECISIONS ruling 5)
func TestNoCapacity(t *testing.T) {
	const placeWithin = 5
	f := newFleet(t, testfleet.Options{JobLostAfter: 2 * time.Second,
		Tenants: []testfleet.TenantSpec{{PlaceWithinSecs: placeWithin}}})
	tn := f.Tenants()[0]
	nd := f.Nodes()[0]
	st := f.Hub().Server().Store()
	ctx := timeout(t, 2*time.Minute)
	tok := tn.GitLab.RunnerToken()
	// From now on GitLab parks every job request until hold is closed;
	// the runner is paused meanwhile so that a request already past the
	// fault cannot take the job. An admission claimed after the fault is
	// in place is one whose request GitLab parks.
	tn.GitLab.PauseRunner(tok, true)
	hold := make(chan struct{})
	tn.GitLab.InjectFault(gitlabfake.Fault{Route: gitlabfake.RouteJobRequest, Hold: hold, Count: 1 << 20})
	before := map[string]bool{}
	as, err := st.ListAdmissions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		before[a.ID] = true
	}
	pl, err := tn.CreatePipeline("acme/nocap", readme, oneJob("homeless", "echo must not run"))
	if err != nil {
		t.Fatal(err)
	}
	tn.GitLab.PauseRunner(tok, false)
	if err := waitFor(ctx, "an admission claimed with its job request parked", func() (bool, error) {
		as, err := st.ListAdmissions(ctx)
		for _, a := range as {
			if !before[a.ID] {
				return true, nil
			}
		}
		return false, err
	}); err != nil {
		t.Fatal(err)
	}
	// Lose the node while the request is out: past job_lost_after the hub
	// ends its reservations; then GitLab answers with the job.
	nd.Partition()
	if err := nd.WaitHubState(ctx, func(n admin.Node) bool { return n.State != "ready" && n.Reservations == 0 }); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	close(hold)
	id := pl.Jobs["homeless"]
	ji, err := tn.WaitState(ctx, id, gitlabfake.StateFailed, gitlabfake.StateSuccess)
	if err != nil {
		t.Fatal(err)
	}
	if ji.State != gitlabfake.StateFailed || ji.FailureReason != "runner_system_failure" {
		t.Errorf("homeless = %s (%q), want failed (runner_system_failure)", ji.State, ji.FailureReason)
	}
	// The hub waited the window out: the job was submitted after its
	// request was let go, and failed in GitLab no sooner than
	// place_within_secs on.
	var failedAt time.Time
	for _, rq := range tn.GitLab.RequestsTo(gitlabfake.RouteUpdateJob) {
		if bytes.Contains(rq.Body, []byte(`"state":"failed"`)) && failedAt.IsZero() {
			failedAt = rq.At
		}
	}
	if waited := failedAt.Sub(released); failedAt.IsZero() || waited < placeWithin*time.Second {
		t.Errorf("job failed %v after its request was answered (final update at %v), before the %d s window ran out", waited, failedAt, placeWithin)
	}
	// The hub's record (written behind its in-memory state) says why.
	hj, err := tn.WaitHubJob(ctx, id, func(j store.Job) bool { return len(j.Result) > 0 })
	if err != nil || !bytes.Contains(hj.Result, []byte(string(client.FailureNoCapacity))) {
		t.Errorf("hub job %s result %s (%v), want it ended no_capacity", hj.ID, hj.Result, err)
	}
	// The relay's words for no_capacity (TRACE-07): why and what it asked.
	want := fmt.Sprintf("no node of the fleet could take this job within %d s (pool %s", placeWithin, testfleet.Pool)
	if !bytes.Contains(ji.Trace, []byte(want)) {
		t.Errorf("trace does not give the no-capacity reason %q:\n%s", want, ji.Trace)
	}
	if bytes.Contains(ji.Trace, []byte("must not run")) {
		t.Error("the homeless job ran")
	}
}

// waitFor polls cond every 20 ms until it holds or ctx ends: the hub's
// store has no watch.
func waitFor(ctx context.Context, what string, cond func() (bool, error)) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s (last error %v): %w", what, err, ctx.Err())
		case <-tick.C:
		}
	}
}
