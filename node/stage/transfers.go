package stage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/node/exec"
	"github.com/vk-ci/vk/proto/job"
)

// mkProjectDir makes sure the project directory exists and belongs to the
// job's user after host-side transfers wrote into it.
func (x *run) mkProjectDir(ctx context.Context) error {
	if guest, err := x.guestMkdir(ctx); guest {
		return err
	}
	dir := x.ej.HostPath(x.projectDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%w: %w", ErrSystem, err)
	}
	if err := x.ej.Adopt(dir); err != nil {
		return fmt.Errorf("%w: %w", ErrSystem, err)
	}
	return nil
}

func (x *run) getSources(ctx context.Context) bool {
	ok := true
	x.scriptStage(ctx, "get_sources", "Getting source from Git repository", func() {
		var err error
		strategy, _ := x.lookup("GIT_STRATEGY")
		switch {
		case strategy == "none" || strategy == "empty":
			w := x.writer()
			w.exports(x.exports("running"))
			// As gitlab-runner's handleGetSourcesStrategy: empty starts
			// from a new directory; both make it with MkDir, a command.
			if strategy == "empty" {
				w.notice("Skipping Git repository setup and creating an empty build directory")
				w.rmDir(x.projectDir)
			} else {
				w.notice("Skipping Git repository setup")
			}
			w.command("mkdir", "-p", x.projectDir)
			w.notice("Skipping Git checkout")
			w.notice("Skipping Git submodules setup")
			var res exec.RunResult
			res, err = x.runScript(ctx, "get_sources", w.finish())
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("get_sources script: exit code %d", res.ExitCode)
			}
		case x.r.cfg.Transfers == nil:
			x.tr.Warningln("Skipping Git repository setup: this node has no transfer service; the project directory is empty")
			err = x.mkProjectDir(ctx)
		default:
			err = x.runHook(ctx, job.HookPreGetSources, "pre_clone_script", false)
			if err == nil {
				err = x.attempt(ctx, "GET_SOURCES_ATTEMPTS", func() error {
					return x.intoProject(ctx, "sources", func(dir string) error {
						return x.r.cfg.Transfers.GetSources(ctx, x.job, dir, x.tr)
					})
				})
			}
			if err == nil {
				err = x.mkProjectDir(ctx)
			}
			if err == nil {
				err = x.runHook(ctx, job.HookPostGetSources, "post_clone_script", true)
			}
		}
		var he *hookError
		if errors.As(err, &he) {
			x.fail(FailureScript, err)
			ok = false
			return
		}
		if err != nil {
			x.tr.Errorln("Getting sources failed: " + err.Error())
			x.failStage(ctx, err, FailureExternalDependency)
			ok = false
		}
	})
	return ok
}

func cachePolicyPulls(c job.Cache) bool { return c.Policy == "" || strings.Contains(c.Policy, "pull") }

func cachePolicyPushes(c job.Cache) bool {
	return c.Policy == "" || strings.HasSuffix(c.Policy, "push")
}

func (x *run) restoreCache(ctx context.Context) bool {
	pulls := false
	for _, c := range x.job.Caches {
		pulls = pulls || cachePolicyPulls(c)
	}
	if !pulls {
		return true
	}
	ok := true
	x.scriptStage(ctx, "restore_cache", "Restoring cache", func() {
		if x.r.cfg.Transfers == nil {
			x.tr.Warningln("Restoring cache is not supported on this node (no transfer service); continuing without it")
			return
		}
		if x.spec.WithoutCaches != "" {
			x.tr.Warningln("Skipping the cache: " + x.spec.WithoutCaches)
			return
		}
		err := x.attempt(ctx, "RESTORE_CACHE_ATTEMPTS", func() error {
			return x.intoProject(ctx, "cache", func(dir string) error {
				return x.r.cfg.Transfers.RestoreCache(ctx, x.job, x.spec.Cache, dir, x.tr)
			})
		})
		if err == nil {
			err = x.mkProjectDir(ctx)
		}
		if err != nil {
			x.tr.Errorln("Restoring cache failed: " + err.Error())
			x.failStage(ctx, err, FailureExternalDependency)
			ok = false
		}
	})
	return ok
}

func (x *run) downloadArtifacts(ctx context.Context) bool {
	has := false
	for _, d := range x.job.Dependencies {
		has = has || d.ArtifactsFile != nil
	}
	if !has {
		return true
	}
	ok := true
	x.scriptStage(ctx, "download_artifacts", "Downloading artifacts", func() {
		if x.r.cfg.Transfers == nil {
			x.tr.Warningln("Downloading artifacts is not supported on this node (no transfer service); continuing without them")
			return
		}
		err := x.attempt(ctx, "ARTIFACT_DOWNLOAD_ATTEMPTS", func() error {
			return x.intoProject(ctx, "artifacts", func(dir string) error {
				return x.r.cfg.Transfers.DownloadArtifacts(ctx, x.job, dir, x.tr)
			})
		})
		if err == nil {
			err = x.mkProjectDir(ctx)
		}
		if err != nil {
			x.tr.Errorln("Downloading artifacts failed: " + err.Error())
			x.failStage(ctx, err, FailureExternalDependency)
			ok = false
		}
	})
	return ok
}

// attempt runs fn up to the number of attempts the job variable key asks
// for (1 to 10, default 1, as gitlab-runner's GET_SOURCES_ATTEMPTS and
// friends), stopping at the first success or when ctx ends.
func (x *run) attempt(ctx context.Context, key string, fn func() error) error {
	n := 1
	if v, ok := x.lookup(key); ok {
		if k, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && k >= 1 && k <= 10 {
			n = k
		} else {
			x.tr.Warningln(fmt.Sprintf("%s=%q is not a number from 1 to 10; trying once", key, v))
		}
	}
	var err error
	for i := 1; i <= n; i++ {
		if err = fn(); err == nil || ctx.Err() != nil {
			return err
		}
		if i < n {
			x.tr.Warningln(fmt.Sprintf("%s (attempt %d of %d); retrying", err, i, n))
		}
	}
	return err
}

func (x *run) archiveCache(ctx context.Context) {
	failed := x.failed()
	applies := false
	for _, c := range x.job.Caches {
		when := c.When
		if when == "" {
			when = "on_success"
		}
		if cachePolicyPushes(c) && (when == "always" || (when == "on_failure") == failed) {
			applies = true
		}
	}
	if !applies {
		return
	}
	name, title := "archive_cache", "Saving cache for successful job"
	if failed {
		name, title = "archive_cache_on_failure", "Saving cache for failed job"
	}
	x.section(name, title, func() {
		if x.r.cfg.Transfers == nil {
			x.tr.Warningln("Saving cache is not supported on this node (no transfer service); the cache is not saved")
			return
		}
		if x.spec.WithoutCaches != "" {
			x.tr.Warningln("Skipping the cache: " + x.spec.WithoutCaches)
			return
		}
		err := x.fromProject(ctx, func(dir string) error {
			return x.r.cfg.Transfers.ArchiveCache(ctx, x.job, x.spec.Cache, dir, failed, x.tr)
		})
		if err != nil {
			x.tr.Errorln("Saving cache failed: " + err.Error())
			x.failStage(ctx, err, FailureExternalDependency)
		}
	})
}

func (x *run) uploadArtifacts(ctx context.Context) []ArtifactOutcome {
	failed := x.failed()
	applies := false
	for _, a := range x.job.Artifacts {
		when := a.When
		if when == "" {
			when = "on_success"
		}
		if when == "always" || (when == "on_failure") == failed {
			applies = true
		}
	}
	if !applies {
		return nil
	}
	name, title := "upload_artifacts_on_success", "Uploading artifacts for successful job"
	if failed {
		name, title = "upload_artifacts_on_failure", "Uploading artifacts for failed job"
	}
	var out []ArtifactOutcome
	x.section(name, title, func() {
		if x.r.cfg.Transfers == nil {
			x.tr.Warningln("Uploading artifacts is not supported on this node (no transfer service); no artifacts are uploaded")
			return
		}
		err := x.fromProject(ctx, func(dir string) error {
			var err error
			out, err = x.r.cfg.Transfers.UploadArtifacts(ctx, x.job, dir, failed, x.tr)
			return err
		})
		if err != nil {
			x.tr.Errorln("Uploading artifacts failed: " + err.Error())
			x.failStage(ctx, err, FailureExternalDependency)
		}
	})
	return out
}

// cleanupFileVariables removes the file variables, in its own section when
// the stage runs as gitlab-runner's would (shown), silently otherwise: the
// files hold secrets and never outlive the job.
func (x *run) cleanupFileVariables(shown bool) {
	remove := func() {
		if err := os.RemoveAll(x.ej.HostPath(x.tmpDir)); err != nil {
			x.log.Warn("remove file variables", slog.Any(logkey.Err, err))
		}
	}
	if !shown {
		remove()
		return
	}
	x.section("cleanup_file_variables", "Cleaning up project directory and file based variables", remove)
}
