package hub

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/vk-ci/vk/proto/dispatch"
)

// A settle unlinks the job's output file without syncing the directory
// (its settled record is what counts), so a crash just after it can leave
// the file behind, and nothing would ever read or remove it. The hub's
// start removes the outputs of settled and unknown jobs and keeps those
// of the jobs it restores.
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
	// What a crash just after the settle leaves: its unlink never reached
	// the disk. And a file no record names at all.
	dir := filepath.Join(h.dir, "output")
	left := map[string]string{settled.ID: "old", "00000000deadbeef": "stray"}
	for job, data := range left {
		if err := os.WriteFile(filepath.Join(dir, job+".out"), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	h.start()
	for job := range left {
		if _, err := os.Stat(filepath.Join(dir, job+".out")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("output file of %s after the start: %v, want it removed", job, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, live.ID+".out")); err != nil || string(b) != "live" {
		t.Errorf("live job's output after the start = %q, %v; want %q", b, err, "live")
	}
	if code, body, _ := h.call("GET", "/v1/jobs/"+live.ID+"/output", nil); code != 200 || string(body) != "live" {
		t.Errorf("GET the live job's output after the start = %d %q", code, body)
	}
}
