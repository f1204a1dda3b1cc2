// Package demo is `vk demo`, the first command a new user runs: a whole
// fleet on one machine, one real pipeline through it, and what happened.
//
// [Run] starts, in-process and in a temporary directory, a hub, two nodes
// (4 CPUs, 2 GiB, at most three jobs each) and, for each of two tenants
// ("web", weight 1, and "data", weight 3), a built-in fake GitLab and a
// relay, all over TLS on loopback (internal/testfleet), with the real
// docker-registry for caches when it is installed. It loads [Sample]: per
// tenant a git repository holding a tiny shell app and a three-stage
// pipeline (20 jobs in all) whose build passes dist/ to later stages as
// an artifact and keeps .deps/ in a cache, with one job that fails on
// purpose ([FailingJob]) and one that asks for more memory than its
// runner's envelope and waits in the node's ledger for room ([BigJob]).
// It prints progress as it happens (jobs by state, which node, why a job
// waits), then a summary table (per job: tenant, stage, node, wait, run
// time, result), writes every job's trace to <dir>/traces and prints two
// short ones in full. It returns nil when every job ended as the sample
// expects. [Command] is the cobra command (`--keep`, `--hub-addr`, `--dir`,
// `--containers`).
//
// With [Options.Containers] (`--containers`) the nodes run executor
// "auto"; the demo first checks the host ([ContainersAvailable]: root,
// cgroup v1, runc, busybox-static, docker-registry, bash) and fails at
// once with [ErrNoContainers] when a part is missing, then, once the fleet
// is up, builds a busybox + bash image with internal/ocitest, pushes it to
// the fleet's registry, and adds [ImageJob] to the web pipeline: it runs
// in that image with the image's httpd as a service (alias
// [ImageService]) and prints what only the image and the service have.
//
// The rendering ([StatusLine], [Events], [Summary]) is pure over a
// [Snapshot] and golden-tested; the collector builds snapshots from
// GitLab's view (job states, traces) joined with the hub's job records.
//
// # Choices
//
//   - Wait is the time from a job becoming pending in GitLab to its first
//     stage starting on a node (so it includes reservation, GitLab
//     hand-off, submission and, for BigJob, the ledger wait); run time is
//     from that start to GitLab seeing the job end. Both are observed by
//     sampling every 250 ms (GitLab's end time is exact).
//   - A wait reason is shown once it lasted 300 ms ([MinWaitShown]), so
//     the instants between two states are not reported as waits.
//   - The fleet's state is removed at the end; the traces and the
//     components' log (fleet.log) stay in the directory, whose path is
//     printed. --keep keeps the fleet running until Ctrl-C.
//   - The demo image exposes the service's port (8080), so the node
//     waits for the service to listen before the job's script runs, as
//     gitlab-runner's health check does.
//   - docs/demo.md is the user-facing description.
package demo
