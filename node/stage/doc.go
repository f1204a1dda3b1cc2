// Package stage runs one GitLab CI job on the node, stage by stage, the way
// gitlab-runner 19.5 does (STAGE-01, STAGE-05), on any [exec.Executor]
// backend, writing the job's trace through node/trace.
//
// # Order
//
//	prepare_executor → prepare_script → get_sources → restore_cache →
//	download_artifacts → step_<name>… → after_script →
//	archive_cache | archive_cache_on_failure →
//	upload_artifacts_on_success | upload_artifacts_on_failure →
//	cleanup_file_variables → final line → executor cleanup
//
// What a failure skips follows gitlab-runner (reference §13): a failing
// prepare stage skips everything else; a failing get_sources, restore_cache
// or download_artifacts skips the user steps and after_script; a failing
// step skips the remaining steps but not after_script or the on_failure
// stages. A graceful cancel during the user steps sends SIGTERM to the
// running step (SIGKILL after [Config.CancelGrace]) and still runs
// after_script (CI_JOB_STATUS=canceled) and the on_failure stages; as with
// gitlab-runner, whose cancel stops the whole build until the user scripts
// start and only them afterwards, a graceful cancel before the user steps
// acts as an immediate one and one after them changes nothing. An immediate
// cancel, [Handle.Interrupt] or the
// end of Start's context kills the step and, as gitlab-runner 19.3 does
// once the job's context ended, runs no further stage (no after_script,
// cache, artifacts or cleanup_file_variables section; the file variables
// are still removed): the trace goes straight to the last line. The job's
// timeout (timeout_secs) runs from the start and ends the job the same way
// (the step's timeout warning, then the error line). RUNNER_SCRIPT_TIMEOUT
// (a Go duration) bounds each user step and ends only the script:
// after_script runs (CI_JOB_STATUS=timedout) under its own limit
// (RUNNER_AFTER_SCRIPT_TIMEOUT, default 5 min), then the later stages.
// get_sources, restore_cache and download_artifacts are tried up to
// GET_SOURCES_ATTEMPTS, RESTORE_CACHE_ATTEMPTS and
// ARTIFACT_DOWNLOAD_ATTEMPTS times (1–10, default 1), a warning naming each
// failed attempt.
//
// # Hooks for the node
//
// [Config.OnStage] is called with the job's ID and each stage's name as
// the stage starts (the node reports `running {stage}` and samples egress
// there). [Spec.Executor] (with [Spec.ExecutorName]) runs one job on
// another backend than [Config.Executor] — the node picks it per job by
// image — and [Spec.Warnings] go to the trace as warnings after the
// executor line, followed by those of a prepared job that has a
// `Warnings() []string` method (the container backend's dropped service
// aliases, DECISIONS 8, and unhealthy services).
//
// # Scripts
//
// Each script stage is one bash script shaped exactly like gitlab-runner's
// BashWriter output: `trap exit 1 TERM`, errexit and pipefail, noclobber
// off, and the body eval'ed with stdin closed. The body exports the node's
// variables (CI_BUILDS_DIR, CI_PROJECT_DIR, CI_CONCURRENT_ID and
// CI_CONCURRENT_PROJECT_ID (gitlab-runner's slots, see slots.go),
// CI_RUNNER_VERSION, CI_RUNNER_EXECUTABLE_ARCH, CI_SERVER_TLS_CA_FILE as a
// file when the job carries server_ca_pem), then the job's variables in order (non-raw values
// expanded with $KEY/${KEY}, the last of a key winning, a file variable
// written with printf into <project>.tmp/<KEY> and exported as that path),
// then CI_JOB_STATUS; it cd's into CI_PROJECT_DIR and writes each command
// echoed in green as `$ command` (a multi-line command as its first line
// plus "# collapsed multi-line command"), quoting as helpers.ShellEscape
// (helpers.PosixShellEscape with FF_POSIXLY_CORRECT_ESCAPES).
//
// # Failures
//
// Every [Failure] is set where it happens: a non-zero step → script (its
// exit code in [Result.ExitCode]); past timeout_secs → timeout; an invalid
// GIT_STRATEGY or GIT_SUBMODULE_STRATEGY → configuration; a transfer error
// → external_dependency unless it wraps [ErrSystem], [ErrConfiguration] or
// [ErrImagePull]; Prepare or a script that cannot start → system; cancel →
// canceled; node stop → interrupted. The job's own error wins over a cache
// error, which wins over an artifact error.
//
// # Choices where the spec or gitlab-runner leave room
//
//   - Steps' `when` is honoured (gitlab-runner ignores it): on_success runs
//     while nothing failed, on_failure only after a failure, always always.
//     For what Rails sends (script on_success, after_script always) this is
//     gitlab-runner's behaviour.
//   - Variables whose key is not a shell identifier are not exported (bash
//     would abort the script on them).
//   - `$$` in a variable value expands to a literal `$`.
//   - The job token is masked like a masked variable.
//   - bash's errexit inside `eval` ends a failing script with status 1
//     unless the script calls `exit N` itself; the reported exit code is
//     bash's, as with gitlab-runner's identical script.
//   - A process killed by the memory limit fails the job as script with the
//     shell's exit code, after a warning naming the limit.
//   - Transfers are node/xfer's; with none configured each transfer stage
//     writes a warning saying it was skipped, and get_sources leaves an
//     empty project directory.
//
// # Runner lines not matched to gitlab-runner 19.5
//
// Besides the program name and version ("Running with vk <version>"):
//   - the second line is "  on <node name>, system ID: <id>" (a node has no
//     runner token to shorten);
//   - "Using the process executor with bash..." instead of "Using Shell
//     (bash) executor...";
//   - the feature-flags line is gitlab-runner 19.3's (every flag of its list
//     that the job's variables turn off its default, in its order), but the
//     node acts only on the flags that change the trace or the script
//     (see featureflags.go) and has no runner-level flags;
//   - script failures say "exit status N", as gitlab-runner's shell
//     executor does (its docker executor says "exit code N"); the process
//     executor is the shell executor's kin;
//   - the node's own lines for skipped transfers, transfer errors, retried
//     attempts, sizing notes, out-of-memory kills and "the node stopped the
//     job" have no gitlab-runner counterpart.
package stage
