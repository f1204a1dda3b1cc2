package dispatch

import (
	"testing"

	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/internal/golden"
	"github.com/vk-ci/vk/proto/job"
)

func check(t *testing.T, name string, f Frame) {
	t.Helper()
	t.Run(name, func(t *testing.T) { golden.Check(t, name, f, Encode, Decode) })
}

var (
	envelope = client.Envelope{Mem: 16 * client.GiB, CPUs: 8, Disk: 16 * client.GiB}
	load     = 1.25
	exitCode = 2
)

func sampleSpec() job.JobSpec {
	return job.NewGitLabCI(&job.CiJob{
		Job:         job.JobInfo{ID: 4242, ProjectID: 12, ProjectPath: "acme/web", RunnerID: 31},
		Token:       "glcbt-secret",
		Sources:     job.Sources{RepoURL: "https://gitlab.example.com/acme/web.git", Ref: "main", SHA: "1f8b2e7c", RefType: "branch"},
		TimeoutSecs: 3600,
		Variables:   []job.Variable{{Key: "CI_JOB_ID", Value: "4242", Public: true}},
		Steps:       []job.Step{{Name: "script", Script: []string{"make test"}, When: "on_success"}},
		Trace:       job.TraceSettings{Sections: true, TokenMaskPrefixes: []string{"glpat-"}, LimitBytes: job.DefaultTraceLimitBytes},
		ServerURL:   "https://gitlab.example.com",
	})
}

// TestGoldenSession pins the session-level frames.
//
// spec: PROTO-01, NSESS-03, NSESS-11, NSESS-24
func TestGoldenSession(t *testing.T) {
	check(t, "hello", Frame{Msg: &Hello{Versions: NodeVersions, Node: "node-3", Release: "0.4.1"}})
	check(t, "hello_resume", Frame{Msg: &Hello{Versions: NodeVersions, Node: "node-3", Release: "0.4.1", Resume: &Resume{Handle: "ns-81c2", LastSeq: 41}}})
	check(t, "welcome", Frame{Msg: &Welcome{Version: 6, Handle: "ns-81c2", HeartbeatSecs: 5, UnreachableAfterSecs: 15}})
	check(t, "welcome_resumed", Frame{Msg: &Welcome{Version: 6, Handle: "ns-81c2", Resumed: true, LastSeq: 97, HeartbeatSecs: 5, UnreachableAfterSecs: 15}})
	check(t, "error_version", Frame{Msg: &ErrorFrame{Code: ErrorVersion, Message: "node session: protocol version mismatch: we speak 3..6, peer speaks 1..2: the peer is too old and must be upgraded", Versions: &HubVersions}})
	check(t, "keepalive", Frame{Msg: &Keepalive{}})
	check(t, "settings", Frame{Seq: 1, Msg: &Settings{Ceiling: 6, Pools: []string{"ci", "release"}}})
	check(t, "settings_ceiling_zero_drain", Frame{Seq: 2, Msg: &Settings{CeilingZero: true, Drain: true}})
	check(t, "report", Frame{Seq: 1, Msg: &Report{
		Release: "0.4.1", Host: "node3.example.com",
		Resources: Resources{Mem: 256 * client.GiB, Disk: 2 * client.TiB, CPUs: 64},
		Labels:    []string{"large-memory", "x86_64-v3"}, Pools: []string{"ci"},
		Registry: "https://registry.example.com", MaxConcurrency: 8, Executor: "process",
	}})
	check(t, "report_local_runner", Frame{Seq: 1, Msg: &Report{Release: "0.4.1", Host: "dev1", Resources: Resources{Mem: 32 * client.GiB, Disk: 512 * client.GiB, CPUs: 8}, Executor: "oci", LocalRunner: true}})
	check(t, "heartbeat", Frame{Seq: 2, Msg: &Heartbeat{State: NodeReady, Load1: &load, Jobs: 3, Reservations: 1, Free: &Resources{Mem: 200 * client.GiB, Disk: 1536 * client.GiB, CPUs: 40}}})
	check(t, "heartbeat_draining_no_load", Frame{Seq: 3, Msg: &Heartbeat{State: NodeDraining, Jobs: 1}})
}

// TestGoldenJobMessages pins every job message (type "job").
//
// spec: PROTO-01, NSESS-01, NSESS-04, NSESS-05, NSESS-06, NSESS-07, NSESS-08, NSESS-09, NSESS-10, NSESS-11, NSESS-12, NSESS-13, NSESS-14, NSESS-15, NSESS-16, NSESS-17, NSESS-18, NSESS-19, NSESS-21
func TestGoldenJobMessages(t *testing.T) {
	check(t, "offer", Frame{Seq: 10, Msg: &Offer{Reservation: "res-9", Envelope: envelope, LeaseSecs: 90}})
	check(t, "offer_reply_accepted", Frame{Seq: 11, Msg: &OfferReply{Reservation: "res-9", Reply: ReplyAccepted, LeaseSecs: 90}})
	for _, r := range []RefusalReason{RefusalMemory, RefusalDisk, RefusalCPUs, RefusalNotReady, RefusalPolicy, RefusalNoReservation, RefusalInvalid, RefusalCeiling, RefusalConcurrency, RefusalRunner} {
		check(t, "offer_reply_refused_"+string(r), Frame{Seq: 12, Msg: &OfferReply{Reservation: "res-9", Reply: ReplyRefused, Reason: r}})
	}
	check(t, "offer_reply_refused_message", Frame{Seq: 12, Msg: &OfferReply{Reservation: "res-9", Reply: ReplyRefused, Reason: RefusalMemory, Message: "16G asked, 12G free"}})
	check(t, "renew", Frame{Seq: 13, Msg: &Renew{Reservation: "res-9", LeaseSecs: 90}})
	check(t, "lease_held", Frame{Seq: 14, Msg: &Lease{Reservation: "res-9", State: LeaseHeld, RemainingSecs: 90}})
	for _, w := range []GoneWhy{GoneExpired, GoneReleased, GoneStarted, GoneUnknown} {
		check(t, "lease_gone_"+string(w), Frame{Seq: 15, Msg: &Lease{Reservation: "res-9", State: LeaseGone, Why: w}})
	}
	check(t, "release", Frame{Seq: 16, Msg: &Release{Reservation: "res-9"}})
	check(t, "held", Frame{Seq: 2, Msg: &Held{
		Reservations: []HeldReservation{{Reservation: "res-9", Envelope: envelope, RemainingSecs: 41}},
		Jobs:         []HeldJob{{Job: "job-1", Spooled: 18234}, {Job: "job-0", Finished: true, Spooled: 80}},
	}})
	check(t, "held_empty", Frame{Seq: 2, Msg: &Held{}})
	check(t, "start", Frame{Seq: 17, Msg: &Start{Job: "job-1", Reservation: "res-9", Envelope: envelope, Spec: sampleSpec()}})
	check(t, "start_cache_registry", Frame{Seq: 17, Msg: &Start{Job: "job-1", Reservation: "res-9", Envelope: envelope, Spec: sampleSpec(),
		Cache: &CacheRegistry{Repository: "ci-cache/gitlab.example.com/12", Token: "reg-token", ExpiresInSecs: 3600}}})
	check(t, "start_no_reservation", Frame{Seq: 17, Msg: &Start{Job: "job-1", Envelope: envelope, Spec: sampleSpec()}})
	check(t, "job_accepted", Frame{Seq: 18, Msg: &JobUpdate{Job: "job-1", State: JobAccepted}})
	check(t, "job_refused", Frame{Seq: 18, Msg: &JobUpdate{Job: "job-1", State: JobRefused, Reason: RefusalNoReservation, Message: "reservation res-9 not held; 16G asked, 4G free"}})
	check(t, "job_running", Frame{Seq: 19, Msg: &JobUpdate{Job: "job-1", State: JobRunning, Stage: "prepare_executor", Activity: "pulling ruby:3.3"}})
	check(t, "job_running_guest", Frame{Seq: 20, Msg: &JobUpdate{Job: "job-1", State: JobRunning, Stage: "step_script", Guest: &Guest{CPUs: 4, MemMiB: 8192}}})
	check(t, "job_finished", Frame{Seq: 21, Msg: &JobUpdate{Job: "job-1", State: JobFinished}})
	check(t, "output", Frame{Seq: 22, Msg: &Output{Job: "job-1", Offset: 4096, Data: []byte("2026-11-30T02:30:00.000000Z 01O \x1b[32;1m$ make test\x1b[0;m\n")}})
	check(t, "output_ack", Frame{Seq: 23, Msg: &OutputAck{Job: "job-1", Offset: 4160}})
	check(t, "cancel_graceful", Frame{Seq: 24, Msg: &Cancel{Job: "job-1", Mode: client.CancelGraceful}})
	check(t, "cancel_immediate", Frame{Seq: 25, Msg: &Cancel{Job: "job-1", Mode: client.CancelImmediate}})
	report := EgressReport{Revision: 7, TxBytes: 1048576, RxBytes: 73400320, Connections: 12,
		Destinations: []EgressDestination{{Host: "registry.example.com", Port: 443, Proto: "tcp", TxBytes: 524288, RxBytes: 73000000}, {Host: "10.0.0.53", Port: 53, Proto: "udp", TxBytes: 2048, RxBytes: 4096}}}
	check(t, "egress", Frame{Seq: 26, Msg: &Egress{Job: "job-1", Report: report}})
	check(t, "result", Frame{Seq: 27, Msg: &Result{Job: "job-1", Result: client.JobResult{
		Failure: client.FailureScript, ExitCode: &exitCode, Message: "step_script exited 2", OutputLen: 18234,
		Artifacts: []client.ArtifactUpload{{Name: "coverage", ArtifactType: "archive", Outcome: client.ArtifactUploaded, SizeBytes: 52311}},
		Usage:     &client.Usage{WallMS: 93412, CPUs: 4, MemMiB: 8192},
	}, Egress: &report}})
	check(t, "result_success", Frame{Seq: 27, Msg: &Result{Job: "job-1", Result: client.JobResult{OutputLen: 80, Usage: &client.Usage{WallMS: 1200}}}})
	check(t, "recorded", Frame{Seq: 28, Msg: &Recorded{Job: "job-1"}})
}

// TestGoldenEpochs pins the leader epoch the hub's commands carry with a
// lease (docs/ha.md); without one the field is absent, as above.
//
// spec: BS-11, BS-15
func TestGoldenEpochs(t *testing.T) {
	check(t, "offer_epoch", Frame{Seq: 10, Msg: &Offer{Reservation: "res-9", Envelope: envelope, LeaseSecs: 90, Epoch: 3}})
	check(t, "renew_epoch", Frame{Seq: 13, Msg: &Renew{Reservation: "res-9", LeaseSecs: 90, Epoch: 3}})
	check(t, "release_epoch", Frame{Seq: 16, Msg: &Release{Reservation: "res-9", Epoch: 3}})
	check(t, "start_epoch", Frame{Seq: 17, Msg: &Start{Job: "job-1", Envelope: envelope, Spec: sampleSpec(), Epoch: 3}})
	check(t, "cancel_epoch", Frame{Seq: 24, Msg: &Cancel{Job: "job-1", Mode: client.CancelImmediate, Epoch: 3}})
	check(t, "output_ack_epoch", Frame{Seq: 23, Msg: &OutputAck{Job: "job-1", Offset: 4160, Epoch: 3}})
	check(t, "settings_epoch", Frame{Seq: 1, Msg: &Settings{Epoch: 3}})
}
