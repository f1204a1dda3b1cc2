// Package node is the node agent (`vk node run`): it wires the admission
// ledger (node/ledger), the start journal (node/journal), the output spools
// (node/spool), the stage runner (node/stage) on the process and container
// executors (node/exec/process, node/exec/oci) and the hub session client
// (node/session) into one running [Agent].
//
// # What the agent does with each hub frame
//
//	offer     → ledger.Offer → offer_reply at once (NODE-01)
//	renew     → ledger.Renew → lease held {remaining} | gone {why}
//	release   → ledger.Release → lease gone released
//	(timer)   → ledger.Expire at NextExpiry → lease gone expired (NODE-03)
//	start     → journal lookup (a redelivered start is answered from the
//	            journal and never run twice, NODE-06) → ledger.Start
//	            (converting the reservation, NODE-07/08) → spool opened →
//	            journal.Accept (synced) → job accepted → size (NODE-09,
//	            DECISIONS 9) → wait in the ledger if short → stage runner →
//	            job running {stage, guest} at each stage start, from the
//	            runner's OnStage hook (NSESS-14/18); egress sampled there
//	            and every 5 s (oci jobs, NSESS-17..20)
//	            → job finished → result once all output is acked (NODE-13),
//	            repeated until recorded (NSESS-16)
//	output_ack→ spool.Ack; the sender moves on (≤ 256 KiB a frame, ≤ 4 MiB
//	            unacked, NODE-11)
//	cancel    → Handle.Cancel(graceful|immediate); job running
//	            {activity: canceling} now, then finished and result (NSESS-09)
//	recorded  → journal.Recorded, spool removed
//	settings  → ledger ceiling (PLACE-06), pools reported back
//
// On every new session (not a resumed one) the agent sends report (with
// the registry base URL, XFER-17, max_concurrency, local runner) then held
// (reservations with the lease left, jobs followed with their spooled
// length), resets each job's send offset to its last ack and repeats every
// pending result; the hub answers held with output_ack at its stored
// offset, which moves the sender forward (NSESS-24). A resumed session
// needs none of that: the session client replays unprocessed frames.
//
// # Choices where the spec is silent
//
//   - The journal keeps a start without its secrets (Start.Redacted): the
//     process executor's jobs die with the node, so no job is ever resumed
//     from the journal and its tokens need not reach the disk (XFER-16).
//   - After a restart, a job the journal says was accepted or running ends
//     interrupted (FAIL-08): its spooled output is kept, one
//     "ERROR: Job failed: …" line is appended while under the trace limit,
//     and its result is sent once the hub acked all of it.
//   - A start the node cannot journal or spool is refused not_ready with
//     the error in the message (the job was not taken; the hub may place
//     it elsewhere).
//   - A cancel naming a job the node does not know is answered refused
//     invalid "unknown job"; one naming a finished job is answered finished
//     and the result is repeated at once.
//   - The spool lets a job produce up to [OutputConfig.SpoolLimit] (64 MiB
//     by default) past the hub's last ack before its writes block, so jobs
//     keep running through a hub outage (FAIL-18); at most 4 MiB is ever
//     sent unacked (NODE-11).
//   - Results are repeated after 5 s, doubling to 1 min, and at once after
//     every new session or redelivered start.
//   - Drain and quarantine are local operator actions: SIGUSR1 drains,
//     SIGUSR2 makes the node ready again (`vk node run`); the control
//     socket <state_dir>/node.sock (0600, [Control], `vk node
//     drain|ready|quarantine|status`) does the same and quarantines
//     (every held reservation released at once, NODE-05);
//     [Agent.SetState] for embedders. SIGTERM drains, waits up to
//     shutdown_timeout_secs for running jobs, then interrupts them.
//
// # Executors
//
// [ExecutorConfig.Backend] picks how jobs run. process: every job under
// bash on the host (an image is ignored with a warning in the trace).
// oci: every job in its image under runc (node/exec/oci); the agent does
// not start without runc, root and cgroup v1. auto: every job in its own
// microVM, as microvm under KVM, where a probe guest boots at start;
// elsewhere oci.Chooser decides per job — a container when the job names an image (or
// [ExecutorConfig.DefaultImage] is set) and the container backend is
// available, else the process backend; [ExecutorConfig.RequireImage]
// makes an imageless job fail configuration (FAIL-05). The stage runner
// is shared; each job's executor goes in its stage.Spec, with the
// chooser's warnings and, after Prepare, the container job's own (a
// service's dropped aliases, DECISIONS 8) written to the trace as
// warnings. An image that cannot be pulled ends the job image_pull with
// the registry's answer in the trace (FAIL-04). Images are kept in
// <state_dir>/images and swept every quarter of image_cache_idle_secs
// (10 s to 5 min) of those idle that long (PLACE-15, DECISIONS 10).
//
// # Crash leftovers
//
// Before it recovers the journal, the agent removes what jobs of a killed
// predecessor left: the containers in its private runc root, the mounts
// and job directories under <state_dir>/oci, and every job cgroup under
// the process backend's parent (with cgroups) and the oci backend's
// (<cgroup_parent>-oci, default vk-oci), killing what still runs there.
// These parents belong to the agent: one agent per host, or distinct
// cgroup_parent values.
//
// # Egress (NSESS-17..20)
//
// Only oci jobs are measured: their container has a network namespace of
// its own, whose non-loopback interfaces' byte counters
// (/proc/<init>/net/dev) are the job's egress; traffic to its services
// stays on lo and does not count. A process job shares the host's
// namespace, where its traffic cannot be told from the host's, so its
// result carries no report. A job is sampled at each stage start and
// every 5 s, never within 2 s of the previous sample; a change takes the
// next revision and is sent as an egress frame on sessions of version 6
// or more, and the latest is resent on every new session. The result
// carries the last report (revision 1 with zero bytes when nothing was
// ever counted), journaled with it. The job netns has only lo today, so
// oci jobs report zero until the backend gets outside networking.
//   - A local gitlab-runner is "present" when its systemd unit or binary
//     is (PLACE-10); the node cannot tell which executor it uses, so any
//     such runner counts. `[node] runner = "none"` overrides the check.
package node
