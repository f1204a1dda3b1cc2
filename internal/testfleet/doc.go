// Package testfleet starts a whole vk fleet in one process for end-to-end
// tests and the demo: a hub (hub.Start), nodes (node.Start) and, per
// tenant, a fake GitLab (internal/gitlabfake) and a relay (relay.Run),
// each on its own state directory, talking real TLS 1.3 on loopback with
// real signatures, real git, real bash jobs and, with Options.Caches, the
// real docker-registry for caches. Nothing is a stub of another part.
//
// # Starting
//
//	f, err := testfleet.Start(ctx, testfleet.Options{
//		Nodes:   []testfleet.NodeSpec{{CPUs: 4, Mem: 2 << 30, MaxConcurrency: 3}},
//		Tenants: []testfleet.TenantSpec{{Name: "web", Weight: 1}, {Name: "data", Weight: 3}},
//	})
//	defer f.Close()
//	tn := f.Tenant("web")
//	pl, _ := tn.CreatePipeline("acme/app", files, gitlabfake.PipelineSpec{…})
//	states, _ := tn.WaitFinished(ctx, pl)
//
// Start enrols every node and relay the way an operator does: `vk-hub token
// create --kind node|gitlab` on the hub's admin socket (hub/admin), then a
// join over TLS pinning the CA the hub keeps in its state dir (node.Join,
// hubclient.JoinAndSave); `vk-hub nodes pools <id> ci` puts each node in the
// pool every relay runner places in ([Pool]); `vk-hub capacity-policy set`
// gives each tenant its relay, weight and cap. With Options.Approvals the
// hub requires approvals and the operator approves each GitLab server (not
// its projects).
//
// Each tenant has its own GitLab and relay because one relay speaks to one
// GitLab (RELAY-01) and the fake does not model runner tags: two runners on
// one fake GitLab would take each other's jobs, so tenants could not be
// told apart.
//
// # Faults
//
// Every client reaches a server through its own [Link], a byte-copying TCP
// relay on 127.0.0.1 (TLS stays end to end). The links are how the harness
// kills and cuts without cooperation from the component:
//
//   - [Hub.Kill]: every link to the hub is reset and blocked (peers see a
//     dead server: no close frame, no answer), then the server is stopped
//     with an already-ended context. [Hub.Restart] starts hub.Start again on
//     the same state dir and port and lets the links through. Unlike a
//     SIGKILL, the stop lets the hub's driver and store close, so a record
//     write the hub had queued but not yet answered for still lands; what
//     the peers see is the same.
//   - [Relay.Kill]: its links to the hub and GitLab are reset and blocked,
//     then its context ends (shutdown_timeout is 1 s in a fleet). Its state
//     files stay for [Relay.Restart] (RELAY-09).
//   - [Node.Partition] / [Node.Heal]: the node is unreachable but keeps
//     running its jobs (FAIL-16..18). [Node.CutSession] and
//     [Hub.CutSessions] reset connections once (a network blip).
//   - [Node.Kill]: partition, then the agent is shut down with an ended
//     context, which interrupts its jobs at once (FAIL-08) and keeps
//     unrecorded results in its journal; [Node.Restart] starts it again on
//     its state dir. An in-process agent cannot be SIGKILLed, so this is the
//     closest: nothing reaches the hub after the kill instant. A node of
//     [NodeSpec.Binary] runs as a child process (`vk node run`), and its
//     Kill is a real SIGKILL: its jobs get no cleanup, and what they
//     leave on the host is its next start's sweep's.
//
// # Observing
//
// [Tenant.Transitions] and [Tenant.FirstAt] give every GitLab job state
// change with the time the harness saw it (woken by the fake's change
// channel, not polled). [Tenant.HubJob] reads the hub's job record and
// [Tenant.HubOutput] the output the hub stored from the node; the hub drops
// output at settle (API-41), so the fleet wraps the hub's output store and
// keeps a copy of each output as it is dropped. [Tenant.WaitHubJob] re-reads
// the hub's store every 20 ms: the store has no watch, and the relay's
// long-poll would need the relay's key.
//
// # Choices
//
//   - Short intervals: job_lost_after 3 s (Options.JobLostAfter), hub tick
//     50 ms, capacity policy backoff 1–2 s (the spec's 60 s maximum would
//     leave a test's runners idle between stages), node shutdown timeout
//     5 s, relay shutdown timeout 1 s.
//   - Nodes state their resources (default 4 CPUs, 4 GiB, 20 GiB disk)
//     instead of detecting the host's, so tests behave the same on any
//     machine; runner = "none"; the process executor with cgroups as the
//     node's defaults say, unless [NodeSpec.Executor] is "auto" or "oci":
//     then the node runs jobs that name an image (and their services) in
//     containers under the real runc (node/exec/oci), pulling from the
//     fleet's docker-registry ([Fleet.RegistryHost], started for the
//     first such node) over plain HTTP. Each node has a cgroup parent of
//     its own (vk-<node id>, vk-<node id>-oci). [Node.Leftovers] lists the
//     containers, mounts and job cgroups a node holds; [Fleet.Close]
//     removes any a stopped node left and reports them ([ErrLeftovers]).
//   - Each relay has one runner, [RunnerName], in pool [Pool], with
//     request_concurrency 4 and concurrent 16 unless the TenantSpec says
//     otherwise.
package testfleet
