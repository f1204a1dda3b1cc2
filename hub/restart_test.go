package hub

import (
	"encoding/base64"
	"encoding/json"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// TestRestart stops the hub without any cleanup and starts a new one on
// the same state dir: job records, outputs and offsets survive; specs and
// unclaimed reservations do not; a job no node accepted ends lost; a
// claimed admission is adopted when its node's held lists its reservation
// while an unknown reservation is released. Throughout, the job's secrets
// (a canary) reach the node's start frame and nothing else: not the store
// file, not the audit log, not the logs.
//
// spec: FAIL-19, ARB-04, ARB-40, NSESS-24, AUTH-07, API-39, DECISIONS 6
func TestRestart(t *testing.T) {
	testRestart(t, nil, func(h *harness) []byte {
		raw, err := os.ReadFile(storePath(h))
		if err != nil {
			t.Fatal(err)
		}
		return raw
	})
}

// testRestart is TestRestart on the store configure sets up (nil: the
// default bbolt file); rawStore returns everything the store holds as
// bytes, for the search for the secret.
func testRestart(t *testing.T, configure func(*Config), rawStore func(*harness) []byte) {
	h := newHarness(t, configure)
	h.relayUp(1)
	h.nodeUp(dispatch.Held{})

	// Job A: accepted by the node, output "abc".
	gA := h.claimedFor("r1")
	h.heartbeat([]string{gA.Admission}, nil)
	vA := h.submitOn(gA, 2001)
	stA := expectFrame[dispatch.Start](h)
	if stA.Spec.GitLabCI.Variables[0].Value != canary+"-var" {
		t.Fatalf("the node's start lacks the secret: %+v", stA.Spec.GitLabCI.Variables)
	}
	h.nodeSay(&dispatch.JobUpdate{Job: vA.ID, State: dispatch.JobAccepted})
	h.nodeSay(&dispatch.Output{Job: vA.ID, Offset: 0, Data: []byte("abc")})
	expectFrame[dispatch.OutputAck](h)

	// Job B: started, never accepted.
	gB := h.claimedFor("r2")
	vB := h.submitOnFor(gB, "r2", 2002)
	expectFrame[dispatch.Start](h)

	// Admission C: claimed, no outcome yet (a GitLab request is out).
	h.nodeSay(&dispatch.JobUpdate{Job: vA.ID, State: dispatch.JobRunning, Stage: "step_script"})
	gC := h.claimedFor("r1")
	// Ticket D: granted, not claimed.
	gD := h.grantFor("r1")

	h.restart()

	// Records and outputs survive; B ended lost.
	var a client.JobView
	h.want(http.StatusOK, &a, "GET", "/v1/jobs/"+vA.ID, nil)
	if a.State != client.JobRunning || a.OutputLen != 3 || a.Node != "n1" || a.Stage != "step_script" {
		t.Fatalf("job A after restart = %+v, want running on n1 with 3 bytes", a)
	}
	code, body, _ := h.call("GET", "/v1/jobs/"+vA.ID+"/output", nil)
	if code != 200 || string(body) != "abc" {
		t.Fatalf("job A output after restart = %d %q", code, body)
	}
	var b client.JobView
	h.want(http.StatusOK, &b, "GET", "/v1/jobs/"+vB.ID, nil)
	if b.State != client.JobFinished || b.Result == nil || b.Result.Failure != client.FailureLost {
		t.Fatalf("job B after restart = %+v, want finished lost", b)
	}
	// The grant D's ticket is gone (unclaimed tickets do not survive).
	h.wantErr(http.StatusGone, client.CodeReservationGone, "POST", "/v1/reservations/"+gD.Admission+"/claim", nil)

	// The node comes back holding A, C's and D's reservations.
	h.nodeUp(dispatch.Held{
		Reservations: []dispatch.HeldReservation{{Reservation: gC.Reservation, Envelope: testPlacement.Envelope, RemainingSecs: 60},
			{Reservation: gD.Reservation, Envelope: testPlacement.Envelope, RemainingSecs: 60}},
		Jobs: []dispatch.HeldJob{{Job: vA.ID, Spooled: 3}},
	})
	var sawRelease, sawAck bool
	for len(h.node.frames) > 0 {
		switch m := (<-h.node.frames).(type) {
		case dispatch.Release:
			if m.Reservation != gD.Reservation {
				t.Fatalf("released %s, want only D's %s (C's is adopted, DECISIONS 6)", m.Reservation, gD.Reservation)
			}
			sawRelease = true
		case dispatch.OutputAck:
			if m.Job != vA.ID || m.Offset != 3 {
				t.Fatalf("ack = %+v, want job A at 3", m)
			}
			sawAck = true
		case dispatch.Cancel:
			t.Fatalf("cancelled %+v, a job the hub follows", m)
		}
	}
	if !sawRelease || !sawAck {
		t.Fatalf("after held: release of D %v, ack of A %v; want both", sawRelease, sawAck)
	}

	// The relay reconnects; its first heartbeat lists C as a request:
	// C stays claimed (ARB-40) and its job goes onto the adopted
	// reservation.
	h.relayUp(1, gC.Admission)
	vC := h.submitOn(gC, 2003)
	stC := expectFrame[dispatch.Start](h)
	if stC.Reservation != gC.Reservation || stC.Job != vC.ID {
		t.Fatalf("start of C's job = %+v, want on reservation %s", stC.Redacted(), gC.Reservation)
	}

	// A finishes and is settled.
	h.nodeSay(&dispatch.Result{Job: vA.ID, Result: client.JobResult{OutputLen: 3}})
	expectFrame[dispatch.Recorded](h)
	h.want(http.StatusNoContent, nil, "POST", "/v1/jobs/"+vA.ID+"/settle", nil)
	h.want(http.StatusNoContent, nil, "POST", "/v1/jobs/"+vB.ID+"/settle", nil)

	// AUTH-07: the canary is nowhere but in the start frames.
	h.restart()
	audit, err := h.srv.Store().ListAudit(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(audit) < 3 {
		t.Errorf("audit log has %d entries, want the submissions at least", len(audit))
	}
	for _, e := range audit {
		if strings.Contains(e.Detail+e.Subject+e.Action, canary) {
			t.Errorf("audit entry holds the secret: %+v", e)
		}
	}
	if err := h.srv.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	raw := rawStore(h)
	for _, form := range secretForms(canary) {
		if strings.Contains(string(raw), form) {
			t.Errorf("the store file holds the secret (as %q)", form)
		}
	}
	// Every file under the state dir (store, output, pki, …), in plain,
	// base64 and JSON-escaped forms.
	scanned := 0
	err = filepath.WalkDir(h.dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		scanned++
		for _, form := range secretForms(canary) {
			if strings.Contains(string(raw), form) {
				t.Errorf("%s holds the secret (as %q)", path, form)
			}
		}
		return nil
	})
	if err != nil || scanned == 0 {
		t.Fatalf("scanning the state dir: %d files, %v", scanned, err)
	}
	// Records keep specs as JSON bytes (base64 inside the file): read
	// them back through the store too.
	loc, err := h.cfg.openLocation()
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(t.Context(), loc)
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := st.ListJobs(t.Context(), false)
	st.Close()
	if err != nil || len(jobs) != 3 {
		t.Fatalf("stored jobs: %d, %v; want 3", len(jobs), err)
	}
	for _, j := range jobs {
		if !strings.Contains(string(j.Spec), "visible") || strings.Contains(string(j.Spec)+string(j.Result), canary) {
			t.Errorf("stored job %s: spec %s", j.ID, j.Spec)
		}
	}
	if strings.Contains(h.logs.String(), canary) {
		t.Error("the logs hold the secret")
	}
}

// secretForms returns s, its JSON-escaped form and the parts of its
// base64 encoding that appear whatever its alignment in a longer encoded
// byte string.
func secretForms(s string) []string {
	esc, _ := json.Marshal(s)
	out := []string{s, string(esc[1 : len(esc)-1])}
	for i := 0; i < 3; i++ {
		enc := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("x", i) + s))
		g := (i + 2) / 3
		e := (i + len(s)) / 3
		out = append(out, enc[g*4:e*4])
	}
	return out
}
