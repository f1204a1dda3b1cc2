// Package loadgen is vk's load generator for the hub: `vk-bench`
// and the go test benchmark beside it drive full job lifecycles through
// a real hub over the real protocol and report how fast the hub is
// against what the machine itself allows.
//
// # What one run does
//
// Unless it is given a running hub, Run starts one: the hub binary as a
// child process (the hub's `serve`) on a loopback port in a temporary state
// directory, with a configuration tuned for load (no approvals, a probe
// limit and per-principal limits above what the run needs). It then
// enrols R relays and N lightweight nodes with one-time tokens from the
// hub's admin socket, exactly as operators enrol real ones, and puts
// every node in one pool.
//
// A lightweight node is a real node session (node/session: signed
// WebSocket hello, resumable stream, heartbeats) with a few lines of
// bookkeeping instead of an executor: it accepts every offer, and
// answers every start with accepted, a few KiB of output, finished and
// the result at once. A relay loop runs the client-API side of a job's
// life the way vk-gitlab does: reserve, poll the ticket, claim, report
// outcome job, submit, follow the job's view until it finishes, read the
// output and settle. Every request is signed and sent through hubclient,
// which resumes TLS sessions as the relay does.
//
// # What it reports
//
// Lifecycles per second over the measured window (after a warm-up),
// each endpoint's p50 and p99, the hub's CPU per lifecycle and its
// resident memory (read from /proc for a child hub), and the machine's
// floor measured in the same run: a signed request that does no work on
// a fresh and on a resumed TLS connection, and bbolt's durable commits
// per second in the hub's own file system. The lifecycle rate is then
// put beside what that floor allows for the same number of requests.
//
// # Failover at fleet size
//
// RunHA measures the other thing an operator of two hub instances asks:
// how long the fleet waits when the leader's process dies. It starts
// two hub instances on one PostgreSQL database under the leader lease,
// gives every lightweight node a session to both (reports to both, as a
// real node with [node] hubs does), gives every relay both instances'
// URLs (as vk-gitlab with [hub] urls), and SIGKILLs the leader again
// and again while the relays' loops run lifecycles. It reports, per
// kill, when the other instance led, when the first reservation grant
// answered a request sent after the kill, and when every loop had one;
// then the report ingest of both instances at a fixed report rate, the
// cost a standby pays for staying hot (docs/ha.md, BS-09).
package loadgen
