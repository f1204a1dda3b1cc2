package stage

import (
	"strings"
	"testing"

	"github.com/vk-ci/vk/proto/job"
)

// The job's get_sources hooks run in the job's environment around the
// checkout, as gitlab-runner's get_sources script runs them: the pre
// hook before it, the post hook in the project directory after it, each
// command echoed; a failing hook fails the job as a script does, before
// any checkout; with GIT_STRATEGY none neither runs.
//
// spec: STAGE-06
func TestGetSourcesHooksAroundTheCheckout(t *testing.T) {
	hooks := func(pre, post string) []job.Hook {
		return []job.Hook{{Name: job.HookPreGetSources, Script: []string{pre}}, {Name: job.HookPostGetSources, Script: []string{post}}}
	}
	for _, c := range []struct {
		name     string
		hooks    []job.Hook
		strategy string
		failure  Failure
		exit     int
		order    []string // in the trace, in this order
		absent   []string
	}{
		{name: "around", hooks: hooks("echo pre-hook-ran", "echo post-hook-in-$(basename $(pwd))"),
			order: []string{"$ echo pre-hook-ran", "O pre-hook-ran\n", "transfer get_sources", "O post-hook-in-project-0\n"}},
		{name: "pre fails", hooks: hooks("exit 5", "echo never"), failure: FailureScript, exit: 5,
			order: []string{"$ exit 5", "Job failed: exit status 5"}, absent: []string{"transfer get_sources", "never"}},
		{name: "post fails", hooks: hooks("true", "exit 4"), failure: FailureScript, exit: 4,
			order: []string{"transfer get_sources", "$ exit 4", "Job failed: exit status 4"}, absent: []string{"step_script"}},
		{name: "none", hooks: hooks("echo pre-hook-ran", "echo post-hook-ran"), strategy: "none",
			absent: []string{"hook-ran", "transfer get_sources"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tf := &transfers{}
			h := newHarness(t, Config{Transfers: tf})
			j := transferJob(t)
			j.Job.ProjectPath = ""
			j.Hooks = c.hooks
			if c.strategy != "" {
				j.Variables = append(j.Variables, job.Variable{Key: "GIT_STRATEGY", Value: c.strategy})
			}
			out := newWatchBuf("")
			res, err := h.runner.Run(t.Context(), Spec{ID: "hooks", Job: j, Out: out})
			if err != nil {
				t.Fatal(err)
			}
			tr := out.String()
			if res.Failure != c.failure || res.ExitCode != c.exit {
				t.Errorf("failure %q exit %d, want %q %d\n%s", res.Failure, res.ExitCode, c.failure, c.exit, tr)
			}
			at := 0
			for _, s := range c.order {
				i := strings.Index(tr[at:], s)
				if i < 0 {
					t.Errorf("trace lacks %q after offset %d:\n%s", s, at, tr)
					break
				}
				at += i + len(s)
			}
			for _, s := range c.absent {
				if strings.Contains(tr, s) {
					t.Errorf("trace has %q:\n%s", s, tr)
				}
			}
		})
	}
}
