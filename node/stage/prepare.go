package stage

import (
	"context"
	"fmt"
	"path"
	"strconv"

	"github.com/vk-ci/vk/node/exec"
	"github.com/vk-ci/vk/proto/job"
)

// prepareExecutor sizes the job and prepares its environment.
func (x *run) prepareExecutor(ctx context.Context) bool {
	ok := true
	x.section("prepare_executor", `Preparing the "vk" executor`, func() {
		exName, executor := x.r.cfg.ExecutorName, x.r.cfg.Executor
		if x.spec.Executor != nil {
			executor = x.spec.Executor
			if x.spec.ExecutorName != "" {
				exName = x.spec.ExecutorName
			}
		}
		x.tr.Println("Using the " + exName + " executor with bash...")
		for _, w := range x.spec.Warnings {
			x.warn(w)
		}
		in := exec.SizeInput{Default: x.spec.Reserved, Ceiling: x.r.cfg.Ceiling}
		in.CPUsVar, _ = x.lookup("MICROVM_CPUS")
		in.MemVar, _ = x.lookup("MICROVM_MEM")
		for _, s := range x.job.Steps {
			in.Script = append(in.Script, s.Script...)
		}
		var notes []string
		x.size, notes = exec.SizeJob(in)
		for _, n := range notes {
			x.tr.Warningln(n)
		}
		if msg := x.validate(); msg != "" {
			x.fail(FailureConfiguration, fmt.Errorf("%w: %s", ErrConfiguration, msg))
			x.msg = msg
			ok = false
			return
		}
		ej, err := executor.Prepare(ctx, exec.PrepareRequest{ID: x.spec.ID, Size: x.size})
		if err != nil {
			x.failStage(ctx, err, FailureSystem)
			ok = false
			return
		}
		x.ej = ej
		if wj, isW := ej.(interface{ Warnings() []string }); isW {
			// Backends' notes on the prepared environment: dropped service
			// aliases (DECISIONS 8), services that did not start.
			for _, w := range wj.Warnings() {
				x.warn(w)
			}
		}
		x.projectDir = path.Join(ej.BuildsDir(), projectPath(x.job))
		x.tmpDir = x.projectDir + ".tmp"
	})
	return ok
}

// validate refuses jobs the node cannot run as asked (FAIL-05); it returns
// why, or "".
func (x *run) validate() string {
	user := 0
	for _, st := range x.job.Steps {
		if st.Name != job.StepAfterScript {
			user++
		}
	}
	if user == 0 {
		return "the job has no script steps (run: jobs need step-runner, which this node does not support)"
	}
	if v, _ := x.lookup("GIT_STRATEGY"); v != "" && v != "clone" && v != "fetch" && v != "none" && v != "empty" {
		return fmt.Sprintf("unknown GIT_STRATEGY %q", v)
	}
	if v, _ := x.lookup("GIT_SUBMODULE_STRATEGY"); v != "" && v != "none" && v != "normal" && v != "recursive" {
		return fmt.Sprintf("unknown GIT_SUBMODULE_STRATEGY %q", v)
	}
	return ""
}

func projectPath(j *job.CiJob) string {
	p := path.Clean("/" + j.Job.ProjectPath)
	if p == "/" {
		return "project-" + strconv.FormatInt(j.Job.ProjectID, 10)
	}
	return p[1:]
}

func (x *run) prepareScript(ctx context.Context) bool {
	ok := true
	x.scriptStage(ctx, "prepare_script", "Preparing environment", func() {
		w := x.writer()
		w.line(`echo "Running on $(hostname)..."`)
		// As gitlab-runner's writePrepareScript: no GITLAB_ENV file or
		// masking database is left from an earlier job.
		w.rmFile(path.Join(x.tmpDir, gitlabEnvFile))
		w.rmFile(path.Join(x.tmpDir, "masking.db"))
		res, err := x.runScript(ctx, "prepare_script", w.finish())
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("%w: prepare script: exit code %d", ErrSystem, res.ExitCode)
		}
		if err != nil {
			x.failStage(ctx, err, FailureSystem)
			ok = false
		}
	})
	return ok
}
