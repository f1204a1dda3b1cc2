// Package translate turns GitLab's job response ([gitlab.JobResponse])
// into the spec a vk node runs ([job.CiJob]), following the seed's
// translation table field by field (SPEC-01..28).
//
// [Translate] is pure: it reads no files, no clock and no network. What it
// needs from the relay comes in a [Runner] (server URL, runner ID, short
// token, the tls_ca_file's content, output limit). It returns the spec and
// the lines gitlab-runner would have printed while preparing the job
// ([Notice]: policy lines, cache key warnings, dropped service aliases), or
// a *[RefusalError] for jobs vk does not run, carrying the vk failure kind
// the relay fails them with.
//
// [FormatTrace] renders notices, and the lines of a refusal
// ([RefusalError.Notices]), in gitlab-runner's logger format (stream 00,
// stdout, stamped unless the job's FF_TIMESTAMPS is false, see
// [Timestamps]) for the lines the relay writes itself (TRACE-07).
//
// # Choices where the spec leaves room
//
//   - Variables: the job's, in GitLab's order, then the runner's own:
//     CI_RUNNER_SHORT_TOKEN, CI_RUNNER_VERSION, CI_RUNNER_REVISION,
//     CI_RUNNER_EXECUTABLE_ARCH (SPEC-11). In gitlab-runner
//     CI_RUNNER_SHORT_TOKEN precedes the job's variables (a job could
//     override it); here it follows them like the other three.
//   - Cache keys (SPEC-16) are expanded against exactly the spec's variables
//     (job + runner), with gitlab-runner's semantics: one pass of expanding
//     the variables' own values (raw ones kept), then os.Expand of the key,
//     the last duplicate winning, "$$" giving "$". Variables only the node
//     knows expand to nothing: those it sets itself (CI_PROJECT_DIR,
//     CI_BUILDS_DIR, CI_CONCURRENT_ID, CI_CONCURRENT_PROJECT_ID,
//     CI_JOB_STATUS, CI_SERVER_TLS_CA_FILE, RUNNER_TEMP_PROJECT_DIR, …) and
//     file variables (their value is a path on the node). Keys are then
//     sanitised as cache/cachekey does (FF_HASH_CACHE_KEYS off). An empty
//     key becomes gitlab-runner's default "<job name>/<ref>"; a key that
//     expands or sanitises to nothing drops its cache entry with
//     gitlab-runner's warning and notice. Fallback keys are expanded twice
//     (as gitlab-runner does), sanitised, and CACHE_FALLBACK_KEY is appended
//     unless it ends in "-protected". Cache policy is expanded too.
//   - Defaults filled: timeout 7200 s when GitLab sends ≤ 0; step, artifact
//     and cache `when` on_success; cache policy pull-push; artifact format
//     zip; trace limit 4 MiB unless the runner sets output_limit.
//   - Service aliases: the first is kept, the rest dropped with a warning
//     line (DECISIONS 8). The job image's alias is not carried.
//   - Refusals: secrets (SPEC-20) and run: (SPEC-22) are configuration
//     failures (runner_configuration_error, script_failure on older
//     GitLab); unknown executor_opts keys fail as gitlab-runner fails them,
//     system failure with exit code 3 and its message; an unparsable
//     repository URL is a configuration failure.
//   - Notices are returned, not put in the CiJob, as proto/job has no field for
//     lines the node should print, so the relay writes them (FormatTrace).
//     Written before the node's output they shift GitLab's trace offsets
//     against the hub's output offsets; the relay must account for that
//     (or proto/job gains a field so the node prints them).
//   - The failure-reason mapping (vk failure → GitLab failure_reason, with
//     the older-GitLab fallback) lives in relay/gitlab, next to the update
//     that sends it.
package translate
