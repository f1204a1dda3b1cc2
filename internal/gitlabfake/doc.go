// Package gitlabfake is a faithful fake GitLab for tests and demos of vk's
// GitLab side. It is a real HTTP server on loopback serving the runner API
// (/api/v4/runners/verify, /jobs/request, PUT /jobs/:id, PATCH
// /jobs/:id/trace, job artifacts) and project repositories through the
// real git http-backend, with the status codes, headers and JSON shapes
// gitlab-runner depends on (see /work/shared/reference/gitlab-runner-api.md).
//
// Usage:
//
//	srv := gitlabfake.New(gitlabfake.Options{LongPoll: time.Second})
//	if err := srv.Start(); err != nil { … }
//	defer srv.Close()
//	proj, _ := srv.CreateProject("acme/demo", map[string]string{"README.md": "hi\n"}, gitlabfake.ProjectOptions{})
//	pl, _ := srv.CreatePipeline(proj.Path, gitlabfake.PipelineSpec{Jobs: []gitlabfake.JobSpec{{Name: "build", Script: []string{"make"}}}})
//	// point the runner at srv.URL() with srv.RunnerToken(), then assert on srv.Job(pl.Jobs["build"]).
//
// # Choices where GitLab is configurable or the spec is silent
//
//   - Two-phase commit is off by default (DECISIONS ruling 5: GitLab's
//     two_phase_job_commit shipped behind a flag and was withdrawn): a job is
//     running as soon as its 201 is sent. Options.TwoPhaseCommit turns on
//     Rails' ack workflow for runners that advertise the feature.
//   - Long polling is off by default (Workhorse's effective default);
//     Options.LongPoll enables it. A held request is answered 204 without
//     X-GitLab-Last-Update, as Workhorse does.
//   - X-GitLab-Trace-Update-Interval is 3 s (Rails' value while the log is
//     watched), configurable.
//   - A final PUT whose checksum/bytesize disagrees with the stored trace is
//     accepted with 200 and recorded (current Rails); Options.TraceMismatch
//     selects Rails' 202 pending path or legacy 412 instead.
//   - An unknown failure_reason is stored as unknown_failure.
//   - A wrong job token is answered 403 (like a job that is not executing).
//   - dependencies[].token is the running job's own token (newer Rails);
//     artifact downloads accept the token of any running job of the same
//     project (401 for a token of no running job, 403 for another
//     project's). Options.LegacyDependencyTokens sends each dependency's
//     own token instead. Job tokens ("glcbt-64_…") stop working when the
//     job ends.
//   - Git: fetch only (push is 403); HTTP basic gitlab-ci-token:<job token>
//     of a running or canceling job of that project; 401 otherwise.
//
// # Not modelled
//
// Runner tags, protected-runner and run_untagged matching (every runner may
// take every job); job timeouts and stuck-job handling; retries and
// manual/when: jobs; the 409 concurrency conflict (inject it as a fault);
// runner registration (POST/DELETE /runners), token reset and router
// discovery; rate limiting except by fault injection; the trace-watch 60 s
// interval; Workhorse's /authorize pre-flight; trace chunk persistence;
// artifact expiry and metadata; EE secrets, policy options, inputs, run:
// steps, hooks and registry credentials in job responses (sent empty); TLS
// (tests wanting https front it themselves). See docs/gitlabfake.md.
//
// # Standalone
//
// cmd/vk-gitlabfake runs the fake on its own:
//
//	go run ./internal/gitlabfake/cmd/vk-gitlabfake --addr 127.0.0.1:0 --demo
//
// prints the URL and runner token and, with --demo, loads a sample project
// and a two-stage pipeline.
package gitlabfake
