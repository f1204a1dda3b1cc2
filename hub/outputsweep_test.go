package hub

import (
	"path/filepath"
	"testing"

	"github.com/vk-ci/vk/hub/output"
	"github.com/vk-ci/vk/proto/dispatch"
)

// A settle's drop mark in the output log is not synced on its own (the
// settled record is what counts), so a crash just after it can bring the
// job's output back, and nothing would ever read or remove it. The hub's
// start drops the outputs of settled and unknown jobs and keeps those of
// the jobs it restores.
func TestStartSweepsOutputOfSettledJobs(t *testing.T) {
	h := newHarness(t, nil)
	h.relayUp(1)
	h.nodeUp(dispatch.Held{})
	settled := h.finishedWithOutput(71, "old")
	if code, body, _ := h.call("POST", "/v1/jobs/"+settled.ID+"/settle", nil); code != 204 {
		t.Fatalf("settle = %d %s", code, body)
	}
	live := h.submitOn(h.claimed(), 72)
	expectFrame[dispatch.Start](h)
	h.nodeSay(&dispatch.JobUpdate{Job: live.ID, State: dispatch.JobAccepted})
	h.nodeSay(&dispatch.Output{Job: live.ID, Offset: 0, Data: []byte("live")})
	expectFrame[dispatch.OutputAck](h)
	if err := h.srv.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	// What a crash just after the settle leaves: the log holds the settled
	// job's output again. And an output no record names at all.
	left := map[string]string{settled.ID: "old", "00000000deadbeef": "stray"}
	out, err := output.Open(filepath.Join(h.dir, "output"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for job, data := range left {
		if _, err := out.Append(t.Context(), job, 0, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	out.Close()
	h.start()
	for job := range left {
		if n, _, err := h.srv.OutputStore().Len(t.Context(), job); err != nil || n != 0 {
			t.Errorf("output of %s after the start: %d bytes, %v; want it dropped", job, n, err)
		}
	}
	if code, body, _ := h.call("GET", "/v1/jobs/"+live.ID+"/output", nil); code != 200 || string(body) != "live" {
		t.Errorf("GET the live job's output after the start = %d %q", code, body)
	}
}
