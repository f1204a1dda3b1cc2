// Command vk-gitlabfake runs the fake GitLab of package gitlabfake on its
// own, for demos and manual runs of vk-gitlab or gitlab-runner:
//
//	vk-gitlabfake [--addr 127.0.0.1:0] [--runner-token glrt-…] [--demo]
//	              [--long-poll 50s] [--two-phase] [--trace-interval 3]
//
// It prints "url=<base url>", "runner_token=<token>" and "jobs=<url of
// the job pages>" on stdout, then serves until SIGINT/SIGTERM. --demo
// creates project demo/hello with a two-stage pipeline (build uploads an
// artifact, test depends on it). The job pages under /-/ show every job's
// state and trace and start another run of a pipeline (views.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/vk-ci/vk/internal/gitlabfake"
)

// version is the release version, set at link time like vk's other
// binaries' (-ldflags "-X main.version=1.2.3"); "dev" otherwise.
var version = "dev"

// versionString is the --version line in the form of internal/version's
// (this command and its package use the standard library only).
func versionString() string {
	commit := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				commit = s.Value[:min(12, len(s.Value))]
			}
		}
	}
	return fmt.Sprintf("vk-gitlabfake %s (commit %s, %s %s/%s)", version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "vk-gitlabfake:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends, printing the URL and token (and the demo
// pipeline's ids) to stdout.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("vk-gitlabfake", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address (loopback only)")
	token := fs.String("runner-token", "", "runner authentication token (default: generated glrt-…)")
	demo := fs.Bool("demo", false, "load a sample project and pipeline")
	longPoll := fs.Duration("long-poll", 0, "Workhorse long-poll duration for /jobs/request (0 = off)")
	twoPhase := fs.Bool("two-phase", false, "honour two_phase_job_commit")
	interval := fs.Int("trace-interval", 3, "X-GitLab-Trace-Update-Interval seconds")
	verbose := fs.Bool("v", false, "log every request to stderr")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *showVersion {
		fmt.Fprintln(stdout, versionString())
		return nil
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	v := &views{}
	srv := gitlabfake.New(gitlabfake.Options{
		Addr: *addr, RunnerToken: *token, LongPoll: *longPoll, TwoPhaseCommit: *twoPhase,
		TraceUpdateInterval: *interval, Logger: log, Views: v.handler(),
	})
	v.srv = srv
	if err := srv.Start(); err != nil {
		return err
	}
	defer srv.Close()
	fmt.Fprintf(stdout, "url=%s\nrunner_token=%s\njobs=%s/-/jobs\n", srv.URL(), srv.RunnerToken(), srv.URL())
	if *demo {
		if err := loadDemo(srv, stdout); err != nil {
			return err
		}
	}
	<-ctx.Done()
	return nil
}

func loadDemo(srv *gitlabfake.Server, stdout io.Writer) error {
	proj, err := srv.CreateProject("demo/hello", map[string]string{
		"README.md": "# hello\n",
		"hello.sh":  "#!/bin/sh\necho \"hello from $CI_PROJECT_PATH\"\n",
	}, gitlabfake.ProjectOptions{})
	if err != nil {
		return err
	}
	pl, err := srv.CreatePipeline(proj.Path, gitlabfake.PipelineSpec{
		Stages: []string{"build", "test"},
		Variables: []gitlabfake.Variable{
			{Key: "GREETING", Value: "hello", Public: true},
			{Key: "SECRET_TOKEN", Value: "s3cr3t-demo-value", Masked: true},
		},
		Jobs: []gitlabfake.JobSpec{
			{Name: "build", Stage: "build", Script: []string{"mkdir -p out", "sh hello.sh > out/greeting.txt"},
				Artifacts: []gitlabfake.Artifact{{Paths: []string{"out/"}, ExpireIn: "1 day"}},
				Timeout:   10 * time.Minute},
			{Name: "test", Stage: "test", Script: []string{"cat out/greeting.txt"}, AfterScript: []string{"echo done"},
				Timeout: 10 * time.Minute},
		},
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "project=%s clone_url=%s pipeline=%d build_job=%d test_job=%d\n",
		proj.Path, proj.CloneURL, pl.ID, pl.Jobs["build"], pl.Jobs["test"])
	return nil
}
