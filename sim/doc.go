// Package sim is vk's deterministic fleet simulator (BS-18): it drives the
// hub's own scheduling core, [sched.Core], unmodified, against a simulated
// fleet in virtual time, and runs the policies CI fleets use today on the
// same jobs, so that a policy is proven before the hub runs it.
//
// A run ([Run]) reads a [Scenario] (TOML, decoded strictly: unknown keys
// are errors), samples the workload once from the seed ([Sample]: arrivals
// and runtimes), then runs each policy on that same job list with its own
// PRNG stream derived from the seed, and returns a [Report] (text tables and
// a self-contained HTML page). Same scenario and seed, same bytes.
//
// # Engine
//
// A virtual clock and an event heap ordered by (time, sequence): events at
// one instant run in the order they were scheduled. Nothing reads the wall
// clock except the measurement of time spent inside sched.Core.Step, which
// is reported apart ([Report.WriteWall]) and never in the report.
//
// # Models
//
// GitLab holds a FIFO queue of pending jobs per runner; a runner is one job
// template (tenant, envelope). A job request takes a round trip sampled
// from [GitLabParams.RoundTrip] and gets the oldest queued job (demand, not
// a specific job, BS-26) or an empty answer; with [GitLabParams.LongPoll]
// Workhorse holds a request whose queue version (X-GitLab-Last-Update) is
// current that long, and answers it 204 itself as soon as a job is queued
// for the runner: a held request never gets a job, the runner's next one
// does (reference/gitlab-runner-api.md §3.4).
//
// vk: one relay per tenant, one runner per template with
// request_concurrency loops (default vk-gitlab's own, six), as vk-gitlab
// runs them: queue a ticket,
// long-poll it, claim the grant, ask GitLab, report the outcome (job: submit
// under the admission; empty: the core backs the runner off), queue again.
// Nodes answer offers and starts from a ledger (accept if the envelope fits
// in vCPUs, memory and disk and under max_concurrency; refuse otherwise)
// after [VKParams.NodeAnswer]; a job runs its sampled runtime, finishes and
// is settled [VKParams.SettleDelay] later. Every answer goes back through
// Core.Step, whose deadlines are driven by Tick at Core.NextDeadline.
//
// pull-fifo: hosts with room pull from one shared FIFO queue (seed 003's
// Redis script); a head that fits no host blocks everything behind it.
// greedy-backfill: the same queue, but any job that fits now is taken,
// oldest first, whatever its size. For both, the host with the most free
// vCPUs pulls; the job starts after the host's next poll (uniform within
// poll_interval) and a GitLab round trip, its room held meanwhile.
//
// accept-then-wait (K8S-03): per runner, replicas × request_concurrency
// request slots feed every check_interval (jittered) and take jobs while
// their replica holds fewer than concurrent, room or not. A job becomes a
// pod after pod_create; the Kubernetes scheduler binds pending pods oldest
// first to the node with the most free vCPUs (backfilling); a pod not bound
// within poll_timeout fails its job.
//
// quota-margin (K8S-01..14): the same managers, but a slot requests only
// when used + in_flight + margin < hard holds on the namespace quota for
// pods (when quota_pods is set) and for requests.cpu and requests.memory
// (used + (in_flight + margin + 1) × the pod's request ≤ hard, hard being
// the fleet's capacity, K8S-11). in_flight is the slot's replica's jobs
// without a pod (K8S-02); used counts every admitted pod of every runner
// (K8S-04). Admission rejects a pod over hard and its job fails
// ("quota_rejected", K8S-08). A maxSurge 100% rollout runs a second
// replica set for rollout_for from rollout_at, after which the old one
// stops requesting (K8S-06). Each margin of [BaselineParams.Margins] is
// one result (K8S-10). A requests.memory quota ([BaselineParams.QuotaMemory],
// on by default) makes admission reject any pod without a memory request
// (K8S-12): a runner with memory_request = false loses every job it takes
// ("quota_no_request", counted as quota-lost), at every margin.
//
// k8s-lease (K8S-13), the exact alternative: the same managers, but before
// each request a slot takes one Lease for the job, which the API server
// grants atomically only while the leases' sum (pods, requests.cpu,
// requests.memory) stays within hard, with no margin; the take delays the
// request by api_latency. The holder deletes the lease when GitLab answers
// empty or the job ends, and renews it every lease_renew meanwhile; a
// sweeper lists the leases every lease_sweep and deletes those not renewed
// for lease_duration. The namespace keeps its quota, so admission still
// checks every pod; the leases never let it be exceeded. Its costs are
// reported: Kubernetes API calls (each take, renewal, delete, sweep list and
// sweep delete; quota-margin's are one quota get per check), capacity held
// by a lease with no pod running (held-idle: during the GitLab request,
// long polls included, and pod creation), and after a crash the crashed
// manager's leases until swept (stale-lease vCPU·h).
//
// A manager crash ([BaselineParams.CrashAt]) hits the first active replica
// of every runner in all Kubernetes baselines alike: the jobs it holds fail
// ("manager_crash"), running or not, and their pods are deleted at once
// (nodes and the quota free immediately: the quota needs no cleanup); its
// open requests die with it (a job GitLab was about to hand them goes back
// to the queue); its leases stay, unrenewed, until swept. The Deployment
// restarts it restart_after later as a new process knowing none of them.
//
// # Metrics
//
// Every measurement but the time series covers the measured window: the
// arrival window less the scenario's warmup, whose start-up transient
// would otherwise flatter or punish a policy. Utilization is running vCPUs
// over fleet vCPUs, integrated over the measured window. A wait is from a
// job's arrival at GitLab to its start on a node, for the jobs that arrive
// in the measured window; a job still waiting when the run ends (the drain
// limit) counts with its wait so far, so a policy that starves a class
// cannot hide it by never starting its jobs. Held-idle is vCPU·time set aside on nodes without a running job
// (vk reservations granted and not yet used, including while a long-polled
// GitLab request is open; pulled jobs before they boot; k8s-lease's leases
// without a running pod, which no other manager can take). Free-while-waiting
// is vCPU·time free on nodes while any job waited (head-of-line blocking,
// margins, fragmentation). Jain's index is over each tenant's busy vCPU·s
// in the measured window divided by its weight, among tenants that had
// jobs; it reads 1 only when every tenant was backlogged and served by
// weight, so read it beside the per-tenant waits. A size class is the jobs
// of one envelope; a job is wide when its envelope asks for at least half
// the vCPUs of its pool's largest node. Per class the report gives the
// share of the vCPU·s run in the measured window against the share of the
// vCPU·s demanded by the jobs that arrived in it: under overload the two
// stay equal when the shortfall is spread over every class. A job is lost
// to a capacity race when it was taken from GitLab on room someone else
// got first (quota admission's quota_rejected; vk's no_capacity and lost).
//
// # Goals
//
// [GoalScenarios] are the reference workload of issue 15 (at 0.9 and 1.1
// of capacity) and two scenarios with both tenants backlogged; [Metrics]
// are the figures its goals judge, each with the goal in words and a check
// of vk's value against it or against the baselines of the same seed.
// [RunGoals] runs them on several seeds and [GoalRun.WriteMarkdown] writes
// the table (`vk-sim goals`).
//
// [VKParams.Variants] add runs of the same core with some policy knobs
// changed ("vk/NAME"), e.g. packing above a utilization threshold and drain
// reservations for wide jobs (BS-21, BS-22), so a candidate policy is
// compared with the current one on the same jobs (BS-06).
//
// # Choices where the spec is silent
//
//   - Relays run without a relay-wide concurrent and runners without a
//     limit (vk-gitlab's defaults would cap a tenant at 10 jobs): an
//     operator sizes them to the fleet; relay_concurrent models a limit.
//   - The hub's tick (tick_every, default 250 ms as the hub's tick_ms)
//     decides when the Core's deadlines fire; the sim sends a Tick only at
//     the first tick at or after the Core's next deadline.
//   - A finished job reports its name (project/template) and wall time, so
//     the Core's runtime statistics (BS-23) see every job.
//   - Memory is sized at 4 GiB per vCPU in nodes and jobs alike, so
//     sched's memory bound (it treats vCPUs as load, PLACE-12) and the
//     baselines' vCPU fit agree; the sim's node ledger checks both.
//   - Relays heartbeat when their session starts and every
//     heartbeat_every (default 10 s), listing each runner's admissions with
//     a GitLab request out and those of its unsettled jobs (RSESS-04); a
//     request out longer than a third of its lease is renewed (API-29).
//   - Jobs are submitted without a place_within deadline.
//   - The quota check re-runs every check_interval × U[0.5, 1.5) after a
//     failure or an empty answer, so all managers see a freed slot within
//     about one interval (K8S-05).
//   - Pods over hard are rejected at creation; a pod in quota that no node
//     fits (fragmentation) still waits for poll_timeout.
//   - A pod carries the runner's per-pod cpu and memory requests unless
//     the runner sets memory_request = false; such a pod is rejected at
//     admission under a requests.memory quota whatever the room, as
//     Kubernetes does (K8S-12), rather than the scenario being refused:
//     the report then shows what the baseline costs in such a namespace
//     beside vk, which needs no quota. The capacity check counts such a
//     runner's pods as requesting no memory (its configured amount).
//   - Node placement ignores whether a pod sets a memory request: every
//     pod occupies its envelope on its node.
//   - k8s-lease's hard is the quota's (K8S-11), so both policies aim at
//     the same capacity; a refused take costs an API call like a granted
//     one; the sweeper is one process that never crashes (leader-elected
//     among the managers); renewals are counted, not simulated as events
//     (a live holder renews every lease_renew from the lease's creation).
//   - A crashed manager's running jobs fail and their pods go at once: in
//     gitlab-runner the job is lost with its manager either way, and how
//     long an orphaned pod lingers is the same for both quota policies, so
//     the comparison isolates what differs: the leases left behind.
package sim
