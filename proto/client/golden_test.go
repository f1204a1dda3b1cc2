package client

import (
	"testing"
	"time"

	"github.com/vk-ci/vk/proto/internal/golden"
	"github.com/vk-ci/vk/proto/job"
)

func check[T any](t *testing.T, name string, v T) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		enc, dec := golden.JSON[T]()
		golden.Check(t, name, v, enc, dec)
	})
}

func checkRelay(t *testing.T, name string, f RelayFrame) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		golden.Check(t, name, f, EncodeRelayFrame, DecodeRelayFrame)
	})
}

var (
	envelope  = Envelope{Mem: 16 * GiB, CPUs: 8, Disk: 16 * GiB}
	placement = Placement{Pool: "ci", Labels: []string{"large-memory"}, Envelope: envelope}
	requestID = "4f1c2a9b8e7d6c5b4a3f2e1d0c9b8a7f"
	exitCode  = 1
)

func sampleSpec() job.JobSpec {
	return job.NewGitLabCI(&job.CiJob{
		Job:         job.JobInfo{ID: 4242, ProjectID: 12, ProjectPath: "acme/web"},
		Token:       "glcbt-secret",
		Sources:     job.Sources{RepoURL: "https://gitlab.example.com/acme/web.git", Ref: "main", SHA: "1f8b2e7c"},
		TimeoutSecs: 3600,
		Steps:       []job.Step{{Name: "script", Script: []string{"make test"}, When: "on_success"}},
		Trace:       job.TraceSettings{Sections: true, LimitBytes: job.DefaultTraceLimitBytes},
		ServerURL:   "https://gitlab.example.com",
	})
}

func sampleResult() *JobResult {
	return &JobResult{
		Failure: FailureScript, ExitCode: &exitCode, Message: "step_script exited 1",
		OutputLen: 18234,
		Artifacts: []ArtifactUpload{
			{Name: "coverage", ArtifactType: "archive", Outcome: ArtifactUploaded, SizeBytes: 52311},
			{Name: "junit", ArtifactType: "junit", Outcome: ArtifactSkipped, Message: "when: on_success"},
			{Name: "big", ArtifactType: "archive", Outcome: ArtifactTooLarge, SizeBytes: 1 << 30, Message: "413 Request Entity Too Large"},
			{Name: "flaky", ArtifactType: "archive", Outcome: ArtifactFailed, Message: "connection reset"},
		},
		Usage: &Usage{WallMS: 93412, CPUMS: 120330, PeakMemBytes: 1288490188, CPUs: 4, MemMiB: 8192},
	}
}

// TestGoldenBodies pins every client API body.
//
// spec: PROTO-01, PROTO-02, PROTO-03, PROTO-04, PROTO-05, PROTO-06, PROTO-07, PROTO-08, PROTO-09, PROTO-10, PROTO-11, API-02, API-03, API-05, API-06, API-07, API-08, API-09, API-55
func TestGoldenBodies(t *testing.T) {
	check(t, "envelope", envelope)
	check(t, "placement", placement)
	check(t, "placement_no_labels", Placement{Pool: "ci", Envelope: Envelope{Mem: 512 * MiB, CPUs: 1, Disk: 1536 * MiB}})
	check(t, "capacity_request", CapacityRequest{Runner: "ci", Placement: placement, After: 17, WaitSecs: 30})
	check(t, "capacity", Capacity{Revision: 18, Fits: 5})
	check(t, "reservation_request", ReservationRequest{Runner: "ci", Queue: true, RequestID: requestID, Placement: placement, LeaseSecs: 90, WaitSecs: 30})
	check(t, "reservation_grant", ReservationGrant{Admission: "adm-7", Reservation: "res-9", Node: "node-3", Envelope: envelope, LeaseSecs: 87})
	check(t, "reservation_ticket", ReservationTicket{Ticket: "tkt-5"})
	check(t, "renew_request", RenewRequest{LeaseSecs: 90})
	check(t, "renew_request_default", RenewRequest{})
	for _, o := range []Outcome{OutcomeJob, OutcomeEmpty, OutcomeError, OutcomeReleased} {
		check(t, "outcome_request_"+string(o), OutcomeRequest{Admission: "adm-7", Outcome: o})
	}
	check(t, "outcome_request_next", OutcomeRequest{Admission: "adm-7", Outcome: OutcomeEmpty,
		Next: &ReservationRequest{Runner: "ci", Queue: true, RequestID: requestID, Placement: placement, LeaseSecs: 90}})
	check(t, "job_submission", JobSubmission{Runner: "ci", Admission: "adm-7", RequestID: requestID, Placement: placement, Reservation: "res-9", PlaceWithinSecs: 300, Spec: sampleSpec()})
	check(t, "job_submission_gitlab_queue", JobSubmission{Runner: "ci", Admission: "adm-7", RequestID: requestID, Placement: placement,
		Reservation: "res-9", PlaceWithinSecs: 300, Spec: sampleSpec(), Queue: &GitLabQueue{TimeInQueueSecs: 12.5, Size: 40, Depth: 3}})
	check(t, "job_submission_no_reservation", JobSubmission{Runner: "ci", RequestID: requestID, Placement: placement, PlaceWithinSecs: 300, Spec: sampleSpec()})
	check(t, "job_view_queued", JobView{ID: "job-1", Revision: 1, State: JobQueued})
	est := int64(340)
	check(t, "job_view_queued_wait", JobView{ID: "job-1", Revision: 1, State: JobQueued, Wait: &JobWait{
		Reason: "waiting: no ready node of the placement has room", Class: "normal", Ahead: 3, Waiting: 7, EstimatedSecs: &est}})
	check(t, "job_view_queued_wait_unknown", JobView{ID: "job-1", Revision: 1, State: JobQueued, Wait: &JobWait{
		Reason: "waiting: tenant cap 20 reached", Class: "normal", Ahead: 7, Waiting: 8}})
	check(t, "job_view_running", JobView{ID: "job-1", Revision: 4, State: JobRunning, Node: "node-3", Stage: "step_script", OutputLen: 4096, Cancel: CancelGraceful})
	check(t, "job_view_finished", JobView{ID: "job-1", Revision: 7, State: JobFinished, Node: "node-3", Stage: "cleanup", OutputLen: 18234, Result: sampleResult()})
	check(t, "job_result_failed", *sampleResult())
	check(t, "job_result_success", JobResult{OutputLen: 80, Usage: &Usage{WallMS: 1200}})
	check(t, "job_result_lost", JobResult{Failure: FailureLost, Message: "node node-3 unreachable for 5m0s", OutputLen: 1024})
	check(t, "usage", Usage{WallMS: 93412, CPUMS: 120330, PeakMemBytes: 1288490188, CPUs: 4, MemMiB: 8192})
	check(t, "usage_wall_only", Usage{WallMS: 1})
	check(t, "artifact_upload", sampleResult().Artifacts[0])
	check(t, "cancel_request", CancelRequest{Mode: CancelImmediate})
	check(t, "client_hello", ClientHello{Name: "ci-dashboard", Version: "2.1.0"})
	check(t, "error", Error{Error: "no node accepted in time", Code: CodeNoCapacity, RetryAfterSecs: 5})
	check(t, "error_standby", Error{Error: "this hub instance is a standby", Code: CodeUnavailable, RetryAfterSecs: 1, Leader: "https://hub-b.example.com:8443"})
	check(t, "error_approval_pending", Error{Error: "project acme/web (ID 12) is waiting for approval", Code: CodeApprovalPending, ApprovalURL: "https://hub.example.com:8444/gitlab/main/projects/12"})
	check(t, "version_range", VersionRange{Min: 2, Max: 3})
}

// TestGoldenJoin pins the enrolment bodies.
//
// spec: PROTO-01, AUTH-08
func TestGoldenJoin(t *testing.T) {
	check(t, "join_request", JoinRequest{Token: "vkj_node_3q2-7wEAAQ", PublicKey: "O2onvM62pC1io6jQKm8Nc2UyFXcd4kOmOsBIoYtZ2ik=", Name: "ci-1.example", Kind: KindNode})
	check(t, "join_response", JoinResponse{ID: "node-7f3a", CAPEM: "-----BEGIN CERTIFICATE-----\nMIIB...\n-----END CERTIFICATE-----\n"})
}

// TestGoldenRelaySession pins every relay session frame.
//
// spec: PROTO-01, RSESS-02, RSESS-03, RSESS-04, RSESS-05, RSESS-07, RSESS-10
func TestGoldenRelaySession(t *testing.T) {
	at := time.Date(2026, 11, 30, 2, 30, 0, 0, time.UTC)
	checkRelay(t, "relay_hello", RelayFrame{Msg: &RelayHello{Versions: RelayClientVersions, Relay: "relay-1", Release: "0.4.1"}})
	checkRelay(t, "relay_welcome", RelayFrame{Msg: &RelayWelcome{Version: 3, Handle: "rs-5f2a", HeartbeatSecs: 10}})
	checkRelay(t, "relay_error_version", RelayFrame{Msg: &RelayError{Code: RelayErrorVersion, Message: "relay session: protocol version mismatch: we speak 2..4, peer speaks 1..1", Versions: &RelayHubVersions}})
	checkRelay(t, "relay_keepalive", RelayFrame{Msg: &RelayKeepalive{}})
	checkRelay(t, "relay_report", RelayFrame{Seq: 1, Msg: &RelayReport{
		Release: "0.4.1", Host: "relay1.example.com", SystemID: "s_0123456789ab", Concurrent: 10,
		GitLabURL: "https://gitlab.example.com", ServerKeySHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		Runners: []RunnerReport{
			{Name: "ci", GitLabRunnerID: 31, Placement: placement, Limit: 4, RequestConcurrency: 2, TokenAccepted: true},
			{Name: "small", Placement: Placement{Pool: "ci", Envelope: Envelope{Mem: 2 * GiB, CPUs: 1, Disk: 4 * GiB}}, RequestConcurrency: 1},
		},
	}})
	checkRelay(t, "relay_report_allow", RelayFrame{Seq: 1, Msg: &RelayReport{
		Release: "0.4.1", Host: "relay1.example.com", SystemID: "s_0123456789ab", Concurrent: 10,
		GitLabURL: "https://gitlab.example.com",
		Runners:   []RunnerReport{{Name: "ci", GitLabRunnerID: 31, Placement: placement, RequestConcurrency: 2, TokenAccepted: true}},
		Allow:     []string{RelayAllowUpdate},
	}})
	checkRelay(t, "relay_heartbeat", RelayFrame{Seq: 2, Msg: &RelayHeartbeat{Runners: []RunnerHeartbeat{
		{Name: "ci", State: RunnerPolling, Tickets: []string{"tkt-5"}, RequestAdmissions: []string{"adm-7"},
			JobAdmissions: []JobAdmission{{GitLabJob: 4242, Job: "job-1", Admission: "adm-6"}, {GitLabJob: 4100}},
			LastAnswer:    &GitLabAnswer{Status: 204, At: at}},
		{Name: "small", State: RunnerTokenRefused, LastAnswer: &GitLabAnswer{Status: 403, At: at, Error: "403 Forbidden"}},
	}}})
	for _, s := range []RunnerState{RunnerWaitingCapacity, RunnerServerPending, RunnerUnhealthy} {
		checkRelay(t, "relay_heartbeat_"+string(s), RelayFrame{Seq: 3, Msg: &RelayHeartbeat{Runners: []RunnerHeartbeat{{Name: "ci", State: s}}}})
	}
	checkRelay(t, "server_status_approved", RelayFrame{Seq: 1, Msg: &ServerStatus{Status: ApprovalApproved}})
	checkRelay(t, "server_status_pending", RelayFrame{Seq: 2, Msg: &ServerStatus{Status: ApprovalPending, ApprovalURL: "https://hub.example.com:8444/gitlab"}})
	checkRelay(t, "server_status_refused", RelayFrame{Seq: 3, Msg: &ServerStatus{Status: ApprovalRefused, Message: "relay removed"}})
	checkRelay(t, "relay_update", RelayFrame{Seq: 4, Msg: &Update{Release: "0.5.0", URL: "https://hub.example.com/v1/releases/0.5.0/vk-gitlab", SHA256: "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"}})
	checkRelay(t, "relay_update_signed", RelayFrame{Seq: 5, Msg: &Update{Release: "0.5.0", URL: "https://hub.example.com/v1/releases/0.5.0/vk-gitlab",
		SHA256: "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae", Size: 31457280,
		Signature: "3q2+7wAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=="}})
}

// A failure's metrics label is the same word on hub and node: "success"
// when the job did not fail.
func TestFailureMetricLabel(t *testing.T) {
	for f, want := range map[Failure]string{"": "success", FailureScript: "script", FailureNoCapacity: "no_capacity"} {
		if got := f.MetricLabel(); got != want {
			t.Errorf("Failure(%q).MetricLabel() = %q, want %q", f, got, want)
		}
	}
}
