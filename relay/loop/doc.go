// Package loop is vk-gitlab's engine: per runner, request_concurrency
// request loops that hold capacity on the hub before asking GitLab for a job
// (ARB-02, ARB-25..38, RELAY-10), and per job a handler that submits it,
// commits it in GitLab once a node accepted it, relays its output into
// GitLab's trace byte for byte, sends the final update and settles it with
// the hub (RELAY-11, RELAY-12, GL-08..17).
//
// # A request loop
//
//	┌▶ reserve (queue=true, lease 90 s) ──202──▶ poll ticket ──410──┐
//	│        │201                                  │201             │
//	│        ▼                                     ▼                │
//	│     grant ◀───────────────────────────────────                │
//	│        │ no slot under concurrent/limit ──▶ outcome released ─┤
//	│        ▼                                                      │
//	│   list admission (request_admissions), claim ──410───────────┤
//	│        ▼                                                      │
//	│   POST /jobs/request (60 s, never aborted; renew every lease/3)
//	│        │204 → outcome empty (releases), give slot back ───────┤
//	│        │403 → outcome error; runner stops (token_refused)     │
//	│        │429/503/error → outcome error, back off ──────────────┘
//	│        ▼201
//	└── record (state file), outcome job, start the job's handler
//
// An outcome other than job ends the admission and releases its
// reservation at the hub (ARB-34), so the loop sends no release after an
// outcome the hub took; it releases the reservation itself only when the
// outcome did not get through. An empty answer from GitLab thus costs
// four hub requests: reserve, ticket poll, claim and outcome.
//
// The loop asks GitLab only while the [Gate] is open (the hub approved the
// GitLab server, RSESS-07); a grant that finds it closed is released.
//
// # A job
//
// The job's record in its runner's state file (relay/state) moves through
// taken → submitted → committed → reported, or failing for jobs that never
// run, and is removed once the hub settled the job (RELAY-08). Every step is
// resumable: a restarted daemon picks each record up at its phase
// (RELAY-09): a taken job is submitted again with its recorded request_id;
// a committed one resumes its trace from the recorded offset, GitLab's 416
// correcting it (GL-11); a reported one is only settled.
//
// While a job runs, the view is long-polled by revision and cancels are
// delivered concurrently with the trace loop (RELAY-15): Job-Status
// canceling asks for a graceful cancel, canceled/failed or a 403 for an
// immediate one, after which nothing more is written (GL-17).
//
// # Choices where the spec is silent
//
//   - A job whose translation is refused is reported to the hub as
//     released (it will never be submitted, and its reservation is given
//     back at once); an undecodable one as error. Both are failed in GitLab
//     with the daemon's own trace lines (TRACE-07).
//   - A grant whose lease, counted from when its request was sent, has run
//     out before the claim is released unclaimed (ARB-31).
//   - A renewal answered 410 drops the reservation from the submission:
//     the hub then places the job under its admission (ARB-37).
//   - project_rejected uses the approval lines (FAIL-21/22) with "was
//     rejected" for "is waiting for approval".
//   - One trace patch per update interval while the job runs; once it
//     finished, the rest is patched back to back (1 MiB each) before the
//     final update.
//   - A hub job the hub no longer knows (404) is failed in GitLab as
//     runner_system_failure and dropped.
//   - Timers (intervals, backoffs, lease renewals) run on the injected
//     clock; request timeouts use real contexts.
//   - Shutdown (RELAY-17, RELAY-18): once ctx ends a request loop takes no
//     new grant but finishes what is under way — the outcome of its
//     admission, the release of its reservation, the cancel of its ticket,
//     a GitLab job request already sent (ARB-29) — and so do the jobs; all
//     of it ends at the shutdown deadline (jobCtx, shutdown_timeout), so
//     Run never outlives it by more than the calls in flight take to
//     notice. A job request still out at the deadline is abandoned, as a
//     SIGKILL would abandon it: had GitLab assigned a job, GitLab's own
//     timeout ends it. A request sent is thus never aborted before the
//     deadline only (ARB-29), which with the 3600 s default is far past
//     the 60 s request timeout. A
//     recorded job whose outcome was not taken is reported again by the
//     next start while still taken; other outcomes lapse with the hub's
//     admission lease.
package loop
