package stage

import (
	"context"
	"fmt"

	"github.com/vk-ci/vk/proto/job"
)

// The job's get_sources hooks (STAGE-06) run where its scripts run — in
// the guest for the microvm backend, the container for oci, the host for
// process — around the node's host-side checkout, as gitlab-runner's
// get_sources script runs them around its git commands: the
// pre_get_sources_script commands before the checkout (in the job's
// working directory), the post_get_sources_script ones after it is in
// place (in the project directory), each command echoed as `$ cmd`. As
// in gitlab-runner, they do not run under GIT_STRATEGY none or empty. A
// hook that fails fails the job like a script: exit status N.

// hookScript is the job's commands for hook name, nil when it has none.
func hookScript(j *job.CiJob, name string) []string {
	for _, h := range j.Hooks {
		if h.Name == name {
			return h.Script
		}
	}
	return nil
}

// runHook runs hook name's commands, with prefix naming its command
// sections (gitlab-runner's pre_clone_script / post_clone_script);
// inProject cd's into the project directory first.
func (x *run) runHook(ctx context.Context, name, prefix string, inProject bool) error {
	cmds := hookScript(x.job, name)
	if len(cmds) == 0 {
		return nil
	}
	w := x.writer()
	w.exports(x.exports("running"))
	if inProject {
		w.cd(x.projectDir)
	}
	w.commands(prefix, cmds...)
	res, err := x.runScript(ctx, "get_sources", w.finish())
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		x.exitCode = exitCode(res)
		return &hookError{name: name, code: exitCode(res)}
	}
	return nil
}

// hookError is a get_sources hook that exited non-zero: a script failure.
type hookError struct {
	name string
	code int
}

func (e *hookError) Error() string { return fmt.Sprintf("%s: exit code %d", e.name, e.code) }
