package loop

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub"
	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/realhub"
	"github.com/vk-ci/vk/proto/client"
)

// A job taken from GitLab that waits on the real hub for a node (its
// node stops just before the submission reaches the hub)
// gets a line in its GitLab trace saying why, with its position; once
// the node takes work again the job runs, its output follows the line,
// and the final checksum covers the whole trace.
//
// spec: TRACE-07, ARB-37
func TestWaitingJobTraceLine(t *testing.T) {
	// The hub runs on real time and the relay on a fast clock: the hub
	// must not declare the job lost (realhub's job_lost_after is 5 s)
	// while a loaded machine takes its time to bring the node back.
	e := newEnv(t, envOptions{hub: realhub.Options{Hub: func(c *hub.Config) { c.Sessions.JobLostAfterSecs = 600 }}})
	e.hub.OnSubmit = func(client.JobSubmission) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		e.real.Agent.Shutdown(ctx)
		// The submission must reach a hub that has seen the node go:
		// otherwise it starts the job on the node and nothing waits.
		e.real.WaitFor("the hub to see the node gone", func() bool {
			ns, err := e.real.Admin().Nodes(ctx)
			if err != nil {
				return false
			}
			for _, n := range ns {
				if n.ID == e.real.NodeID && n.State == "ready" {
					return false
				}
			}
			return true
		})
	}
	glID := e.pipeline([]string{"echo ran-after-waiting"})
	m := e.manager(0, 10)
	e.gate.Set(true)
	stop := e.run(m)
	id := e.hub.OnlyJob(t)
	ji := e.waitGitLab(glID, "the wait line", func(ji gitlabfake.JobInfo) bool {
		return bytes.Contains(ji.Trace, []byte("Waiting for a node of the fleet: "))
	})
	line := string(ji.Trace)
	if !strings.Contains(line, "(position 1 of ") || !strings.Contains(line, " 00O ") {
		t.Errorf("wait line %q, want its position and a stamp", line)
	}
	if committed(ji) {
		t.Errorf("a waiting job was committed")
	}
	e.real.RestartNode()
	ji = e.waitGitLab(glID, "success", func(ji gitlabfake.JobInfo) bool { return ji.State == gitlabfake.StateSuccess })
	e.settled(id)
	stop(false)
	if !bytes.HasPrefix(ji.Trace, []byte(line)) {
		t.Errorf("trace does not start with the wait line:\n%s", tail(ji.Trace))
	}
	rest := ji.Trace[min(len(line), len(ji.Trace)):]
	if first, _, _ := bytes.Cut(rest, []byte("\n")); !bytes.Contains(first, []byte("Running with vk")) {
		t.Errorf("the node's output does not follow the wait line whole: first line after it %q", first)
	}
	if !bytes.Contains(rest, []byte("ran-after-waiting")) {
		t.Errorf("the job's output does not follow the wait line:\n%s", tail(ji.Trace))
	}
	if ji.ChecksumMismatch {
		t.Errorf("final checksum does not cover the trace")
	}
}
